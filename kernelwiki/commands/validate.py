"""`kernelwiki validate`: schemas, vocabulary, cross-references, hashes and canonical formatting.

Every finding is a Problem (`path:line: field: what is wrong`); bad input never raises.
Per-page checks are cached with the index (by mtime and size); cross-file checks always run.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from kernelwiki.model import yamlio
from kernelwiki.harness import peaks
from kernelwiki.harness.env import FAKE_DRIVER, is_fake, short_gpu_name
from kernelwiki.harness.peaks import ceiling_name_problem
from kernelwiki.storage.index import Entry, Wiki
from kernelwiki.model.pages import Page, line_of, read_page_bytes, render_page
from kernelwiki.model.yamlio import LineMap
from kernelwiki.model.problems import Problem, field_path
from kernelwiki.model.terminal import CONTROL
from kernelwiki.storage.record_file import run_id_of, without_suffix
from kernelwiki.storage.records import order_key, probe_ids, scan
from kernelwiki.probing.specs import entry_problem, link_problem
from kernelwiki.model.files import UnsafeFile, replace_file, sha256_file, stays_below
from kernelwiki.commands.upstream import repo_name
from kernelwiki.commands.citations import locator_problem
from kernelwiki.commands.refresh.claims import (METRIC_NAME, declared_metrics, metric_value, protocol_of, versus_ours_value,
                                               versus_slug)
from kernelwiki.commands.evidence import (HEADLINE_RULE_FROM, claim_source_problem, headline_exception, headline_problem,
                                          stale_compile_problem)
from kernelwiki.model.safe_links import link_problems, markup_problems, wiki_file_problems
from kernelwiki.model.schema import check as schema_check
from kernelwiki.model.spans import VARIANTS, body_first_line, span_problems
from kernelwiki.model.vocab import did_you_mean

LEVEL_RANK = {"spec": 0, "source-reported": 1, "compiled": 2, "measured": 3}
RECORD_LEVELS = ("measured", "compiled")
PINNED_KINDS = ("package", "code", "readme")
"""Source kinds whose text lives in a package or repository we can pin: their quotes can be read
offline, so they must say where (`origin`). Papers, blogs and vendor web pages may have none."""
COMMENT_PROBLEM = ("YAML comment in the frontmatter: the tools that rewrite frontmatter (refresh, validate --fix) "
                   "cannot keep it, so they leave this page alone; move the note into the prose")


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    pages: int = 0
    probes: int = 0
    provenance: int = 0
    records: int = 0
    fixed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(wiki: Wiki, fix: bool = False) -> Report:
    report = Report(pages=len(wiki.entries))
    if fix:
        report.fixed = _fix_formatting(wiki)
        if report.fixed:
            wiki = Wiki.load(wiki.repo, use_cache=wiki.use_cache, verify=True, check=page_problems)
    for rel, entry in wiki.entries.items():
        if entry.local_problems is None:
            entry.local_problems = page_problems(wiki, wiki.page(rel))
            wiki.dirty = True
        report.problems.extend(entry.local_problems)
    report.problems.extend(wiki.misnamed_problems())
    report.problems.extend(Problem(f"wiki/{rel}", 1, "-", message) for rel, message in wiki_file_problems(wiki.repo.wiki))
    wiki.save()
    records = _load_json_files(wiki, report)
    probes = _check_probes(wiki, report)
    _check_cross_references(wiki, report, probes, records)
    _check_headlines(report, probes, records)
    _check_metric_values(report, probes, records)
    _check_named_runs(wiki, report, records)
    _check_ceiling_sources(report, records)
    _check_provenance(wiki, report, records)
    report.problems = sorted(set(report.problems))
    return report


# --- one page ------------------------------------------------------------------------------------
def page_problems(wiki: Wiki, page: Page) -> list[Problem]:
    """Checks that need nothing but the page itself, the schemas and the vocabulary."""
    problems = list(page.problems)
    meta = page.meta
    if meta is None:
        return problems
    problems += schema_check(wiki.repo.schemas, "page", meta, page.rel, page.line)
    rel, vocab = page.rel, wiki.vocab

    def add(path: tuple, message: str) -> None:
        problems.append(Problem(rel, page.line(path), field_path(path), message))

    page_type, page_id = meta.get("type"), meta.get("id")
    if isinstance(page_type, str) and page_type in vocab.type_prefix and isinstance(page_id, str):
        prefix = vocab.type_prefix[page_type]
        if not page_id.startswith(prefix):
            add(("id",), f"id {page_id!r} must start with {prefix!r} for type {page_type}")
        else:
            section = vocab.sections[page_type]
            expected = f"wiki/{section}/{page_id[len(prefix):]}.md"
            if rel != expected:
                add(("id",), f"a {page_type} page with id {page_id!r} belongs at {expected}")

    for key, kind in vocab.vocabulary_fields.items():
        for index, term in _strings(meta.get(key)):
            if term not in vocab.terms(kind):
                add((key, index), f"{term!r} is not in schemas/vocabulary.yaml {kind}{did_you_mean(term, vocab.terms(kind))}")
    for index, arch in _strings(meta.get("architectures")):
        if arch not in vocab.archs:
            add(("architectures", index), f"unknown architecture {arch!r}{did_you_mean(arch, vocab.archs)}")
    by_arch = meta.get("evidence_by_arch")
    if isinstance(by_arch, dict):
        for arch in by_arch:
            if arch not in vocab.archs:
                add(("evidence_by_arch", arch), f"unknown architecture {arch!r}{did_you_mean(arch, vocab.archs)}")

    if meta.get("type") != "source" and isinstance(meta.get("sources"), list) and not meta["sources"]:
        add(("sources",), "a page must cite at least one source page")
    if meta.get("type") == "source" and meta.get("kind") in PINNED_KINDS and "origin" not in meta:
        add(("kind",), f"a {meta['kind']} source needs `origin` (the package and version, repository and commit, "
                       "or given file its text was read at), so that `audit --sources` can check its quotes")

    claim_ids: dict[str, int] = {}
    for index, claim in _dicts(meta.get("claims")):
        claim_id = claim.get("id")
        if isinstance(claim_id, str):
            if claim_id in claim_ids:
                add(("claims", index, "id"), f"duplicate claim id {claim_id!r} (also claims[{claim_ids[claim_id]}])")
            claim_ids.setdefault(claim_id, index)
        arch, dtype = claim.get("arch"), claim.get("dtype")
        if isinstance(arch, str) and arch not in vocab.archs:
            add(("claims", index, "arch"), f"unknown architecture {arch!r}{did_you_mean(arch, vocab.archs)}")
        if isinstance(dtype, str) and dtype not in vocab.dtypes:
            add(("claims", index, "dtype"), f"unknown dtype {dtype!r}{did_you_mean(dtype, vocab.dtypes)}")
        leaves = locator_problem(claim.get("locator"))
        if leaves:
            add(("claims", index, "locator"), leaves)
        if claim.get("evidence") in ("spec", "source-reported"):
            for key in ("locator", "quote"):
                if not (isinstance(claim.get(key), str) and claim[key].strip()):
                    add(("claims", index), f"a {claim['evidence']} claim needs `{key}`: where the value stands in "
                                           "the source and its verbatim words, so a reader can check it")

    for index, alias in _strings(meta.get("aliases")):
        wrong = alias_problem(alias)
        if wrong:
            add(("aliases", index), wrong)
    # A page read as dump writes it (its values are pieces of its text) whose text is NFC has NFC values.
    composed = page.canonical and unicodedata.is_normalized("NFC", page.frontmatter_text)
    for path, value in () if composed else _texts(meta):
        if not unicodedata.is_normalized("NFC", value):
            add(path, "text is not in Unicode NFC (composed) form, so a lookup typed the usual way would not "
                      "match it; write composed characters (validate --fix does not change text)")
        for _, message in link_problems(value)[:1]:
            add(path, message)
    problems += _evidence_problems(meta, add)
    for path, value in () if page.canonical else _non_finite(meta):   # read_canonical reads no NaN or infinity
        add(path, f"{value} is not a finite number; write the value, or leave the field out")
    first_body_line = body_first_line(page.frontmatter_text)
    for offset, text in enumerate(page.body.split("\n") if CONTROL.search(page.body) else ()):
        control = CONTROL.search(text.removesuffix("\r"))
        if control:
            problems.append(Problem(rel, first_body_line + offset, "-", f"control character U+{ord(control.group()):04X} "
                                    "in the prose; commands would print it to terminals; remove it"))
    problems += [Problem(rel, first_body_line + line, "-", message) for line, message in markup_problems(page.body)]
    claims = [claim for _, claim in _dicts(meta.get("claims"))]  # a non-list is the schema's problem
    problems += span_problems(rel, page.body, claims, body_first_line(page.frontmatter_text))
    comment = None if page.canonical else yamlio.comment_line(page.frontmatter_text)
    if page.canonical:
        pass   # read as dump writes it (yamlio.read_canonical): no comment, nothing to compare
    elif comment is not None:
        problems.append(Problem(rel, comment + Page.FRONTMATTER_FIRST_LINE, "-", COMMENT_PROBLEM))
    elif not page.problems:
        canonical = yamlio.dump(meta)
        if canonical != page.frontmatter_text:
            ours, theirs = canonical.split("\n"), page.frontmatter_text.split("\n")
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            problems.append(Problem(rel, first + Page.FRONTMATTER_FIRST_LINE, "-",
                                    f"frontmatter is not in canonical form (expected {ours[first] if first < len(ours) else 'end'!r}); run validate --fix"))
    return problems


def _evidence_problems(meta: dict, add) -> list[Problem]:
    """A page may say `measured` (or `compiled`) only through claims that carry a run record."""
    record_levels: dict[str, set[str]] = defaultdict(set)  # arch -> levels backed by records
    for _, claim in _dicts(meta.get("claims")):
        if claim.get("evidence") in RECORD_LEVELS and isinstance(claim.get("record"), str):
            record_levels[str(claim.get("arch"))].add(claim["evidence"])
    archs = [a for _, a in _strings(meta.get("architectures"))]
    by_arch = meta.get("evidence_by_arch") if isinstance(meta.get("evidence_by_arch"), dict) else {}
    for arch, level in by_arch.items():
        if level in RECORD_LEVELS and level not in record_levels.get(arch, set()) and not (
            level == "compiled" and "measured" in record_levels.get(arch, set())
        ):
            add(("evidence_by_arch", arch), f"says {level} for {arch}, but no {level} claim with a run record has arch {arch}")
    level = meta.get("evidence_level")
    if level in RECORD_LEVELS:
        primary = archs[0] if archs else None
        backed = set().union(*record_levels.values()) if record_levels else set()
        if primary and by_arch.get(primary) not in (None, level):
            add(("evidence_level",), f"says {level}, but evidence_by_arch gives {by_arch[primary]} for the primary architecture {primary}")
        elif level not in backed and not (level == "compiled" and "measured" in backed):
            add(("evidence_level",), f"says {level}, but no claim with evidence {level} points at a run record; "
                                     "the runner sets this level from records (`kernelwiki probe run`)")
    return []


# --- cross-file checks ---------------------------------------------------------------------------
def _check_cross_references(wiki: Wiki, report: Report, probes: dict[str, Any], records: dict[str, Any]) -> None:
    by_id_files: dict[str, list[Entry]] = defaultdict(list)
    for entry in wiki.entries.values():
        if entry.id:
            by_id_files[entry.id].append(entry)
    ids = {i: files[0] for i, files in by_id_files.items()}
    for page_id, files in by_id_files.items():
        if len(files) > 1:
            for entry in files:
                others = ", ".join(e.rel for e in files if e is not entry)
                report.problems.append(Problem(entry.rel, _line(wiki, entry, ("id",)), "id", f"duplicate id {page_id!r} (also in {others})"))
    aliases: dict[str, Entry] = {}
    lowered_ids = {i.lower() for i in ids}
    for entry in ids.values():
        for index, alias in _strings(entry.get("aliases")):
            key = alias.lower()
            if key in lowered_ids and ids.get(alias) is not entry:
                report.problems.append(Problem(entry.rel, _line(wiki, entry, ("aliases", index)), f"aliases[{index}]", f"alias {alias!r} is the id of another page"))
            elif key in aliases and aliases[key] is not entry:
                report.problems.append(Problem(entry.rel, _line(wiki, entry, ("aliases", index)), f"aliases[{index}]", f"alias {alias!r} is also an alias of {aliases[key].id}"))
            aliases.setdefault(key, entry)

    for entry in wiki.entries.values():
        if not entry.meta:
            continue

        def add(path: tuple, message: str, entry: Entry = entry) -> None:
            report.problems.append(Problem(entry.rel, _line(wiki, entry, path), field_path(path), message))

        for index, ref in _strings(entry.get("related")):
            if ref not in ids:
                add(("related", index), f"no page with id {ref!r}{did_you_mean(ref, ids)}")
        for index, ref in _strings(entry.get("sources")):
            if ref not in ids:
                add(("sources", index), f"no source page with id {ref!r}{did_you_mean(ref, ids)}")
            elif ids[ref].get("type") != "source":
                add(("sources", index), f"{ref!r} is a {ids[ref].get('type')} page, not a source")
        for index, ref in _strings(entry.get("probes")):
            if ref not in probes:
                add(("probes", index), f"no probe probes/{ref}/probe.yaml{did_you_mean(ref, probes)}")
            elif probes[ref] is not None and entry.id not in [p for _, p in _strings(probes[ref].get("pages"))]:
                add(("probes", index), f"probe {ref} does not list this page in its pages")
        claim_ids = {c.get("id") for _, c in _dicts(entry.get("claims"))}
        if isinstance(entry.get("headline"), str) and entry.get("headline") not in claim_ids:
            add(("headline",), f"no claim {entry.get('headline')!r} on this page: the headline names one of its claims")
        for index, goal in _dicts(entry.get("goals")):
            target = str(goal.get("claim", ""))
            if target not in claim_ids and target.removesuffix(".ratio") not in claim_ids:
                add(("goals", index, "claim"), f"no claim {target!r} on this page (a claim id, or ID.ratio)")
        cited = set(s for _, s in _strings(entry.get("sources")))
        for index, claim in _dicts(entry.get("claims")):
            source = claim.get("source")
            if isinstance(source, str):
                if source not in ids or ids[source].get("type") != "source":
                    add(("claims", index, "source"), f"no source page with id {source!r}{did_you_mean(source, ids)}")
                elif source not in cited:
                    add(("claims", index, "source"), f"{source!r} is cited by a claim but missing from sources")
            record = claim.get("record")
            if isinstance(record, str):
                if record not in records:
                    add(("claims", index, "record"), f"no run record {record}{_other_form(record, records)}")
                elif records[record] is not None and claim.get("case") is not None:
                    cases = {c.get("id") for c in records[record].get("cases", []) if isinstance(c, dict)}
                    if claim["case"] not in cases:
                        add(("claims", index, "case"), f"record {record} has no case {claim['case']!r}")
            if claim.get("evidence") == "compiled" and isinstance(record, str) and isinstance(records.get(record), dict):
                stale = stale_compile_problem(claim, records[record], probes.get(records[record].get("probe")))
                if stale:
                    add(("claims", index, "record"), stale)
            if claim.get("evidence") == "measured" and isinstance(record, str) and isinstance(records.get(record), dict):
                for path, message in measured_claim_problems(claim, records[record], [p for _, p in _strings(entry.get("probes"))],
                                                             probes.get(records[record].get("probe"))):
                    add(("claims", index, *path), message)
        for index, claim in _dicts(entry.get("performance_claims")):
            source = claim.get("source_id")
            if isinstance(source, str) and (source not in ids or ids[source].get("type") != "source"):
                add(("performance_claims", index, "source_id"), f"no source page with id {source!r}{did_you_mean(source, ids)}")
        artifact_dir = entry.get("artifact_dir")
        if isinstance(artifact_dir, str):
            try:
                if not wiki.repo.inside(artifact_dir).is_dir():
                    add(("artifact_dir",), f"directory {artifact_dir} does not exist")
            except ValueError as err:
                add(("artifact_dir",), str(err))

    for probe_id, spec in probes.items():
        if not spec:
            continue
        rel = f"probes/{probe_id}/probe.yaml"
        for index, page_id in _strings(spec.get("pages")):
            if page_id not in ids:
                report.problems.append(Problem(rel, 1, f"pages[{index}]", f"no page with id {page_id!r}{did_you_mean(page_id, ids)}"))
            elif not any(probe_id in [p for _, p in _strings(e.get("probes"))] for e in by_id_files[page_id]):
                # any file with that id: a duplicated id is reported once, on the duplicates
                report.problems.append(Problem(rel, 1, f"pages[{index}]", f"page {page_id} does not list {probe_id} in its probes"))


def _check_headlines(report: Report, probes: dict[str, Any], records: dict[str, Any]) -> None:
    """Each passing case of a run started from HEADLINE_RULE_FROM on headlines its strongest correct
    baseline, or the exception its probe.yaml declares (kernelwiki.commands.evidence)."""
    for rel, data in records.items():
        if not isinstance(data, dict) or data.get("mode") != "run" or str(data.get("started_at", "")) < HEADLINE_RULE_FROM:
            continue
        for index, case in _dicts(data.get("cases")):
            if case.get("status") != "passed":
                continue
            why = headline_problem(case, headline_exception(probes.get(data.get("probe")), case.get("id")))
            if why:
                report.problems.append(Problem(rel, 1, f"cases[{index}].headline.baseline", why))


RUN_ID = re.compile(r"(?<![\w-])(\d{8}T\d{6}Z)(?:-[a-z0-9-]+)?(?![\w])")
GENERATED = re.compile(r"^<!-- kernelwiki:(begin|end) [a-z0-9-]+ -->\s*$")


def _check_named_runs(wiki: Wiki, report: Report, records: dict[str, Any]) -> None:
    """A run a page's prose names must be in the tree, and may not be a run of a probe superseded by
    a later passing run when none of the page's claims rests on it: a sentence about "its one run
    (ID)" outlives the run once the claims move on (issue 23: removed and superseded records)."""
    by_run: dict[str, list[dict]] = defaultdict(list)
    latest: dict[str, str] = {}   # probe -> its newest passing run
    for rel, data in records.items():
        data = data if isinstance(data, dict) else {}
        run = (run_id_of(rel) or "").split("-", 1)[0]
        by_run[run].append(data)
        if data.get("mode") == "run" and data.get("status") == "passed":
            probe = str(data.get("probe"))
            latest[probe] = max(latest.get(probe, ""), run)
    for entry in wiki.entries.values():
        if entry.rel not in wiki.fresh and not entry.names_runs:
            continue   # the body names no run: no need to read the page again
        page = wiki.page(entry.rel)
        if page.meta is None:
            continue
        cited = {(run_id_of(c["record"]) or "").split("-", 1)[0] for _, c in _dicts(page.meta.get("claims"))
                 if isinstance(c.get("record"), str)}
        if "Z" not in page.body or not RUN_ID.search(page.body):   # a run id ends in Z
            continue
        first, in_block = body_first_line(page.frontmatter_text), False
        for offset, line in enumerate(page.body.split("\n")):
            marker = GENERATED.match(line)
            if marker:
                in_block = marker.group(1) == "begin"
                continue
            for match in [] if in_block else RUN_ID.finditer(line):
                run = match.group(1)
                if run not in by_run:
                    report.problems.append(Problem(entry.rel, first + offset, "prose",
                                                   f"names run {run}, which no record under artifacts/evidence holds "
                                                   "(removed?); rewrite the sentence from the records in the tree"))
                    continue
                newer = [latest[str(d.get("probe"))] for d in by_run[run] if latest.get(str(d.get("probe")), run) > run]
                if newer and run not in cited:
                    report.problems.append(Problem(entry.rel, first + offset, "prose",
                                                   f"names run {run}, but its probe has the newer passing run "
                                                   f"{max(newer)} and no claim here rests on {run}; say what the "
                                                   "records the page stands on hold"))


def measured_claim_problems(claim: dict, record: dict, page_probes: list, probe: dict | None = None) -> list[tuple[tuple, str]]:
    """What makes a measured claim disagree with the run record it names: (field path, message).

    The record must have passed, have run (not only compiled) on the claim's GPU and architecture,
    come from a probe the page links, and hold the claim's value (and baseline and ratio) for the
    claim's case (for a claim of a figure the probe declares in `metric_claims`, `case_metric`: that
    figure of the case's metrics). `refresh` writes measured claims exactly so; anything else was typed
    or is stale.
    """
    out: list[tuple[tuple, str]] = []
    name = f"record {record.get('run_id', '?')}"
    if record.get("mode") != "run" or record.get("status") != "passed":
        out.append((("record",), f"{name} is {record.get('mode')}/{record.get('status')}; a measured claim needs a passed run"))
    env = record.get("environment") if isinstance(record.get("environment"), dict) else {}
    if is_fake(env):
        out.append((("record",), f"{name} was made under KERNELWIKI_FAKE_GPU (driver 'fake'); it is not a measurement"))
    if claim.get("arch") is not None and env.get("arch") != claim.get("arch"):
        out.append((("arch",), f"says {claim.get('arch')}, but {name} ran on {env.get('arch')}"))
    if claim.get("gpu") is not None and short_gpu_name(env.get("gpu")) != claim.get("gpu"):
        out.append((("gpu",), f"says {claim.get('gpu')}, but {name} ran on {short_gpu_name(env.get('gpu'))}"))
    if record.get("probe") not in page_probes:
        out.append((("record",), f"{name} comes from {record.get('probe')}, which this page does not list in probes"))
    case = next((c for c in record.get("cases") or [] if isinstance(c, dict) and c.get("id") == claim.get("case")), None)
    if case is None:
        return out   # a missing case is reported with the record reference
    headline = case.get("headline") if isinstance(case.get("headline"), dict) else {}
    if case.get("status") != "passed":
        out.append((("case",), f"case {claim.get('case')!r} of {name} is {case.get('status')}, not passed"))
    refused = claim_source_problem(record, case, probe if isinstance(probe, dict) else None)
    if refused:
        out.append((("record",), f"case {claim.get('case')!r} of {name} is no evidence: {refused}"))
    if claim.get("case_metric") is not None:   # a figure of the case's metrics (probe.yaml metric_claims)
        figure = str(claim["case_metric"])[:64]
        if figure not in _declared_metrics(probe, claim.get("case")):
            out.append((("case_metric",), f"{record.get('probe')}'s probe.yaml does not declare {figure!r} in "
                                          f"metric_claims of case {claim.get('case')!r}; run `kernelwiki refresh`"))
        metrics = case.get("metrics") if isinstance(case.get("metrics"), dict) else {}
        if metric_value(case, figure) is None or metrics.get(figure) != claim.get("value"):
            out.append((("value",), f"{claim.get('value')!r} is not metrics.{figure} of case {claim.get('case')!r} "
                                    f"in {name} ({str(metrics.get(figure, 'absent'))[:40]!r}); run `kernelwiki refresh`"))
        return out
    if claim.get("candidate") is not None:   # another kernel timed in the case: its baselines entry
        values = [b.get("value") for b in case.get("baselines") or []
                  if isinstance(b, dict) and b.get("name") == claim.get("candidate")]
        if values != [claim.get("value")]:
            out.append((("value",), f"{claim.get('value')!r} is not {claim.get('candidate')!r}'s value in case "
                                    f"{claim.get('case')!r} of {name} ({values or 'absent'}); run `kernelwiki refresh`"))
        return out
    baseline = claim.get("baseline") if isinstance(claim.get("baseline"), dict) else None
    versus = baseline is not None and baseline.get("name") != headline.get("baseline")
    # a versus claim timed under another protocol ("X @ P") states ours under that protocol
    own = versus_ours_value(case, str(baseline.get("name"))) if versus else headline.get("value")
    if own != claim.get("value"):
        out.append((("value",), f"{claim.get('value')!r} is not the value of case {claim.get('case')!r} in {name} "
                                f"({own!r}{' under ' + protocol_of(str(baseline.get('name'))) if versus and protocol_of(str(baseline.get('name'))) else ''}); "
                                "run `kernelwiki refresh`"))
    if versus:
        # a versus claim (probe.yaml `versus`): ours over another candidate of the case's baselines
        entry = next((b for b in case.get("baselines") or [] if isinstance(b, dict) and b.get("name") == baseline.get("name")), None)
        if entry is None or entry.get("value") != baseline.get("value") or entry.get("ratio") != claim.get("ratio"):
            out.append((("baseline",), f"{baseline.get('name')!r} {baseline.get('value')!r} (ratio {claim.get('ratio')!r}) is "
                                       f"not a candidate timed in case {claim.get('case')!r} of {name}; run `kernelwiki refresh`"))
        return out
    if baseline is not None and baseline.get("value") != headline.get("baseline_value"):
        out.append((("baseline", "value"), f"{baseline.get('value')!r} is not the baseline of case "
                                           f"{claim.get('case')!r} in {name} ({headline.get('baseline_value')!r})"))
    if claim.get("ratio") is not None and claim.get("ratio") != headline.get("ratio"):
        out.append((("ratio",), f"{claim.get('ratio')!r} is not the ratio of case {claim.get('case')!r} in {name} "
                                f"({headline.get('ratio')!r})"))
    return out


def _declared_metrics(probe: Any, case_id: Any) -> dict:
    """probe.yaml's `metric_claims` of one case ({} where there are none)."""
    for case in (probe.get("cases") if isinstance(probe, dict) and isinstance(probe.get("cases"), list) else []):
        if isinstance(case, dict) and case.get("id") == case_id and isinstance(case.get("metric_claims"), dict):
            return case["metric_claims"]
    return {}


def metric_claims_problems(case: dict) -> list[tuple[tuple, str]]:
    """What is wrong with a probe case's `metric_claims` names, (field path, message): each becomes
    part of a claim id and a span name, so it is a lower-case identifier, not one of the span variants
    (ID.ratio would name two things), and not the claim refresh writes for `reproduced_by`."""
    declared = case.get("metric_claims")
    if not isinstance(declared, dict):
        return []
    out = []
    reproduced = re.sub(r"[^a-z0-9]+", "-", str(case.get("reproduced_by") or "").lower()).strip("-")
    for name in declared:
        shown = ascii(str(name)[:40])
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            out.append((("metric_claims", _safe_key(name)), f"metric name {shown} is not a lower-case identifier "
                        "(a-z first, then a-z, 0-9 or _, at most 64): it becomes part of a claim id; not declared"))
        elif name in VARIANTS:
            out.append((("metric_claims", name), f"metric name {shown} is a span variant (ID.{name} already names "
                        "the case claim's " + name + "); choose another name"))
        elif name == reproduced:
            out.append((("metric_claims", name), f"metric name {shown} is the claim refresh writes for reproduced_by "
                        f"{case.get('reproduced_by')!r}; choose another name"))
    return out


def _safe_key(name: Any) -> str:
    """A key as a field path may print it: what is not a letter, digit, '_' or '-' becomes '?'."""
    return re.sub(r"[^A-Za-z0-9_-]", "?", str(name)[:64]) or "?"


def _check_metric_values(report: Report, probes: dict[str, Any], records: dict[str, Any]) -> None:
    """A figure a probe.yaml declares a claim (metric_claims) is, in each run record of the probe, a
    finite number or null (not measured): a string, true/false or anything else would be a claim no
    span can render, so it is a problem of the record, named by its key."""
    for rel, data in records.items():
        if not isinstance(data, dict) or data.get("mode") != "run":
            continue
        for index, case in _dicts(data.get("cases")):
            metrics = case.get("metrics") if isinstance(case.get("metrics"), dict) else {}
            for name in _declared_metrics(probes.get(data.get("probe")), case.get("id")):
                if isinstance(name, str) and metrics.get(name) is not None and metric_value(case, name) is None:
                    report.problems.append(Problem(rel, 1, f"cases[{index}].metrics.{_safe_key(name)}",
                                                   f"{str(metrics[name])[:40]!r} is not a finite number, but "
                                                   f"probes/{data.get('probe')}/probe.yaml declares it a claim "
                                                   "(metric_claims); no claim is made of it"))


def _check_probes(wiki: Wiki, report: Report) -> dict[str, Any]:
    """probe id -> parsed probe.yaml (None when it could not be read)."""
    probes: dict[str, Any] = {}
    quoted: dict[str, tuple[dict, Any]] = {}   # probe.yaml -> (data, line of a field path)
    if not wiki.repo.probes.is_dir():
        return probes
    linked = link_problem(wiki.repo)
    if linked:
        report.problems.append(Problem("probes", 1, "-", linked))
        return probes
    for directory in sorted(p for p in wiki.repo.probes.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        path = directory / "probe.yaml"
        rel = f"probes/{directory.name}/probe.yaml"
        report.probes += 1
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", directory.name):
            report.problems.append(Problem("probes", 1, "-", f"directory {directory.name!r} is not a probe id "
                                                             "(probe-, then lower-case letters, digits and '-')"))
            probes[directory.name] = None
            continue
        if directory.is_symlink():
            report.problems.append(Problem(rel, 1, "-", "its probe directory is a symbolic link; probe code must "
                                                        "live inside the repository, so the runner ignores it"))
            probes[directory.name] = None
            continue
        data, lines = _read_yaml(path, rel, report)
        probes[directory.name] = data
        if data is None:
            continue
        line = lambda p, lines=lines: line_of(lines, p) + 1  # noqa: E731
        report.problems += schema_check(wiki.repo.schemas, "probe", data, rel, line)
        for path, value in _non_finite(data):
            report.problems.append(Problem(rel, line(path), field_path(path), f"{value} is not a finite number"))
        if data.get("id") != directory.name:
            report.problems.append(Problem(rel, line(("id",)), "id", f"must equal the directory name {directory.name!r}"))
        entry_file = data.get("entry")
        why = entry_problem(directory, entry_file) if isinstance(entry_file, str) else None
        if why:
            report.problems.append(Problem(rel, line(("entry",)), "entry", why))
        for index, arch in _strings(data.get("archs")):
            if arch not in wiki.vocab.archs:
                report.problems.append(Problem(rel, line(("archs", index)), f"archs[{index}]", f"unknown architecture {arch!r}"))
        for index, case in enumerate(data.get("cases") if isinstance(data.get("cases"), list) else []):
            for path, message in metric_claims_problems(case) if isinstance(case, dict) else ():
                report.problems.append(Problem(rel, line(("cases", index, *path[:1])), field_path(("cases", index, *path)), message))
            level = (case.get("params") or {}).get("level") if isinstance(case, dict) and isinstance(case.get("params"), dict) else None
            if level is not None and level not in peaks.LEVELS:
                report.problems.append(Problem(rel, line(("cases", index, "params", "level")), f"cases[{index}].params.level",
                                               f"unknown memory level {str(level)[:40]!r}; known: {', '.join(peaks.LEVELS)}"))
            report.problems += _versus_problems(rel, line, index, case)
        report.problems += _claim_id_problems(rel, line, data)
        quoted[rel] = (data, line)
    _check_declared_ceilings(quoted, report)
    return probes


def _versus_problems(rel: str, line: Any, index: int, case: Any) -> list[Problem]:
    """A case's `versus` names: each makes the claim ID.vs-NAME (refresh.claims.versus_slug), so two
    names that make one id (`ours a`, `Ours  A`), or a name without a letter or digit, would give a
    page two claims of one id, or one named ID.vs-."""
    if not isinstance(case, dict) or not isinstance(case.get("versus"), (str, list)):
        return []
    listed = isinstance(case["versus"], list)
    out, seen = [], {}
    for number, name in enumerate(case["versus"] if listed else [case["versus"]]):
        if not isinstance(name, str) or not name:
            continue   # the schema says so
        path = ("cases", index, "versus", number) if listed else ("cases", index, "versus")
        slug = versus_slug(name)
        if not slug:
            out.append(Problem(rel, line(path), field_path(path), f"{name[:80]!r} has no letter or digit, so its "
                               "claim would be ID.vs-; name the candidate as its baselines entry is named"))
        elif slug in seen:
            out.append(Problem(rel, line(path), field_path(path), f"{name[:80]!r} makes the claim id ID.vs-{slug[:80]}, "
                               f"as {seen[slug][:80]!r} does; name each candidate once"))
        else:
            seen[slug] = name
    return out


def _claim_id_problems(rel: str, line: Any, probe: dict) -> list[Problem]:
    """The claim ids a probe's cases make, each measured.<probe>.CASE followed by what _case_claims
    names: a case id may hold dots, so case `c1.worst_ratio` and case `c1`'s metric claim
    `worst_ratio` (or `c1.vs-x` and c1's versus `x`) are one id, and refresh would write two claims
    of it; the second case that makes an id is named (one case's own names have checks of their own)."""
    prefix = f"measured.{str(probe.get('id')).removeprefix('probe-')}."
    made: dict[str, tuple[int, str]] = {}
    out = []
    for index, case in enumerate(probe.get("cases") if isinstance(probe.get("cases"), list) else []):
        if not isinstance(case, dict) or not isinstance(case.get("id"), str):
            continue
        for path, suffix in _case_claims(case):
            claim_id, where = case["id"] + suffix, field_path(("cases", index, *path))
            if claim_id in made and made[claim_id][0] != index:
                out.append(Problem(rel, line(("cases", index, *path)), where, f"makes the claim id "
                                   f"{prefix}{claim_id[:120]}, as {made[claim_id][1]} does; rename the case or the name"))
            made.setdefault(claim_id, (index, where))
    return out


def _case_claims(case: dict) -> list[tuple[tuple, str]]:
    """(field path, what follows the case id in the claim id) of each claim a probe case can make
    (refresh.claims): its own, its reproduction of `reproduced_by`, its versus and metric claims."""
    out: list[tuple[tuple, str]] = [(("id",), "")]
    if isinstance(case.get("reproduced_by"), str) and versus_slug(case["reproduced_by"]):
        out.append((("reproduced_by",), f".{versus_slug(case['reproduced_by'])}"))
    versus = case.get("versus")
    for number, name in enumerate(versus if isinstance(versus, list) else [versus]):
        if isinstance(name, str) and versus_slug(name):
            out.append((("versus", number) if isinstance(versus, list) else ("versus",), f".vs-{versus_slug(name)}"))
    out += [(("metric_claims", name), f".{name}") for name in declared_metrics(case)]
    return out


def _check_declared_ceilings(probes: dict[str, tuple[dict, Any]], report: Report) -> None:
    """A probe's `ceilings` are each measured by a calibration probe (a case's `params.ceiling`):
    the runner runs those first in the same invocation, so a ceiling no calibration measures would
    stay null on every record."""
    measured = {case["params"]["ceiling"] for data, _ in probes.values() if data.get("kind") == "calibration"
                for case in data.get("cases") or [] if isinstance(case, dict) and isinstance(case.get("params"), dict)
                and isinstance(case["params"].get("ceiling"), str)}
    for rel, (data, line) in probes.items():
        for index, case in _dicts(data.get("cases") if data.get("kind") == "calibration" else None):
            params = case.get("params")
            wrong = ceiling_name_problem(params["ceiling"]) if isinstance(params, dict) and "ceiling" in params else None
            if wrong:
                report.problems.append(Problem(rel, line(("cases", index, "params", "ceiling")),
                                               f"cases[{index}].params.ceiling", wrong))
        for index, key in _strings(data.get("ceilings")):
            if key not in measured:
                report.problems.append(Problem(rel, line(("ceilings", index)), f"ceilings[{index}]",
                                               f"no calibration probe measures a ceiling {key!r} (its cases' "
                                               f"params.ceiling: {', '.join(sorted(measured)) or 'none'})"))


def _load_json_files(wiki: Wiki, report: Report) -> dict[str, Any]:
    """Run records: record path -> parsed JSON (None if unreadable), each checked as records.scan
    checks it (the same check decides which records refresh and get may use)."""
    records: dict[str, Any] = {}
    for record in scan(wiki.repo, probe_ids(wiki.repo)):
        report.records += 1
        records[record.rel] = record.data
        report.problems += record.problems
    return records


def _check_ceiling_sources(report: Report, records: dict[str, Any]) -> None:
    """A record's `ceilings.record` names the calibration run its fractions of the ceiling were
    taken against; that run stays while a record cites it with a run id of the same invocation
    (a pruned calibration record would leave the pages' fraction_of_ceiling without its evidence). Records made under
    KERNELWIKI_FAKE_GPU (the runner's tests, never a measurement) are left out: their probes read
    the ceilings of the checkout the package sits in, not of the repository they write to."""
    for rel, data in records.items():
        environment = data.get("environment") if isinstance(data, dict) else None
        if not isinstance(environment, dict) or environment.get("driver") == FAKE_DRIVER:
            continue
        ceilings = data.get("ceilings")
        # Only a same-invocation calibration (named by its run id) backs fractions a reader shows;
        # an older record's `record` alone named another run's, whose fractions nothing quotes.
        source = ceilings.get("record") if isinstance(ceilings, dict) and ceilings.get("run_id") else None
        if isinstance(source, str) and source not in records:
            report.problems.append(Problem(rel, 1, "ceilings.record", f"no run record {source}{_other_form(source, records)}: "
                                           "the calibration run its ceilings and fractions of the ceiling come from must stay"))


def _other_form(reference: str, records: dict[str, Any]) -> str:
    """The hint for a reference to a record that exists under its other name (`.json` once
    compressed): references name the file as it is, and the converter rewrites them."""
    other = next((rel for rel in records if without_suffix(rel) == without_suffix(reference)), None)
    return f" (the run is {other}; `kernelwiki records compress` rewrites the references)" if other else ""


def _check_provenance(wiki: Wiki, report: Report, records: dict[str, Any]) -> None:
    ids = wiki.by_id()
    for path in sorted((wiki.repo.root / "artifacts").glob("**/PROVENANCE.yaml")):
        rel = wiki.repo.rel(path)
        report.provenance += 1
        data, lines = _read_yaml(path, rel, report)
        if data is None:
            continue
        line = lambda p, lines=lines: line_of(lines, p) + 1  # noqa: E731
        report.problems += schema_check(wiki.repo.schemas, "provenance", data, rel, line)
        artifact = data.get("artifact")
        if isinstance(artifact, str) and artifact not in ids:
            report.problems.append(Problem(rel, line(("artifact",)), "artifact", f"no page with id {artifact!r}"))
        upstream = data.get("upstream") if isinstance(data.get("upstream"), dict) else {}
        if isinstance(upstream.get("repo"), str) and repo_name(upstream["repo"]) is None:
            report.problems.append(Problem(rel, line(("upstream", "repo")), "upstream.repo",
                                           f"{upstream['repo']!r} is not owner/name or a GitHub repository URL"))
        report.problems += _pin_behind_measurement(wiki, ids.get(artifact) if isinstance(artifact, str) else None,
                                                   upstream, records, rel, line(("upstream", "commit")))
        for index, item in _dicts(data.get("files")):
            if item.get("origin") == "upstream" and not stays_below(item.get("path")):
                report.problems.append(Problem(rel, line(("files", index, "path")), f"files[{index}].path",
                                               f"{item.get('path')!r} leaves the upstream package or repository; "
                                               "give a path relative to its root, without '..'"))
            if item.get("origin") != "own" or not isinstance(item.get("path"), str):
                continue
            try:
                target = wiki.repo.inside(path.parent / item["path"])
            except ValueError as err:
                report.problems.append(Problem(rel, line(("files", index, "path")), f"files[{index}].path", str(err)))
                continue
            if not target.is_file():
                report.problems.append(Problem(rel, line(("files", index, "path")), f"files[{index}].path", f"file {item['path']} does not exist"))
                continue
            try:
                actual = sha256_file(target)
            except UnsafeFile as err:
                report.problems.append(Problem(rel, line(("files", index, "path")), f"files[{index}].path", f"{item['path']} {err}"))
                continue
            if actual != item.get("sha256"):
                report.problems.append(Problem(rel, line(("files", index, "sha256")), f"files[{index}].sha256",
                                               f"does not match {item['path']} (now {actual})"))


def _pin_behind_measurement(wiki: Wiki, entry: Entry | None, upstream: dict, records: dict[str, Any],
                            rel: str, line: int) -> list[Problem]:
    """A bundle pins one upstream commit; the probes of its page record the revision they ran
    (`protocol.<name>.revision`, e.g. "deepgemm 340d988 cutlass eefa171…"). When a probe's latest run
    names another revision of the same repository, the code an agent is handed is not the code whose
    numbers the page shows."""
    name, commit = repo_name(str(upstream.get("repo") or "")), upstream.get("commit")
    meta = entry.meta if entry is not None else None
    if not name or not isinstance(commit, str) or not isinstance(meta, dict) or not isinstance(meta.get("probes"), list):
        return []
    word = _revision_word(name.split("/")[1])
    problems = []
    for probe in meta["probes"]:
        runs = [(order_key(data.get("started_at"), path), path, data) for path, data in records.items()
                if isinstance(data, dict) and data.get("probe") == probe and data.get("mode") == "run"]
        if not runs:
            continue
        _, path, data = max(runs, key=lambda run: run[0])
        for measured in measured_revisions(data.get("protocol"), word):
            if not (commit.startswith(measured) or measured.startswith(commit)):
                problems.append(Problem(rel, line, "upstream.commit",
                                        f"pins {commit[:12]}, but {probe}'s latest run ({path}) measured "
                                        f"{name} {measured}; pin the revision that was measured"))
    return problems


def _revision_word(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def measured_revisions(protocol: Any, word: str) -> list[str]:
    """The commits a record's protocol names for the repository `word` (lower case, letters and
    digits): every `revision` text, at any depth, read as pairs "name commit"."""
    found: list[str] = []
    if isinstance(protocol, dict):
        for key, value in protocol.items():
            if key == "revision" and isinstance(value, str):
                tokens = value.split()
                found += [commit.lower() for name, commit in zip(tokens, tokens[1:])
                          if _revision_word(name) == word and re.fullmatch(r"[0-9a-fA-F]{7,40}", commit)]
            else:
                found += measured_revisions(value, word)
    elif isinstance(protocol, list):
        for value in protocol:
            found += measured_revisions(value, word)
    return found


# --- helpers -------------------------------------------------------------------------------------
def _read_yaml(path: Path, rel: str, report: Report) -> tuple[Any, LineMap]:
    data, lines, problem = yamlio.read_mapping(path)
    if problem:
        report.problems.append(Problem(rel, problem.line + 1, problem.field, problem.message))
    return data, lines


def _line(wiki: Wiki, entry: Entry, path: tuple) -> int:
    return wiki.page(entry.rel).line(path)


def _non_finite(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, float]]:
    """Every NaN or infinity (.nan, .inf, 1e999) in the frontmatter: no JSON can carry it."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, path + (index,))


# Letters of other scripts that look like Latin ones: an alias spelt with them answers to a name
# nobody types, and hides from the one they do.
LOOKALIKES = str.maketrans("аеорсухіјѕԁӏкмтвнΑΒΕΗΙΚΜΝΟΡΤΧΥΖαβεικνορτυχ",
                           "aeopcyxijsdlkmtbhABEHIKMNOPTXYZabeikvoptux")


def alias_problem(alias: str) -> str | None:
    """Why `alias` may not name a page, or None: a repository path (get would read a file by that
    name, MCP would look up the alias), or letters that only look Latin."""
    if "/" in alias or "\\" in alias or alias.endswith(".md"):
        return f"alias {alias!r} looks like a path; an alias is a name people type (no '/', no .md)"
    scripts = {unicodedata.name(ch, "?").split()[0] for ch in alias if ch.isalpha()}
    if len(scripts) > 1 and "LATIN" in scripts:
        return f"alias {alias!r} mixes Latin letters with {', '.join(sorted(scripts - {'LATIN'}))} ones that look alike"
    lookalike = alias.translate(LOOKALIKES)
    if lookalike != alias and lookalike.isascii():
        return f"alias {alias!r} is spelt with letters that only look like {lookalike!r}; write it in Latin letters"
    return None


def _texts(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, str]]:
    """Every string in the frontmatter, with its field path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _texts(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _texts(item, path + (index,))


def _strings(value: Any) -> Iterable[tuple[int, str]]:
    if isinstance(value, list):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, str)]
    return []


def _dicts(value: Any) -> Iterable[tuple[int, dict]]:
    if isinstance(value, list):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)]
    return []


def _fix_formatting(wiki: Wiki) -> list[str]:
    """Rewrite pages whose only formatting problems are BOM, CRLF, fences or non-canonical
    frontmatter; never a page whose frontmatter has comments (the rewrite would drop them) and
    never through a symbolic link (read_page refuses those, so their meta is None)."""
    fixed = []
    for rel in sorted(wiki.entries):
        page = wiki.page(rel)
        if page.meta is None or yamlio.comment_line(page.frontmatter_text) is not None:
            continue
        path = wiki.repo.root / rel
        text = render_page(page.meta, page.body)
        try:
            if text.encode("utf-8") != read_page_bytes(path):
                replace_file(path, text.encode("utf-8"))
                fixed.append(rel)
        except OSError:  # changed or became unreadable meanwhile: validate reports it on the next run
            continue
    return fixed

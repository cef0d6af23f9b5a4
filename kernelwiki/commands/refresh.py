"""`kernelwiki refresh`: rewrite the managed parts of every page from the run records.

Managed: the record-backed claims (`evidence: measured` or `compiled`), `evidence_by_arch`,
`evidence_level`, `status`, `measured_on`, `last_measured`, the body's generated blocks
(`<!-- kernelwiki:begin NAME -->` ... `<!-- kernelwiki:end NAME -->`, outside code fences) and the
text of inline claim spans (`<!-- claim:ID -->...<!-- /claim -->`, see kernelwiki.model.spans).
Everything else — other fields, their order, the prose, its line endings — is left byte-identical.

Refresh is a pure function of (pages, records, probe specs, the pins in pyproject.toml): running it
twice changes nothing the second time. "Now", for staleness, is the newest record in the
repository, not the wall clock, so the result does not depend on when it runs.
"""

from __future__ import annotations

import re
import statistics
import sys
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kernelwiki.storage import records as records_mod
from kernelwiki.model import yamlio
from kernelwiki.harness.env import is_fake, short_gpu_name
from kernelwiki.storage.index import scan_pages
from kernelwiki.model.pages import FENCE, parse_page, read_page_bytes
from kernelwiki.probing.specs import ProbeSpec, load_probes
from kernelwiki.storage.repo import Repo
from kernelwiki.model.files import UnsafeFile, replace_file
from kernelwiki.model.schema import check as schema_check
from kernelwiki.model.spans import render_spans
from kernelwiki.model.vocab import Vocabulary

LEVELS = ["spec", "source-reported", "compiled", "measured"]
RECORD_LEVELS = ("measured", "compiled")
BAD_RUN = ("incorrect", "control-passed", "failed", "crashed", "timeout")
LOWER_IS_BETTER_UNITS = ("us", "ms", "ns", "s", "cycles", "ulp")
REGRESSION = 0.10
HISTORY = 3                # earlier runs whose median a new run is compared with
LAUNCH_BOUND_MS = 0.05   # timings below this are launch overhead and jitter, not kernel speed
MANAGED_ORDER = ("status", "evidence_level", "evidence_by_arch", "measured_on", "last_measured")
BLOCK = re.compile(r"^<!-- kernelwiki:(begin|end) ([a-z0-9-]+) -->\s*$")
FENCE_LINE = re.compile(r"^ {0,3}(```|~~~)")


@dataclass(frozen=True)
class Record:
    path: str
    data: dict

    @property
    def started(self) -> str:
        return str(self.data.get("started_at", ""))

    @property
    def arch(self) -> str | None:
        return (self.data.get("environment") or {}).get("arch")


@dataclass
class Change:
    rel: str
    fields: list[str]
    refused: str = ""
    """Why the page was left as it is although the records imply a change ('' when written)."""


def load_records(repo: Repo) -> dict[str, list[Record]]:
    """probe id -> its records, oldest first; only records that validate accepts (the others are
    named on stderr, so that a refused record is never silently ignored)."""
    out: dict[str, list[Record]] = {}
    refused = []
    for record in records_mod.scan(repo, records_mod.probe_ids(repo)):
        if record.ok:
            out.setdefault(record.path.parent.name, []).append(Record(record.rel, record.data))
        else:
            refused.append(record)
    for record in refused:
        print(f"{record.problems[0]} (record ignored; see kernelwiki validate)", file=sys.stderr)
    for records in out.values():
        records.sort(key=lambda r: records_mod.order_key(r.started, r.path))
    return out


def load_pins(repo: Repo) -> dict:
    try:
        config = tomllib.loads((repo.root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return config.get("tool", {}).get("kernelwiki", {})


def refresh(repo: Repo, check: bool = False) -> list[Change]:
    """Rewrite (or with check=True only compare) every page; return the pages that change.
    A page whose frontmatter would change but holds YAML comments is not written (the rewrite
    would drop them): its Change carries `refused`."""
    vocab = Vocabulary.load(repo.schemas)
    probes = load_probes(repo)
    records = load_records(repo)
    settings = load_pins(repo)
    newest = max((r.started for rs in records.values() for r in rs), default="")
    changes = []
    for rel, _ in scan_pages(repo.root):
        path = repo.root / rel
        try:
            raw = read_page_bytes(path)
        except UnsafeFile:
            continue  # a link or an unreadable file: validate names it, refresh never writes through it
        page = parse_page(raw, rel)
        if page.meta is not None and schema_check(repo.schemas, "page", page.meta, rel, page.line):
            # Refresh relies on the shapes the schema guarantees; validate says what is wrong.
            changes.append(Change(rel, [], refused=f"{rel}:1: -: not refreshed: the frontmatter fails the page "
                                  "schema; run kernelwiki validate"))
            continue
        new = refresh_text(raw, rel, vocab, probes, records, settings, newest)
        if new is None or new[0] == raw:
            continue
        comment = yamlio.comment_line(page.frontmatter_text)
        if comment is not None and any(not f.startswith("(") for f in new[1]):
            changes.append(Change(rel, new[1], refused=f"{rel}:{comment + 2}: -: not refreshed: its frontmatter "
                                  "holds a YAML comment, which the rewrite would drop; move it into the prose"))
            continue
        changes.append(Change(rel, new[1]))
        if not check:
            replace_file(path, new[0])
    return changes


def refresh_text(raw: bytes, rel: str, vocab: Vocabulary, probes: dict[str, ProbeSpec],
                 records: dict[str, list[Record]], settings: dict, newest: str) -> tuple[bytes, list[str]] | None:
    """The refreshed bytes of one page and the fields that changed; None for pages it cannot read."""
    page = parse_page(raw, rel)
    meta = page.meta
    if meta is None or meta.get("type") == "source" or page.problems and any(
            "CRLF" not in p.message and "byte-order" not in p.message for p in page.problems):
        return None
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = raw.decode("utf-8-sig")
    newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    lines = text.splitlines(keepends=True)
    close = next(i for i in range(1, len(lines)) if lines[i].rstrip() == FENCE)
    header, body = "".join(lines[:close + 1]), "".join(lines[close + 1:])

    implied = implied_meta(meta, vocab, probes, records, settings, newest)
    changed = [k for k in set(meta) | set(implied) if meta.get(k) != implied.get(k)]
    if changed:
        header = f"{FENCE}\n{yamlio.dump(implied)}{FENCE}\n".replace("\n", newline)
    linked = [probes[p] for p in meta.get("probes") or [] if isinstance(p, str) and p in probes]
    renderers = {**RENDERERS, "runs": lambda _: render_runs(linked, records, meta.get("id")),
                 "versus": lambda _: render_versus(linked, records, meta.get("id"))}
    new_body = render_blocks(body, implied, newline, renderers)
    if new_body != body:
        changed.append("(generated blocks)")
    spanned = render_spans(new_body, implied.get("claims") or [])
    if spanned != new_body:
        changed.append("(claim spans)")
        new_body = spanned
    out = ("\ufeff" if bom else "") + header + new_body
    return out.encode("utf-8"), sorted(changed)


# --- frontmatter -----------------------------------------------------------------------------------
def implied_meta(meta: dict, vocab: Vocabulary, probes: dict[str, ProbeSpec], records: dict[str, list[Record]],
                 settings: dict, newest: str) -> dict:
    page_id = meta.get("id")
    linked = [probes[p] for p in meta.get("probes") or [] if isinstance(p, str) and p in probes]
    hand_claims = [c for c in meta.get("claims") or [] if not (isinstance(c, dict) and c.get("evidence") in RECORD_LEVELS)]
    hand_ids = {c.get("id") for c in hand_claims if isinstance(c, dict)}
    record_claims: list[dict] = []
    used: list[Record] = []
    run_archs: set[str] = set()
    compiled_archs: set[str] = set()
    for spec in linked:
        for record in _latest_passing_runs(records.get(spec.id, [])):
            used.append(record)
            run_archs.add(str(record.arch))
            record_claims += _measured_claims(spec, record, page_id, hand_ids, vocab)
        for arch, record in _latest_compiles(records.get(spec.id, [])).items():
            if record.data.get("status") == "compiled" and arch not in run_archs:
                compiled_archs.add(arch)
                used.append(record)
                record_claims.append(_compiled_claim(spec, record, arch))
    claims = hand_claims + sorted(record_claims, key=lambda c: c["id"])

    archs = [a for a in meta.get("architectures") or [] if isinstance(a, str)]
    by_arch = {}
    for arch in archs:
        canonical = vocab.canonical_arch(arch)
        if canonical in run_archs:
            by_arch[arch] = "measured"
        elif canonical in compiled_archs:
            by_arch[arch] = "compiled"
        else:
            by_arch[arch] = _hand_level(hand_claims, canonical, vocab)

    managed: dict[str, Any] = {"status": _status(linked, records, claims, used, settings, newest)}
    if archs:
        managed["evidence_level"] = by_arch[archs[0]]
        managed["evidence_by_arch"] = by_arch
    runs = [r for r in used if r.data.get("mode") == "run"]
    if runs:
        latest = max(runs, key=lambda r: r.started)
        managed["measured_on"] = measured_on(latest.data)
        managed["last_measured"] = latest.started
    out = {k: v for k, v in meta.items() if k not in (*MANAGED_ORDER, "claims")}
    out = _insert_after(out, "type", {k: v for k, v in managed.items() if k in ("status", "evidence_level", "evidence_by_arch")})
    position = "evidence_by_arch" if "evidence_by_arch" in out else "type"
    out = _insert_after(out, position, {k: managed[k] for k in ("measured_on", "last_measured") if k in managed})
    if claims or "claims" in meta:
        out = _place_like(meta, out, "claims", claims)
    return out


def _insert_after(meta: dict, anchor: str, items: dict) -> dict:
    """Insert keys right after `anchor` (or at the end), keeping every other key where it was."""
    if not items:
        return meta
    out: dict = {}
    for key, value in meta.items():
        out[key] = value
        if key == anchor:
            out.update(items)
    if anchor not in meta:
        out.update(items)
    return out


def _place_like(original: dict, meta: dict, key: str, value: Any) -> dict:
    """Put `key` where it stood in the original mapping (after the same predecessor), else at the end."""
    keys = list(original)
    if key in keys:
        before = [k for k in keys[:keys.index(key)] if k in meta]
        if before:
            return _insert_after(meta, before[-1], {key: value})
    return {**meta, key: value}


def _hand_level(claims: list, arch: str, vocab: Vocabulary) -> str:
    levels = [c.get("evidence") for c in claims if isinstance(c, dict) and c.get("evidence") in LEVELS
              and (c.get("arch") is None or vocab.canonical_arch(str(c.get("arch"))) == arch)]
    return max(levels, key=LEVELS.index) if levels else "spec"


def _latest_passing_runs(records: list[Record]) -> list[Record]:
    """Per architecture, the newest run record that passed (records made under KERNELWIKI_FAKE_GPU
    are test fixtures, never measurements)."""
    latest: dict[str, Record] = {}
    for record in records:
        if record.data.get("mode") == "run" and record.data.get("status") == "passed" \
                and not is_fake(record.data.get("environment")):
            latest[str(record.arch)] = record
    return list(latest.values())


def _latest_compiles(records: list[Record]) -> dict[str, Record]:
    latest: dict[str, Record] = {}
    for record in records:
        if record.data.get("mode") == "compile-only":
            for arch in record.data.get("instructions") or {}:
                latest[arch] = record
    return latest


def _measured_claims(spec: ProbeSpec, record: Record, page_id: str, hand_ids: set, vocab: Vocabulary) -> list[dict]:
    env = record.data.get("environment") or {}
    claims = []
    for case in record.data.get("cases") or []:
        headline = case.get("headline") or {}
        case_spec = spec.case(case.get("id", "")) or {}
        if case.get("status") != "passed" or "value" not in headline:
            continue
        if isinstance(case_spec.get("pages"), list) and page_id not in case_spec["pages"]:   # [] = on no page
            continue
        params = dict(case.get("params") or {})
        claim: dict[str, Any] = {
            "id": f"measured.{spec.id.removeprefix('probe-')}.{case['id']}",
            "metric": headline["metric"], "value": headline["value"],
        }
        if headline.get("unit"):
            claim["unit"] = headline["unit"]
        claim.update(gpu=short_gpu_name(env.get("gpu")), arch=str(record.arch))
        dtype = params.pop("dtype", None)
        if isinstance(dtype, str) and dtype in vocab.dtypes:
            claim["dtype"] = dtype
        if params.get("shape"):
            claim["shape"] = str(params.pop("shape"))
        params.pop("ceiling", None)
        params.update({k: v for k, v in (case.get("metrics") or {}).items() if v is not None})
        if params:
            claim["conditions"] = ", ".join(f"{k}={_short(v)}" for k, v in params.items())
        claim.update(evidence="measured", record=record.path, case=case["id"])
        if case_spec.get("claim") in hand_ids:
            claim["reproduces"] = case_spec["claim"]
            if isinstance(case_spec.get("comparable"), bool):
                claim["comparable"] = case_spec["comparable"]
        if "baseline" in headline and "baseline_value" in headline:
            claim["baseline"] = {"name": headline["baseline"], "value": headline["baseline_value"]}
            claim["ratio"] = headline["ratio"]
        for key in ("fraction_of_peak", "fraction_of_ceiling"):
            if key in headline:
                claim[key] = headline[key]
        claim["measured_at"] = record.started
        claims.append(claim)
        reproduction = _candidate_claim(claim, case, case_spec, hand_ids)
        if reproduction is not None:
            claims.append(reproduction)
    return claims


def _candidate_claim(ours: dict, case: dict, case_spec: dict, hand_ids: set) -> dict | None:
    """For a case whose reported claim is another kernel's (case spec `reproduced_by`, e.g. DeepGEMM
    timed as a baseline): that kernel's value in the same run, as the claim's comparable reproduction.
    Our own kernel's claim stays beside it, without a ratio to the reported value."""
    name = case_spec.get("reproduced_by")
    if not name:
        return None
    value = next((b.get("value") for b in case.get("baselines") or []
                  if isinstance(b, dict) and b.get("name") == name), None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None   # the candidate did not run (skipped with its reason in the record)
    ours.pop("comparable", None)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    claim = {key: ours[key] for key in ("metric", "unit", "gpu", "arch", "dtype", "shape") if key in ours}
    params = {k: v for k, v in (case.get("params") or {}).items() if k not in ("dtype", "shape", "ceiling")}
    claim["conditions"] = ", ".join([f"{name}, timed in the same run and on the same inputs as ours",
                                     *(f"{k}={_short(v)}" for k, v in params.items())])
    out = {"id": f"{ours['id']}.{slug}", **claim, "value": value, "candidate": name, "evidence": "measured",
           "record": ours["record"], "case": ours["case"]}
    if case_spec.get("claim") in hand_ids:   # on the page that holds the reported claim: its reproduction
        out.update(reproduces=case_spec["claim"], comparable=True)
    out["measured_at"] = ours["measured_at"]
    return out


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _compiled_claim(spec: ProbeSpec, record: Record, arch: str) -> dict:
    found = (record.data.get("instructions") or {}).get(arch, {}).get("found", [])
    return {"id": f"compiled.{spec.id.removeprefix('probe-')}.{arch}", "metric": "instructions-found",
            "value": ", ".join(found), "arch": arch, "evidence": "compiled", "record": record.path,
            "measured_at": record.started}


def _status(linked: list[ProbeSpec], records: dict[str, list[Record]], claims: list, used: list[Record],
            settings: dict, newest: str) -> str:
    if not linked:
        return "draft"
    verified = True
    for spec in linked:
        probe_records = records.get(spec.id, [])
        if not probe_records:
            verified = False
        # Only the architectures the probe has records for count: a Blackwell-only probe that no
        # machine here could run is "not run", not a failure.
        for arch in spec.archs:
            runs = [r for r in probe_records if r.data.get("mode") == "run" and r.arch == arch]
            compiles = [r for r in probe_records if r.data.get("mode") == "compile-only"
                        and arch in (r.data.get("instructions") or {})]
            if runs:
                if runs[-1].data.get("status") in BAD_RUN or _dropped(runs):
                    return "regressed"
            elif compiles and compiles[-1].data.get("status") == "compile-failed":
                return "regressed"
    if used and _stale(used, settings, newest):
        return "stale"
    cited = all(isinstance(c, dict) and (c.get("source") or c.get("record")) for c in claims)
    return "verified" if verified and cited else "draft"


def _dropped(runs: list[Record]) -> bool:
    """The newest passing run fell more than 10% behind the runs before it on the same GPU and toolchain.

    Each case of the newest run is compared with the median of the same case (same parameters)
    in up to HISTORY earlier passing runs with the same environment and protocol, so one noisy
    run does not flip a page while a lasting drop does. Where a case was timed against a baseline
    in the same process, its ratio to that baseline is compared (clock and power state shift both
    and cancel); otherwise the value itself. Cases whose fastest candidate took under
    LAUNCH_BOUND_MS are launch-bound - host overhead and timer jitter outweigh the kernel - and are
    not compared.
    """
    passing = [r for r in runs if r.data.get("status") == "passed"]
    if len(passing) < 2:
        return False
    new = passing[-1]
    key = ("gpu", "cuda_runtime", "cutlass_dsl", "torch")
    env = {k: (new.data.get("environment") or {}).get(k) for k in key}
    earlier = [r for r in passing[:-1]
               if {k: (r.data.get("environment") or {}).get(k) for k in key} == env
               and _protocol(r) == _protocol(new)][-HISTORY:]   # a changed measurement is not a regression
    for case in new.data.get("cases") or []:
        score = _score(case)
        if score is None:
            continue
        previous = [s for r in earlier for c in r.data.get("cases") or []
                    if c.get("id") == case.get("id") and c.get("params") == case.get("params")
                    and (s := _score(c, like=case)) is not None]
        if not previous:
            continue
        change = score / statistics.median(previous)
        if (case.get("headline") or {}).get("unit") in LOWER_IS_BETTER_UNITS:
            change = 1 / change if change else 0
        if change < 1 - REGRESSION:
            return True
    return False


def _score(case: dict, like: dict | None = None) -> float | None:
    """What a case is compared by: its ratio to the same-run baseline if it (and `like`) has one,
    else its value; None for launch-bound or valueless cases."""
    headline = case.get("headline") or {}
    if not headline.get("value") or _launch_bound(case):
        return None
    reference = (like or case).get("headline") or {}
    if reference.get("ratio") and headline.get("ratio") and reference.get("baseline") == headline.get("baseline"):
        return float(headline["ratio"])
    if like is not None and reference.get("ratio"):
        return None   # the newer case has a ratio this one lacks: not comparable
    return float(headline["value"])


def _launch_bound(case: dict) -> bool:
    times = [t.get("median_ms") for t in (case.get("timing") or {}).values() if isinstance(t, dict)]
    return any(isinstance(t, (int, float)) and t < LAUNCH_BOUND_MS for t in times)


def _protocol(record: Record) -> dict:
    return {k: v for k, v in (record.data.get("protocol") or {}).items() if k != "seed"}


def _stale(used: list[Record], settings: dict, newest: str) -> bool:
    window = timedelta(days=int(settings.get("freshness_days", 90)))
    latest = max(r.started for r in used)
    if newest and latest and _parse(newest) - _parse(latest) > window:
        return True
    pins = settings.get("pins") or {}
    for record in used:
        env = record.data.get("environment") or {}
        for pin_key, env_key in (("cuda", "cuda_runtime"), ("cutlass_dsl", "cutlass_dsl"), ("torch", "torch")):
            have = env.get(env_key) or (env.get("nvcc") if pin_key == "cuda" else None)
            if pins.get(pin_key) and have and _major_minor(have) != _major_minor(pins[pin_key]):
                return True
    return False


def _major_minor(version: str) -> str:
    return ".".join(re.split(r"[.+]", str(version))[:2])


def _parse(moment: str) -> datetime:
    return datetime.strptime(moment, "%Y-%m-%dT%H:%M:%SZ")


def measured_on(record: dict) -> str:
    env = record.get("environment") or {}
    return (f"{short_gpu_name(env.get('gpu'))} | {env.get('arch')} | CUDA {env.get('cuda_runtime')} | "
            f"driver {env.get('driver')} | cutlass-dsl {env.get('cutlass_dsl')} | torch {env.get('torch')}")


# --- generated blocks ------------------------------------------------------------------------------
def render_blocks(body: str, meta: dict, newline: str, renderers: dict | None = None) -> str:
    """Replace the inside of each known generated block; everything outside stays as it is."""
    renderers = renderers or RENDERERS
    lines = body.splitlines(keepends=True)
    out: list[str] = []
    in_fence: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE_LINE.match(line)
        if fence:
            in_fence = None if in_fence == fence.group(1) else (in_fence or fence.group(1))
        marker = None if in_fence else BLOCK.match(line.rstrip("\r\n"))
        if marker and marker.group(1) == "begin" and marker.group(2) in renderers:
            end = _find_end(lines, index + 1, marker.group(2))
            if end is not None:
                out.append(line)
                rendered = renderers[marker.group(2)](meta)
                out.append(rendered.replace("\n", newline))
                out.append(lines[end])
                index = end + 1
                continue
        out.append(line)
        index += 1
    return "".join(out)


def _find_end(lines: list[str], start: int, name: str) -> int | None:
    in_fence: str | None = None
    for index in range(start, len(lines)):
        fence = FENCE_LINE.match(lines[index])
        if fence:
            in_fence = None if in_fence == fence.group(1) else (in_fence or fence.group(1))
        marker = None if in_fence else BLOCK.match(lines[index].rstrip("\r\n"))
        if marker and marker.group(1) == "end" and marker.group(2) == name:
            return index
    return None


def render_claims(meta: dict) -> str:
    """Claims table: each source-reported claim followed by the measurements that reproduce it."""
    claims = [c for c in meta.get("claims") or [] if isinstance(c, dict)]
    reproductions: dict[str, list[dict]] = {}
    for claim in claims:
        if claim.get("reproduces"):
            reproductions.setdefault(claim["reproduces"], []).append(claim)
    rows = ["", "| claim | value | evidence | GPU / arch | conditions | from |", "|---|---|---|---|---|---|"]
    ids = {c.get("id") for c in claims}
    for claim in claims:
        if claim.get("reproduces") in ids:
            continue
        rows += [_claim_row(row) for row in [claim, *reproductions.get(claim.get("id"), [])]]
    rows.append("")
    return "\n".join(rows) + "\n"


def _claim_row(claim: dict) -> str:
    value = f"{claim.get('value')} {claim.get('unit', '')}".strip()
    if claim.get("ratio") is not None and claim.get("baseline"):
        value += f" ({claim['ratio']:.3g}× {claim['baseline']['name']})"
    where = " / ".join(str(x) for x in (claim.get("gpu"), claim.get("arch")) if x)
    conditions = "; ".join(str(x) for x in (claim.get("dtype"), claim.get("shape"), claim.get("conditions")) if x)
    cites = claim.get("record") or claim.get("source") or ""
    if claim.get("record"):
        cites = f"[record]({_relative_record(cites)})"
    label = claim.get("id", "")
    if claim.get("reproduces"):
        label = f"↳ {label}"
    return f"| {label} | {value} | {claim.get('evidence')} | {where} | {conditions} | {cites} |".replace("\n", " ")


def _relative_record(path: str) -> str:
    return "../../" + path


RENDERERS = {"claims": render_claims}


# --- run history block -----------------------------------------------------------------------------
VERSUS_RUNS = 3   # the latest passing runs of one commit whose median the versus block shows
OUR_VARIANT = re.compile(r"^ours[ ,][^@]*$")   # our kernel with something changed (not another timing protocol: "@")


def render_versus(linked: list[ProbeSpec], records: dict[str, list[Record]], page_id: str | None) -> str:
    """`<!-- kernelwiki:begin versus -->`: ours against the kernel each case reproduces
    (`reproduced_by`) and against our own variants (baselines named "ours, ...", "ours with ...",
    "ours without ...", not those timed under another protocol, "... @ ..."): ours / candidate in
    each of the latest VERSUS_RUNS passing runs made from the same commit on the same GPU as the
    latest one (one kernel version), oldest first, and their median. Above 1, ours is faster.
    Cases that time a teaching variant as ours (params `variant`) are left out.
    """
    rows = ["", "| probe | case | candidate | ours / candidate per run, oldest first | median |", "|---|---|---|---|---|"]
    for spec in linked:
        runs = [r for r in records.get(spec.id, []) if r.data.get("mode") == "run" and r.data.get("status") == "passed"]
        if not runs:
            continue
        version = _kernel_version(runs[-1])
        same = [r for r in runs if _kernel_version(r) == version][-VERSUS_RUNS:]
        ratios: dict[tuple[str, str], list[float]] = {}
        for record in same:
            for case in record.data.get("cases") or []:
                case_spec = spec.case(case.get("id", "")) or {}
                pages = case_spec.get("pages")
                if (case.get("status") != "passed" or (pages is not None and page_id not in pages)
                        or (case.get("params") or {}).get("variant")):
                    continue
                for entry in case.get("baselines") or []:
                    name = str(entry.get("name", ""))
                    if entry.get("ratio") is None or not (name == case_spec.get("reproduced_by") or OUR_VARIANT.match(name)):
                        continue
                    ratios.setdefault((case["id"], name), []).append(float(entry["ratio"]))
        for (case_id, name), values in sorted(ratios.items()):
            cells = ", ".join(f"{v:.3g}" for v in values)
            rows.append(f"| {spec.id} | {case_id} | {name} | {cells} | {statistics.median(values):.3g} |")
    if len(rows) == 3:
        rows = ["", "No passing run of a linked probe compares ours with another kernel or a variant of ours yet."]
    rows.append("")
    return "\n".join(rows) + "\n"


def _kernel_version(record: Record) -> tuple:
    """What makes runs comparable for the versus block: the commit they ran and the GPU."""
    environment = record.data.get("environment") or {}
    return environment.get("commit"), environment.get("gpu")


def render_runs(linked: list[ProbeSpec], records: dict[str, list[Record]], page_id: str | None) -> str:
    """`<!-- kernelwiki:begin runs -->`: each case's ratio to its baseline in every passing run.

    What a sentence like "below 0.9× in every run" would say, written from the records so it cannot
    drift: one row per case of the page (cases that carry a ratio), the ratio of each passing run
    oldest first, and their min / median / max.
    """
    rows = ["", "| probe | case | baseline | ratio per run, oldest first | min | median | max |",
            "|---|---|---|---|---|---|---|"]
    for spec in linked:
        runs = [r for r in records.get(spec.id, []) if r.data.get("mode") == "run" and r.data.get("status") == "passed"]
        ratios: dict[tuple[str, str], list[float]] = {}
        for record in runs:
            for case in record.data.get("cases") or []:
                headline = case.get("headline") or {}
                pages = (spec.case(case.get("id", "")) or {}).get("pages")
                if case.get("status") != "passed" or headline.get("ratio") is None or (
                        pages is not None and page_id not in pages):
                    continue
                ratios.setdefault((case["id"], str(headline.get("baseline", ""))), []).append(float(headline["ratio"]))
        for (case_id, baseline), values in sorted(ratios.items()):
            cells = ", ".join(f"{v:.3g}" for v in values)
            rows.append(f"| {spec.id} | {case_id} | {baseline} | {cells} | {min(values):.3g} | "
                        f"{statistics.median(values):.3g} | {max(values):.3g} |")
    if len(rows) == 3:
        rows = ["", "No passing run of a linked probe carries a ratio to a baseline yet."]
    rows.append("")
    return "\n".join(rows) + "\n"

"""Claims derived from run records: one `measured` claim per passing case and architecture, the
median of the case's latest runs (case_evidence says which runs count), with the reproduction of
another kernel's reported value where a case says `reproduced_by`, and one claim per figure of the
case's `metrics` that its probe.yaml declares in `metric_claims` (metric_claims: a held-out set's
worst shape, a class geomean); and one `compiled` claim per architecture a compile-only record found the
expected instructions for. The claims carry the record and case they come from.
"""

from __future__ import annotations

import math
import re
from typing import Any

from kernelwiki.commands.evidence import case_refusal, control_failed
from kernelwiki.harness.env import short_gpu_name
from kernelwiki.model.spans import VARIANTS
from kernelwiki.model.vocab import Vocabulary
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

CLAIM_RUNS = 3
"""A measured claim is the median of a case's latest CLAIM_RUNS passing runs (a batch of several GPUs
of one model, `--gpus`/`--ray`, counts as one run and gives all its GPUs' values)."""


def case_evidence(spec: ProbeSpec, runs: list[Record], page_id: Any) -> dict[tuple[str, str], list[tuple[Record, dict]]]:
    """(arch, case id) -> the (record, case) pairs a page's claim for that case is built from.

    `runs` are the probe's real passing runs, oldest first. A case counts where it passed, is on the
    page, is above the timing protocol's floor and is possible evidence (commands.evidence: its run's
    negative control failed, its numbers under the datasheet peak). Of those, only the runs of the
    kernel version (environment.commit) and GPU model of the newest run that holds the case count,
    and of them the latest CLAIM_RUNS batches. Each case is read from the records that contain it,
    so a run of some cases (`--case X`) leaves the other cases' claims where they were."""
    found: dict[tuple[str, str], list[tuple[Record, dict]]] = {}
    for record in runs:
        if not control_failed(record.data):
            continue
        for case in record.data.get("cases") or []:
            headline = case.get("headline") or {}
            case_spec = spec.case(case.get("id", "")) or {}
            if case.get("status") != "passed" or "value" not in headline:
                continue
            if isinstance(case_spec.get("pages"), list) and page_id not in case_spec["pages"]:   # [] = on no page
                continue
            if case_refusal(record.data, case, spec.data):
                continue
            found.setdefault((str(record.arch), case["id"]), []).append((record, case))
    out = {}
    for key, pairs in found.items():
        version = _version(pairs[-1][0])
        same = [pair for pair in pairs if _version(pair[0]) == version]
        batches = list(dict.fromkeys(_batch(record) for record, _ in same))[-CLAIM_RUNS:]
        out[key] = [pair for pair in same if _batch(pair[0]) in batches]
    return out


def _version(record: Record) -> tuple:
    env = record.data.get("environment") or {}
    return env.get("commit"), short_gpu_name(env.get("gpu"))


def _batch(record: Record) -> str:
    return str(record.data.get("batch") or record.path)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(pairs: list[tuple[Record, dict]]) -> dict | None:
    """p10/p90 of the runs' headline values and how many runs (and GPUs, where several) fed the
    claim; None for a single run."""
    try:
        values = [float(case["headline"]["value"]) for _, case in pairs]
    except OverflowError:
        return None   # an integer past float range: the claim's value says it; refresh refuses the page
    return _spread(values, [record for record, _ in pairs])


def _spread(values: list[float], records: list[Record]) -> dict | None:
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return None
    out: dict[str, Any] = {"p10": round(_percentile(values, 0.1), 4), "p90": round(_percentile(values, 0.9), 4),
                           "runs": len(values)}
    gpus = {_gpu_identity(record) for record in records}
    if len(gpus) > 1:
        out["gpus"] = len(gpus)
    return out


def _gpu_identity(record: Record) -> str:
    env = record.data.get("environment") or {}
    return str(env.get("gpu_uuid") or (env.get("host"), env.get("gpu_index")))


def median_run(pairs: list[tuple[Record, dict]]) -> tuple[Record, dict]:
    """The run whose headline value is the median (the lower middle one for an even count), so
    that the claim's value, baseline and ratio are one run's, which validate can check."""
    ordered = sorted(pairs, key=lambda pair: pair[1]["headline"]["value"])
    return ordered[(len(ordered) - 1) // 2]


def measured_claims(spec: ProbeSpec, pairs: list[tuple[Record, dict]], hand_ids: set, vocab: Vocabulary) -> list[dict]:
    """The claim of one case (and its reproduction of another kernel's value) from its runs."""
    record, case = median_run(pairs)
    env = record.data.get("environment") or {}
    headline = case.get("headline") or {}
    case_spec = spec.case(case.get("id", "")) or {}
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
    declared = declared_metrics(case_spec)   # claims of their own (metric_claims): not repeated here
    params.update({k: v for k, v in (case.get("metrics") or {}).items()
                   if v is not None and k not in declared and len(_short(v)) <= MAX_CONDITION_CHARS})
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
        if within_spread(case, str(headline["baseline"])):
            claim["within_spread"] = True
    if "fraction_of_peak" in headline:
        claim["fraction_of_peak"] = headline["fraction_of_peak"]
    if record.fraction_of_ceiling(headline) is not None:
        claim["fraction_of_ceiling"] = headline["fraction_of_ceiling"]
    runs = spread(pairs)
    if runs:
        claim["spread"] = runs
    claims = [claim]
    reproduction = candidate_claim(claim, case, case_spec, hand_ids)
    if reproduction is not None:
        claims.append(reproduction)
    made = {c["id"] for c in claims}
    for name in versus_names(case_spec):
        versus = versus_claim(claim, case, name)
        if versus is not None and versus["id"] not in made:   # validate names the probe.yaml's duplicate
            made.add(versus["id"])
            claims.append(versus)
    taken = {c["id"] for c in claims}
    claims += [c for c in metric_claims(claim, pairs, case_spec) if c["id"] not in taken]
    return claims


def versus_names(case_spec: dict) -> list[str]:
    """The candidates a case's probe.yaml names in `versus` (one name or a list)."""
    names = case_spec.get("versus")
    return [str(n) for n in ([names] if isinstance(names, str) else names if isinstance(names, list) else [])]


def versus_slug(name: str) -> str:
    """The NAME of a versus claim's id (ID.vs-NAME): the candidate's letters and digits, lower case,
    the rest as '-'; empty for a name without a letter or digit (which validate refuses)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""A metric a probe.yaml may declare a claim (schemas/probe.schema.json says the same): a lower-case
identifier, never a span variant (`ratio`, `baseline`, `peak`, `ceiling`: ID.ratio would then name
two things)."""


def declared_metrics(case_spec: dict) -> dict[str, dict]:
    """A probe case's `metric_claims` (metric name -> how to state it), safe names only: a spec that
    fails its schema never reaches refresh, and this keeps a hand-built one from writing odd ids."""
    declared = case_spec.get("metric_claims") if isinstance(case_spec, dict) else None
    if not isinstance(declared, dict):
        return {}
    return {name: spec if isinstance(spec, dict) else {} for name, spec in declared.items()
            if isinstance(name, str) and METRIC_NAME.fullmatch(name) and name not in VARIANTS}


def metric_value(case: dict, name: str) -> int | float | None:
    """A case's `metrics[name]` where it is a finite number (not a bool, not an integer past float
    range), else None: null (not measured), a string or anything else makes no claim."""
    metrics = case.get("metrics") if isinstance(case.get("metrics"), dict) else {}
    value = metrics.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return value if math.isfinite(float(value)) else None
    except OverflowError:
        return None


def metric_claims(ours: dict, pairs: list[tuple[Record, dict]], case_spec: dict) -> list[dict]:
    """The claims of the figures a case's probe.yaml declares in `metric_claims` (e.g. a held-out
    set's `worst_ratio`): ID.NAME, the median over the same runs as the case's own claim of
    `metrics[NAME]` (the run that holds it, so validate can check it), with the declared unit,
    `metric` (default NAME), and `statistic` and `baseline` as its conditions (the case's parameters
stand in the case's own claim). A run whose figure is
    null or not a finite number gives none; so does a case in no passing run (case_evidence)."""
    out = []
    for name, declared in declared_metrics(case_spec).items():
        held = [(record, case, value) for record, case in pairs if (value := metric_value(case, name)) is not None]
        if not held:
            continue
        held.sort(key=lambda item: item[2])
        record, case, value = held[(len(held) - 1) // 2]
        env = record.data.get("environment") or {}
        claim: dict[str, Any] = {"id": f"{ours['id']}.{name}", "metric": str(declared.get("metric") or name), "value": value}
        if declared.get("unit"):
            claim["unit"] = str(declared["unit"])
        claim.update(gpu=short_gpu_name(env.get("gpu")), arch=str(record.arch))
        claim.update({key: ours[key] for key in ("dtype", "shape") if key in ours})
        words = [str(declared["statistic"])] if declared.get("statistic") else []
        if declared.get("baseline"):
            words.append(f"against {declared['baseline']}")
        if words:
            claim["conditions"] = ", ".join(words)
        claim.update(evidence="measured", record=record.path, case=case["id"], case_metric=name)
        runs = _spread([float(v) for _, _, v in held], [r for r, _, _ in held])
        if runs:
            claim["spread"] = runs
        out.append(claim)
    return out


def _timed(case: dict) -> dict[str, tuple[float, float]]:
    """Each timed candidate's (p10, p90) in ms, where the case's timing gives both."""
    out = {}
    for name, entry in (case.get("timing") or {}).items() if isinstance(case.get("timing"), dict) else ():
        if isinstance(entry, dict):
            low, high = entry.get("p10_ms"), entry.get("p90_ms")
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high)):
                out[str(name)] = (float(low), float(high))
    return out


def within_spread(case: dict, other: str) -> bool:
    """Whether ours and `other` overlap in the case's timing, p10 to p90: ours is the one timed
    candidate that is not among the case's baselines (no verdict where that is not one)."""
    timed = _timed(case)
    named = {str(b.get("name")) for b in case.get("baselines") or [] if isinstance(b, dict)} | {other}
    ours = [name for name in timed if name not in named]
    if len(ours) != 1 or other not in timed:
        return False
    (a_low, a_high), (b_low, b_high) = timed[ours[0]], timed[other]
    return a_low <= b_high and b_low <= a_high


def protocol_of(name: str) -> str:
    """The timing protocol a baseline's name says it was timed under ("DeepGEMM @ 8 GB memset" ->
    "8 GB memset"); "" for a candidate timed under the case's own protocol."""
    return name.split(" @ ", 1)[1].strip() if " @ " in name else ""


def versus_ours_value(case: dict, name: str) -> int | float | None:
    """Ours in the same protocol as candidate `name`: the case's headline value, or for a candidate
    timed under another protocol ("X @ P") the case's "ours @ P" entry, whose value the entry's
    ratio was taken against; None where the case has no such figure (then no claim is made: a ratio
    under one protocol never stands beside a value under another)."""
    protocol = protocol_of(name)
    if not protocol:
        value = (case.get("headline") or {}).get("value")
    else:
        value = next((b.get("value") for b in case.get("baselines") or []
                      if isinstance(b, dict) and b.get("name") == f"ours @ {protocol}"), None)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def versus_claim(ours: dict, case: dict, name: str) -> dict | None:
    """For a candidate a case's probe.yaml names in `versus` (timed beside ours, e.g. our own
    cooperative schedule beside ping-pong): ours over that candidate, as a claim of its own
    (ID.vs-NAME), so a page about that comparison states it from a span. None where it did not run."""
    entry = next((b for b in case.get("baselines") or [] if isinstance(b, dict) and b.get("name") == name), None)
    if not name or entry is None or not isinstance(entry.get("value"), (int, float)) or isinstance(entry.get("value"), bool) \
            or not isinstance(entry.get("ratio"), (int, float)):
        return None
    slug = versus_slug(str(name))
    if not slug:
        return None
    value = versus_ours_value(case, str(name))
    if value is None:
        return None
    claim = {key: ours[key] for key in ("metric", "unit", "gpu", "arch", "dtype", "shape") if key in ours}
    protocol = protocol_of(str(name))
    mine = f"ours @ {protocol}" if protocol else "ours"
    claim["conditions"] = f"{mine} against {name}, same run and inputs"
    out = {"id": f"{ours['id']}.vs-{slug}", "metric": claim.pop("metric", None), "value": value, **claim,
           "evidence": "measured", "record": ours["record"],
           "case": ours["case"], "baseline": {"name": name, "value": entry["value"]}, "ratio": entry["ratio"]}
    if within_spread(case, str(name)):
        out["within_spread"] = True
    return out


def candidate_claim(ours: dict, case: dict, case_spec: dict, hand_ids: set) -> dict | None:
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
    return out


MAX_CONDITION_CHARS = 160
"""A case metric longer than this as text (a held-out set's per-shape list) stays in the record, out
of the claim's conditions: every get answer and claims table carries the conditions."""


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def compiled_claim(spec: ProbeSpec, record: Record, arch: str) -> dict:
    found = (record.data.get("instructions") or {}).get(arch, {}).get("found", [])
    return {"id": f"compiled.{spec.id.removeprefix('probe-')}.{arch}", "metric": "instructions-found",
            "value": ", ".join(found), "arch": arch, "evidence": "compiled", "record": record.path}

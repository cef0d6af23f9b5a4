"""What makes a record's case usable as evidence: the rules validate enforces on records and claims
and refresh applies before it writes a measured claim (issue 23).

- The headline ratio is against the strongest correct baseline timed in the same case (or the
  exception probe.yaml declares in `headline_baseline`, with its reason).
- A passing case above the datasheet peak, or faster than the empty launch measured beside it, is
  impossible: it is a timing or FLOP-count bug, never a claim source.
- A measured claim rests on a run whose negative control ran and failed its gate.
- A compiled claim rests on a record that found every instruction (or fact) its probe now expects:
  a record from before the probe was changed shows what the old probe checked, not what the page says.
- A case under the timing protocol's floor (kernelwiki.harness.timing.case_below_floor) is no claim
  source: what was timed is the launch.
"""

from __future__ import annotations

from typing import Any

from kernelwiki.harness import peaks
from kernelwiki.harness.env import short_gpu_name
from kernelwiki.harness.timing import case_below_floor

LOWER_IS_BETTER_UNITS = ("us", "ms", "ns", "s", "cycles", "ulp")

HEADLINE_RULE_FROM = "2026-12-01T15:00:00Z"
"""Records started before this were written by the harness before it chose the headline among the
baselines (issue 23); validate holds only later records to the strongest-baseline rule, and lists
the older ones that break it with `weak_headlines` (tests/test_evidence.py prints them)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def headline_exception(probe: dict | None, case_id: Any) -> dict | None:
    """probe.yaml's declared `headline_baseline` for a case: the case's own, else the probe's."""
    if not isinstance(probe, dict):
        return None
    for case in probe.get("cases") or []:
        if isinstance(case, dict) and case.get("id") == case_id and isinstance(case.get("headline_baseline"), dict):
            return case["headline_baseline"]
    declared = probe.get("headline_baseline")
    return declared if isinstance(declared, dict) else None


def headline_problem(case: dict, exception: dict | None) -> str | None:
    """Why a case's headline baseline is not the strongest correct candidate it timed, or None.

    Candidates are the case's `baselines` entries that ran (a positive value), were not marked
    incorrect (`correct: false`) and are not context only (`headline_candidate: false`: a lower
    precision, our own variant). Strongest: the highest value, or the lowest for a time-like unit.
    A declared exception (with a reason) is accepted where that baseline is the headline."""
    headline = case.get("headline") if isinstance(case.get("headline"), dict) else {}
    chosen = headline.get("baseline")
    if not isinstance(chosen, str):
        return None
    if isinstance(exception, dict) and exception.get("name") == chosen and exception.get("reason"):
        return None
    lower = headline.get("unit") in LOWER_IS_BETTER_UNITS
    candidates = {str(b["name"]): float(b["value"]) for b in case.get("baselines") or []
                  if isinstance(b, dict) and isinstance(b.get("name"), str) and _number(b.get("value"))
                  and b["value"] > 0 and b.get("correct") is not False and b.get("headline_candidate") is not False}
    if not candidates:
        return None
    best = (min if lower else max)(candidates, key=candidates.__getitem__)
    if chosen not in candidates:
        return (f"headline baseline {chosen!r} is not a correct headline candidate of the case; the strongest "
                f"is {best!r}")
    mine, top = candidates[chosen], candidates[best]
    if (mine > top if lower else mine < top) and abs(mine - top) > 1e-9 * max(abs(top), 1.0):
        return (f"headline is against {chosen!r} ({mine:g}), but {best!r} ({top:g}) is the strongest correct "
                "baseline timed in the case; headline against it, or declare headline_baseline with a reason "
                "in probe.yaml")
    return None


def impossible_problem(case: dict, gpu: Any, level: Any = None) -> str | None:
    """Why a case's numbers cannot be true on the GPU it ran on, or None: its TFLOP/s above the
    datasheet peak (kernelwiki.harness.peaks) for its dtype, its TB/s above the ceiling of the
    memory level it reads (the record's `params.level`, else `level` - the probe.yaml's - else
    hbm), a fraction of peak above 1, or a timed candidate faster than the empty launch measured
    with it (protocol.floor_ms)."""
    headline = case.get("headline") if isinstance(case.get("headline"), dict) else {}
    value = headline.get("value")
    fraction = headline.get("fraction_of_peak")
    if _number(fraction) and fraction > 1.0:
        return f"its headline is {fraction:g}x the datasheet peak"
    if _number(value):
        params = dict(case.get("params")) if isinstance(case.get("params"), dict) else {}
        if "level" not in params and isinstance(level, str):
            params["level"] = level
        key, peak = peaks.peak_for(headline.get("unit"), params, short_gpu_name(gpu))
        if peak and value > peak:
            what = f"the {params.get('level', 'hbm')} ceiling" if headline.get("unit") == "TB/s" else "the datasheet peak"
            return f"its headline {str(value)[:20]} {headline.get('unit')} exceeds {what} ({peak:g})"
    for name, entry in (case.get("timing") or {}).items() if isinstance(case.get("timing"), dict) else ():
        if not isinstance(entry, dict):
            continue
        floor = (entry.get("protocol") or {}).get("floor_ms") if isinstance(entry.get("protocol"), dict) else None
        if _number(entry.get("median_ms")) and _number(floor) and entry["median_ms"] < floor:
            return f"{name} timed {entry['median_ms']:g} ms, under the empty-launch floor ({floor:g} ms)"
    return None


def control_failed(record: dict) -> bool:
    """Whether the run's negative control ran and failed its gate: one `negative_control` mapping
    (failed_gate true), with every entry of its `controls` list failing too, or a list of controls
    that all failed. A run without a control proves nothing its gate would not also let through."""
    control = record.get("negative_control")
    if isinstance(control, list):
        return bool(control) and all(isinstance(c, dict) and c.get("failed_gate") is True for c in control)
    if not isinstance(control, dict) or control.get("failed_gate") is not True:
        return False
    listed = control.get("controls")
    return not isinstance(listed, list) or all(isinstance(c, dict) and c.get("failed_gate") is True for c in listed)


def weaker_headline(case: dict, exception: dict | None) -> str | None:
    """Why a case's headline is against a weaker baseline than another correct candidate it timed,
    whatever the record's date, or None. Only a stronger *named candidate* counts here: an older
    record whose headline name is spelt otherwise than its baselines (cuDNN SDPA / cudnn) is listed
    by weak_headlines, not refused."""
    why = headline_problem(case, exception)
    return why if why and why.startswith("headline is against") else None


def case_refusal(record: dict, case: dict, probe: dict | None = None) -> str | None:
    """Why a passing case may stand neither in a claim nor in a generated block, or None: it timed the
    launch (under the protocol's floor), its numbers are impossible, or its headline is against a weaker
    baseline than one it timed (the ratio flatters). refresh and validate both ask this."""
    if case_below_floor(case, record.get("protocol")):
        return "its fastest candidate is under the timing protocol's floor (it measures the launch, not the kernel)"
    declared = next((c.get("params") or {} for c in (probe or {}).get("cases") or []
                     if isinstance(c, dict) and c.get("id") == case.get("id") and isinstance(c.get("params"), dict)), {})
    impossible = impossible_problem(case, (record.get("environment") or {}).get("gpu"), declared.get("level"))
    if impossible:
        return impossible
    return weaker_headline(case, headline_exception(probe, case.get("id")))


def claim_source_problem(record: dict, case: dict, probe: dict | None = None) -> str | None:
    """Why a passing case of a record may not be the source of a measured claim, or None."""
    if not control_failed(record):
        return "its run has no negative control that ran and failed the gate"
    return case_refusal(record, case, probe)


def stale_compile_problem(claim: dict, record: dict, probe: dict | None) -> str | None:
    """Why a compiled claim's record does not show what its probe now checks, or None: an entry of the
    probe's `expected_instructions` for the claim's arch that the record did not find."""
    if not isinstance(probe, dict) or not isinstance(probe.get("expected_instructions"), dict):
        return None
    expected = probe["expected_instructions"].get(claim.get("arch"))
    scanned = (record.get("instructions") or {}).get(claim.get("arch")) if isinstance(record.get("instructions"), dict) else None
    if not isinstance(expected, list) or not isinstance(scanned, dict):
        return None
    found = scanned.get("found") if isinstance(scanned.get("found"), list) else []
    missing = [str(e) for e in expected if e not in found]
    if not missing:
        return None
    return (f"record {record.get('run_id', '?')} did not find {', '.join(missing[:4])}, which {record.get('probe')} now "
            "expects: it predates the probe's change (or the probe fails); re-run it (--compile-only) and refresh")


def weak_headlines(records: dict[str, Any], probes: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(record path, case id, why) for every case whose headline breaks the strongest-baseline rule,
    whatever its date: what the cut-off (HEADLINE_RULE_FROM) leaves in the tree."""
    out = []
    for rel, data in sorted(records.items()):
        if not isinstance(data, dict):
            continue
        for case in data.get("cases") or []:
            if isinstance(case, dict) and case.get("status") == "passed":
                why = headline_problem(case, headline_exception(probes.get(data.get("probe")), case.get("id")))
                if why:
                    out.append((rel, str(case.get("id")), why))
    return out

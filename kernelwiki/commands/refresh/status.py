"""What a page's `status` is, from its probes' records: regressed (the latest run of an
architecture failed, or fell more than REGRESSION behind the runs before it), stale (old evidence,
or evidence from another toolchain than pyproject.toml pins), verified or draft.
"""

from __future__ import annotations

import math
import re
import statistics
from datetime import datetime, timedelta
from typing import Any

from kernelwiki.commands.evidence import LOWER_IS_BETTER_UNITS
from kernelwiki.harness import gates
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest

BAD_RUN = ("incorrect", "control-passed", "control-too-blunt", "failed", "crashed", "timeout")
REGRESSION = 0.10
HISTORY = 3                # earlier runs whose median a new run is compared with
LAUNCH_BOUND_MS = 0.05   # timings below this are launch overhead and jitter, not kernel speed


def page_status(linked: list[ProbeSpec], records: dict[str, list[Record]], claims: list, used: list[Record],
                settings: dict, newest: str, goals: Any = None) -> str:
    """The page's status from its linked probes' records, the claims refresh wrote and the records
    they came from (`used`); "now" is `newest`, the newest record in the repository. A page whose
    stated goal (`goals`, judged by goal_met) is missed, or cannot be judged, is not verified: draft."""
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
            newest_run = latest(probe_records, mode="run", arch=arch)
            if newest_run is not None:
                runs = [r for r in probe_records if r.mode == "run" and arch in r.archs()]
                if bad_run(newest_run) or dropped(runs):
                    return "regressed"
            elif (compiled := latest(probe_records, mode="compile-only", arch=arch)) is not None \
                    and compiled.status == "compile-failed":
                return "regressed"
    if used and _stale(used, settings, newest):
        return "stale"
    cited = all(isinstance(c, dict) and (c.get("source") or c.get("record")) for c in claims)
    by_id = claims_by_id(claims)
    met = all(goal_met(goal, by_id) is True for goal in page_goals({"goals": goals}))
    return "verified" if verified and cited and met else "draft"


def page_goals(meta: dict) -> list[dict]:
    """The goals a page states (its `goals` entries that are mappings; validate reports the rest,
    and a `goals` that is no list)."""
    goals = meta.get("goals")
    return [g for g in goals if isinstance(g, dict)] if isinstance(goals, list) else []


def claims_by_id(claims: list) -> dict:
    """A page's claims by id, made once for all its goals (a goal looked its claim up in a fresh
    mapping of every claim: thousands of goals on thousands of claims took minutes)."""
    return {c.get("id"): c for c in claims if isinstance(c, dict) and isinstance(c.get("id"), str)}


def goal_value(goal: dict, claims: list | dict) -> float | None:
    """The number a goal is judged by: its claim's value, or for `ID.ratio` the claim's ratio
    (`claims`: the page's claims, or claims_by_id of them)."""
    target = str(goal.get("claim", ""))
    by_id = claims if isinstance(claims, dict) else claims_by_id(claims)
    claim, field = (by_id.get(target), "value") if target in by_id else (by_id.get(target.removesuffix(".ratio")), "ratio")
    value = claim.get(field) if isinstance(claim, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def goal_met(goal: dict, claims: list | dict) -> bool | None:
    """Whether a goal the page states is met by its claim (at_least / at_most), None where the claim
    holds no number."""
    value = goal_value(goal, claims)
    if value is None:
        return None
    low, high = goal.get("at_least"), goal.get("at_most")
    return (not isinstance(low, (int, float)) or value >= low) and (not isinstance(high, (int, float)) or value <= high)


def bad_run(record: Record) -> bool:
    """Whether a run cannot back a verified page: its status is one of BAD_RUN, or - judged again
    here, for records the runner wrote before it applied the rule - some gate test no negative
    control fails at gates.CONTROL_NEAR_FACTOR to CONTROL_BLUNT_FACTOR times its tolerance (what
    the runner now records as control-too-blunt)."""
    if record.status in BAD_RUN:
        return True
    control = record.data.get("negative_control")
    if not isinstance(control, dict):
        return False
    entries = control.get("controls") or [{"name": "control", "correctness": control.get("correctness")}]
    return bool(gates.control_reach([e for e in entries if isinstance(e, dict)]))


def dropped(runs: list[Record]) -> bool:
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
        middle = statistics.median(previous)
        if middle <= 0:
            continue   # earlier scores around zero (e.g. -1 and +1): no ratio says how far it fell
        change = score / middle
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
        return _float(headline["ratio"])
    if like is not None and reference.get("ratio"):
        return None   # the newer case has a ratio this one lacks: not comparable
    return _float(headline["value"])


def _float(value) -> float | None:
    """A finite float, or None for an integer past float range (validate lets JSON integers of any size through)."""
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


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

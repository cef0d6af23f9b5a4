"""A run record's form on disk: compact by construction, expanded for every reader.

Most of a record's bytes were its timing entries: each candidate of a case repeated the same
protocol (method, input sets, set bytes, L2 rotation, floor) and the same clocks, and every
measured float carried 17 digits of which the run's noise leaves about three. On disk:

- measured floats (each case's `timing` and `correctness`, the `negative_control`) keep
  SIGNIFICANT_DIGITS significant digits;
- a case's `timing_shared` holds the entry fields (and, under `protocol`, the protocol fields)
  that all its timing entries have with equal values; each entry keeps only its own.

`expand` merges the shared fields back, in the order `bench` writes them, so that refresh,
validate, get, the site and MCP see each entry whole, as records before this form held them.
`compact` hoists only what `expand` restores exactly. `shared_problems` names what makes a
record's `timing_shared` unusable (validate reports it as a problem line; readers never see it).
"""

from __future__ import annotations

import json
from typing import Any

from kernelwiki.model.problems import field_path

SIGNIFICANT_DIGITS = 6
"""Timer and error noise is far above 1e-6 of a value; more digits are not facts about the run."""
ROUNDED_CASE_FIELDS = ("timing", "correctness")
ENTRY_ORDER = ("median_ms", "p10_ms", "p90_ms", "sm_clock_mhz_before", "sm_clock_mhz_after", "protocol")
PROTOCOL_ORDER = ("method", "launches", "input_sets", "set_bytes", "l2_rotation", "eager_ms", "floor_ms", "below_floor")
"""The field order of harness.timing.bench's entries; expanded entries follow it, then any others."""
SHARED = "timing_shared"


def round_floats(value: Any, digits: int = SIGNIFICANT_DIGITS) -> Any:
    """`value` with every float (at any depth) rounded to `digits` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {key: round_floats(item, digits) for key, item in value.items()}
    if isinstance(value, list):
        return [round_floats(item, digits) for item in value]
    return value


def compact(record: dict) -> dict:
    """The record as the runner writes it (a new dict; `record` is left as it is)."""
    out = dict(record)
    if isinstance(record.get("negative_control"), dict):
        out["negative_control"] = round_floats(record["negative_control"])
    if isinstance(record.get("cases"), list):
        out["cases"] = [_compact_case(case) if isinstance(case, dict) else case for case in record["cases"]]
    return out


def expand(record: Any) -> Any:
    """The record as readers see it: each case's `timing_shared` merged into its timing entries.
    Call it only on a record without shared_problems."""
    if not isinstance(record, dict) or not isinstance(record.get("cases"), list):
        return record
    if not any(isinstance(case, dict) and SHARED in case for case in record["cases"]):
        return record
    return dict(record, cases=[_expand_case(case) if isinstance(case, dict) else case for case in record["cases"]])


def shared_problems(record: Any) -> list[tuple[str, str]]:
    """(field, what is wrong) for each case whose `timing_shared` cannot be merged back unambiguously."""
    problems: list[tuple[str, str]] = []

    def add(parts: tuple, message: str) -> None:
        problems.append((field_path(parts), message))

    cases = record.get("cases") if isinstance(record, dict) else None
    for index, case in enumerate(cases if isinstance(cases, list) else []):
        if not isinstance(case, dict) or SHARED not in case:
            continue
        shared, timing = case[SHARED], case.get("timing")
        here = field_path(("cases", index, SHARED))
        protocol = shared.get("protocol", {}) if isinstance(shared, dict) else None
        if not isinstance(protocol, dict):
            continue   # not a mapping: the record schema says so
        if not isinstance(timing, dict) or not timing:
            add(("cases", index, SHARED), "shared by no timing entry: the case has no `timing` entries")
            continue
        for name, entry in timing.items():
            where = ("cases", index, "timing", name)
            if not isinstance(entry, dict):
                add(where, f"is not an object, so it cannot take the fields of {here}")
                continue
            for key in sorted(set(entry) & set(shared) - {"protocol"}):
                add((*where, key), f"also in {here}: a field is shared or the entry's own, not both")
            own = entry.get("protocol", {})
            if "protocol" in shared and not isinstance(own, dict):   # an empty shared protocol too
                add((*where, "protocol"), f"is not an object, so it cannot take {here}.protocol")
                continue
            for key in sorted(set(own) & set(protocol) if isinstance(own, dict) else ()):
                add((*where, "protocol", key), f"also in {here}.protocol: a field is shared or the entry's own, not both")
    return problems


def _compact_case(case: dict) -> dict:
    rounded = dict(case, **{key: round_floats(case[key]) for key in ROUNDED_CASE_FIELDS if key in case})
    hoisted = _hoist(rounded)
    # Kept only where the reader gets back exactly what was measured, field order included.
    return hoisted if hoisted is not rounded and _dump(_expand_case(hoisted)) == _dump(rounded) else rounded


def _hoist(case: dict) -> dict:
    timing = case.get("timing")
    entries = list(timing.values()) if isinstance(timing, dict) else []
    if len(entries) < 2 or SHARED in case or not all(isinstance(entry, dict) for entry in entries):
        return case
    shared = _common([{k: v for k, v in entry.items() if k != "protocol"} for entry in entries])
    protocols = [entry.get("protocol") for entry in entries]
    if all(isinstance(protocol, dict) for protocol in protocols) and (common := _common(protocols)):
        shared["protocol"] = common
    if not shared:
        return case
    own = {}
    for name, entry in timing.items():
        own[name] = {k: v for k, v in entry.items() if k not in shared}
        rest = {k: v for k, v in entry["protocol"].items() if k not in shared["protocol"]} if "protocol" in shared else {}
        if rest:   # an entry whose protocol is all shared leaves it out
            own[name]["protocol"] = rest
    return dict(case, timing=own, **{SHARED: shared})


def _common(dicts: list[dict]) -> dict:
    """The fields every one of `dicts` has with the same value (JSON-equal: 1 and 1.0 differ)."""
    first = dicts[0]
    return {key: value for key, value in first.items()
            if all(key in other and _dump(other[key]) == _dump(value) for other in dicts[1:])}


def _expand_case(case: dict) -> dict:
    if SHARED not in case:
        return case
    shared = case[SHARED]
    out = {key: value for key, value in case.items() if key != SHARED}
    out["timing"] = {name: _merged(entry, shared, ENTRY_ORDER) for name, entry in case["timing"].items()}
    if "protocol" in shared:
        for entry in out["timing"].values():
            entry["protocol"] = _merged(entry.get("protocol", {}), shared["protocol"], PROTOCOL_ORDER)
    return out


def _merged(own: dict, shared: dict, order: tuple[str, ...]) -> dict:
    both = {**{k: v for k, v in shared.items() if k != "protocol" or order is PROTOCOL_ORDER}, **own}
    return {**{key: both[key] for key in order if key in both}, **both}


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

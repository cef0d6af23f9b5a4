"""Datasheet peaks (dense) per GPU, and the ceilings measured by probe-calibration.

The datasheet figures are cited on the pages (src-nvidia-h200); records quote a value's fraction
of them. The measured ceilings come only from probe-calibration run earlier in the same runner
invocation, on the same GPU, timed by the same protocol (ctx.bench): the runner passes them in
KERNELWIKI_CEILINGS, naming the calibration record's run id. Never from a committed record of
another run: a ceiling from another day, another clock or another protocol flatters or shames
every fraction quoted against it. Without a calibration in this run the ceilings are null, with
the reason.
"""

from __future__ import annotations

import json
import os
import re

# short GPU name -> metric key -> dense datasheet peak. TFLOP/s for math, TB/s for bandwidth.
DATASHEET: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "e4m3": 1979.0, "copy": 4.8},
    "H100-80GB-HBM3": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "e4m3": 1979.0, "copy": 3.35},
}

CEILINGS_ENV = "KERNELWIKI_CEILINGS"
CEILING_FIELDS = ("run_id", "record", "protocol", "reason")
"""The fields of the ceilings that say where they come from: no ceiling is called so."""
CEILING_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


def ceiling_name_problem(key: object) -> str | None:
    """Why a calibration case's `params.ceiling` cannot name a ceiling, or None: a name such as bf16
    or copy, and none of CEILING_FIELDS (it would overwrite where the ceilings come from)."""
    if not isinstance(key, str) or not CEILING_NAME.fullmatch(key):
        return f"{key!r} is not a ceiling name (lowercase letters, digits, '_', like bf16 or copy)"
    if key in CEILING_FIELDS:
        return f"{key!r} is a field of the ceilings themselves ({', '.join(CEILING_FIELDS)}), not a ceiling"
    return None


def datasheet(gpu_short: str, key: str) -> float | None:
    return DATASHEET.get(gpu_short, {}).get(key)


def measured_ceilings(declared: list[str]) -> dict:
    """The ceilings a probe that declares them (probe.yaml `ceilings`) may quote: those the runner
    measured in this invocation ({'run_id', 'record', 'protocol', 'copy': TB/s, 'bf16': TFLOP/s});
    a declared one not measured is null, and without a usable calibration all are, with the
    reason. A probe that declares none quotes none."""
    if not declared:
        return {}
    raw = os.environ.get(CEILINGS_ENV)
    try:
        ceilings = json.loads(raw) if raw else None
    except ValueError:
        ceilings = None
    if not isinstance(ceilings, dict):
        ceilings = ceilings_unavailable("no probe-calibration ran before this probe in this runner invocation"
                                        if not raw else f"{CEILINGS_ENV} is not a JSON object")
    return {**{key: None for key in declared}, **ceilings}


def ceilings_unavailable(reason: str) -> dict:
    """The ceilings of a probe run after no usable calibration: none, and why."""
    return {"run_id": None, "record": None, "reason": reason}


def ceilings_from_record(record: dict, path: str | None) -> dict:
    """The ceilings a passing calibration record measured, named by its run id (and its path once
    written) and the timing method it used."""
    out: dict = {"run_id": record.get("run_id"), "record": path,
                 "protocol": (record.get("protocol") or {}).get("method")}
    for case in record.get("cases", []):
        headline = case.get("headline") or {}
        key = (case.get("params") or {}).get("ceiling")
        if key and ceiling_name_problem(key) is None and case.get("status") == "passed" and "value" in headline:
            out[key] = headline["value"]
    return out


LEVELS = ("hbm", "l2", "smem")
"""The memory level a bandwidth case reads (its `params.level`; `hbm` when it names none): each
has its own ceiling, since a working set that the L2 or shared memory serves is legitimately read
faster than HBM delivers."""

SM_LOAD_PATH: dict[str, tuple[int, float]] = {"H200": (132, 1980.0), "H100-80GB-HBM3": (132, 1980.0)}
"""Short GPU name -> (SMs, top SM clock in MHz), as the records' environment reports them
(sm_count, nvidia-smi's clock under load)."""
BYTES_PER_SM_CLOCK = 128
"""What one SM's shared-memory / L1 data path delivers per clock: 32 banks of 4 bytes
(hw-shared-memory-banks). Every load's data lands in that path, so neither a shared-memory nor an
L2 read can be faster than all SMs taking 128 bytes per clock at the top clock."""


def level_ceiling(level: str, gpu_short: str) -> tuple[float | None, str]:
    """(TB/s, where it comes from) that no read of `level` can exceed on this GPU: HBM by the
    datasheet; the L2 and shared memory by the SMs' load path (SMs x BYTES_PER_SM_CLOCK x top
    clock), an upper bound, not the level's own bandwidth, which probe-l2-cache and
    probe-smem-banks measure. (None, why) for a GPU without figures here."""
    if level not in LEVELS:
        raise ValueError(f"unknown memory level {level!r}; known: {', '.join(LEVELS)}")
    if level == "hbm":
        peak = datasheet(gpu_short, "copy")
        return peak, "HBM datasheet bandwidth (src-nvidia-h200)" if peak else f"no HBM datasheet figure for {gpu_short!r}"
    if gpu_short not in SM_LOAD_PATH:
        return None, f"no SM count and clock for {gpu_short!r}"
    sms, mhz = SM_LOAD_PATH[gpu_short]
    return (round(sms * BYTES_PER_SM_CLOCK * mhz * 1e6 / 1e12, 2),
            f"{sms} SMs x {BYTES_PER_SM_CLOCK} B per clock (32 banks of 4 bytes) x {mhz:g} MHz: the SMs' load path")


PEAK_UNITS = ("TFLOP/s", "TB/s")
"""Headline units a ceiling bounds: TFLOP/s by the datasheet peak of the case's dtype (params.dtype),
TB/s by the ceiling of the memory level it reads (params.level, default hbm)."""


def peak_for(unit: object, params: dict | None, gpu_short: str) -> tuple[str | None, float | None]:
    """(peak key, ceiling) bounding a headline in `unit` on this GPU: TFLOP/s by the case's dtype,
    TB/s by its memory level (`hbm` -> the datasheet's `copy`, `l2`/`smem` -> the SMs' load path);
    (None, None) for other units or a GPU without figures here."""
    if unit not in PEAK_UNITS:
        return None, None
    params = params or {}
    if unit == "TB/s":
        level = params.get("level", "hbm")
        if not isinstance(level, str) or level not in LEVELS:
            return None, None   # validate reports the probe.yaml; a case is not failed for it
        return ("copy" if level == "hbm" else level), level_ceiling(level, gpu_short)[0]
    key = params.get("dtype")
    return (key, datasheet(gpu_short, key)) if isinstance(key, str) else (None, None)


def impossible(headline: dict, params: dict, gpu_short: str) -> str | None:
    """Why a headline cannot be true on this GPU (above the datasheet peak for its dtype, or the
    ceiling of the memory level it reads), or None. A number above it is a timing or accounting
    bug (a graph that captured no work, FLOPs or bytes counted twice), never a result."""
    if not isinstance(headline, dict) or not isinstance(headline.get("value"), (int, float)):
        return None
    fraction = headline.get("fraction_of_peak")
    if isinstance(fraction, (int, float)) and fraction > 1.0:
        return (f"headline {headline['value']:g} {headline.get('unit', '')} is {fraction:.2f}x the datasheet peak "
                f"of the {gpu_short}: a timing or FLOP-count bug, not a result")
    unit = headline.get("unit")
    key, peak = peak_for(unit, params, gpu_short)
    if peak and headline["value"] > peak:
        what = f"the ceiling of {params.get('level', 'hbm')} reads" if unit == "TB/s" else f"the datasheet peak for {key}"
        return (f"headline {headline['value']:g} {unit} exceeds the {gpu_short}'s {what} "
                f"({peak:g} {unit}): a timing or byte/FLOP-count bug, not a result")
    return None

"""Datasheet peaks (dense) per GPU, and the ceilings measured by probe-calibration.

The datasheet figures are cited on the pages (src-nvidia-h200); records quote a value's fraction
of them. The measured ceilings come from probe-calibration, either run earlier in the same runner
invocation (passed in KERNELWIKI_CEILINGS) or, failing that, from its newest committed record on the
same GPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# short GPU name -> metric key -> dense datasheet peak. TFLOP/s for math, TB/s for bandwidth.
DATASHEET: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "e4m3": 1979.0, "copy": 4.8},
    "H100-80GB-HBM3": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.5, "e4m3": 1979.0, "copy": 3.35},
}

CEILINGS_ENV = "KERNELWIKI_CEILINGS"


def datasheet(gpu_short: str, key: str) -> float | None:
    return DATASHEET.get(gpu_short, {}).get(key)


def measured_ceilings(repo_root: Path, gpu_name: str | None) -> dict:
    """{'copy': TB/s, 'bf16': TFLOP/s, 'record': path} from this run or the newest calibration record."""
    if os.environ.get(CEILINGS_ENV):
        return json.loads(os.environ[CEILINGS_ENV])
    newest: tuple[str, dict, Path] | None = None
    for path in (repo_root / "artifacts" / "evidence" / "probe-calibration").glob("*.json"):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if record.get("status") == "passed" and record.get("environment", {}).get("gpu") == gpu_name:
            if newest is None or record["started_at"] > newest[0]:
                newest = (record["started_at"], record, path)
    if newest is None:
        return {}
    return ceilings_from_record(newest[1], str(newest[2].relative_to(repo_root)))


def ceilings_from_record(record: dict, path: str) -> dict:
    out = {"record": path}
    for case in record.get("cases", []):
        headline = case.get("headline") or {}
        key = (case.get("params") or {}).get("ceiling")
        if key and case.get("status") == "passed" and "value" in headline:
            out[key] = headline["value"]
    return out


PEAK_UNITS = {"TFLOP/s": None, "TB/s": "copy"}
"""Headline units a datasheet peak bounds: TFLOP/s by the case's dtype (params.dtype, or the peak
the headline was quoted against), TB/s by the memory bandwidth."""


def peak_for(unit: object, params: dict | None, gpu_short: str) -> tuple[str | None, float | None]:
    """(peak key, datasheet peak) bounding a headline in `unit` on this GPU: TFLOP/s by the case's
    dtype, TB/s by the memory bandwidth; (None, None) for other units or a GPU without a datasheet here."""
    if unit not in PEAK_UNITS:
        return None, None
    key = PEAK_UNITS[unit] or (params or {}).get("dtype")
    return (key, datasheet(gpu_short, key)) if isinstance(key, str) else (None, None)


def impossible(headline: dict, params: dict, gpu_short: str) -> str | None:
    """Why a headline cannot be true on this GPU (above the datasheet peak for its dtype), or None.
    A number above the peak is a timing or accounting bug (a graph that captured no work, FLOPs
    counted twice), never a result."""
    if not isinstance(headline, dict) or not isinstance(headline.get("value"), (int, float)):
        return None
    fraction = headline.get("fraction_of_peak")
    if isinstance(fraction, (int, float)) and fraction > 1.0:
        return (f"headline {headline['value']:g} {headline.get('unit', '')} is {fraction:.2f}x the datasheet peak "
                f"of the {gpu_short}: a timing or FLOP-count bug, not a result")
    unit = headline.get("unit")
    key, peak = peak_for(unit, params, gpu_short)
    if peak and headline["value"] > peak:
        return (f"headline {headline['value']:g} {unit} exceeds the {gpu_short}'s datasheet peak for {key} "
                f"({peak:g} {unit}): a timing or FLOP-count bug, not a result")
    return None

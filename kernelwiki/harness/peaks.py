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

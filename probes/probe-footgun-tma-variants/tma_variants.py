"""probe-footgun-tma-variants: what a wrong transaction count and an explicit elect_one do.

Each variant runs in its own child process (a hung kernel can only be stopped by ending its
process), with a timeout. Outcomes: correct (exact copy), wrong (completed, copy differs or is
incomplete), hang (killed at the timeout), crash (the child died with an error).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

CHILD_TIMEOUT_S = 60
CHILD = r"""
import json, sys
import cuda.bindings.driver as cuda
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack
from artifacts.kernels.tma_copy import tma_copy

variant = sys.argv[1]
knobs = {"as-written": {}, "extra-tx-bytes": {"extra_tx_bytes": 128 * 64 * 4}, "elect-one-load": {"elect_one_load": True}}
op = tma_copy.TmaCopy(tma_copy.DTYPES["float32"], (128, 64), 4, max_ctas=132, **knobs[variant])
src = torch.randn(2048, 2048, device="cuda")
dst = torch.full_like(src, float("nan"))
args = (from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16),
        cuda.CUstream(torch.cuda.current_stream().cuda_stream))
compiled = cute.compile(op, *args)
print("launching", flush=True)
compiled(*args)
torch.cuda.synchronize()
print(json.dumps({"outcome": "correct" if torch.equal(src, dst) else "wrong"}), flush=True)
"""


def observe(variant: str) -> dict:
    start = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-c", CHILD, variant], cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        launched = "launching" in (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) \
            else "launching" in (err.stdout or "")
        return {"outcome": "hang" if launched else "hang-before-launch", "seconds": round(time.monotonic() - start, 1)}
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"outcome": "crash", "seconds": round(time.monotonic() - start, 1),
                "error": result.stderr.strip().splitlines()[-1][:300] if result.stderr.strip() else ""}
    return {**json.loads(lines[-1]), "seconds": round(time.monotonic() - start, 1)}


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    seen = observe(params["variant"])
    expected = params["expect"]
    matches = seen["outcome"] != "correct" if expected == "not-correct" else seen["outcome"] == expected
    return {"correctness": {"passed": matches, "expected": expected, "observed": seen["outcome"]},
            "metrics": {"outcome": seen["outcome"], "seconds": seen["seconds"]},
            "headline": {"metric": "completed-correctly", "value": 1.0 if seen["outcome"] == "correct" else 0.0,
                         "unit": "bool"}}


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case)

"""A second configuration choice for our Hopper GEMM: NVIDIA's analytic matmul heuristics
(`nvidia-matmul-heuristics`, module nvMatmulHeuristics), asked for its best CUTLASS 3 configuration
of a bf16/fp16 problem on an H200 and mapped onto the configurations our kernel implements.

It exists to be measured against `hopper_gemm.choose_config` on shapes neither was fitted to (the
held-out set of probe-hopper-gemm); whichever wins there is the one to keep. Mapping: tile_m 64 when
the heuristic's CTA tile has at most 64 rows, else 128; tile_n the nearest width we have (64, 128,
192, 256); its split-K (at most MAX_SPLIT_K) with a 1x1 cluster, else its cluster where we have one
(2x1 needs two row tiles; 1x2 two column tiles), else 1x1.

The library (0.1.0.27) crashes the interpreter at exit (SIGSEGV in its destructors, seen on this
project's CPU machine), so `configs` asks it in a child process — this module run as
`python -m artifacts.kernels.hopper_gemm.nvmmh`, shapes on stdin, JSON on stdout — and keeps the
answer when the child printed all of it, whatever its exit status.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

from .config import CLUSTERS, MAX_SPLIT_K, TILE_NS, GemmConfig

PRECISION = {"bf16": "TST", "fp16": "HSH"}   # the heuristic's letters: T = bf16, H = fp16, S = fp32 accumulate
TIMEOUT_S = 120


def mapped(m: int, n: int, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int, split_k: int) -> GemmConfig:
    """The heuristic's CUTLASS 3 configuration as the nearest one our kernel implements."""
    ours_m = 64 if tile_m <= 64 else 128
    ours_n = min(TILE_NS, key=lambda width: (abs(width - tile_n), -width))
    split = max(1, min(MAX_SPLIT_K, int(split_k)))
    cluster = (1, 1)
    if split == 1:
        if cluster_m >= 2 and math.ceil(m / ours_m) >= 2:
            cluster = (2, 1)
        elif cluster_n >= 2 and math.ceil(n / ours_n) >= 2:
            cluster = (1, 2)
    assert cluster in CLUSTERS
    return GemmConfig(ours_m, ours_n, cluster, split)


def configs(shapes: list[tuple[int, int, int]], dtype: str = "bf16") -> list[GemmConfig | None] | None:
    """The mapped choice for each (m, n, k), None for a shape it has no answer for; None altogether when
    the package is not installed or the child gave no complete answer."""
    if dtype not in PRECISION:
        raise ValueError(f"dtype={dtype!r}: the heuristic is asked for {', '.join(PRECISION)} only")
    request = json.dumps({"dtype": dtype, "shapes": [list(s) for s in shapes]})
    try:
        child = subprocess.run([sys.executable, "-m", __name__], input=request, capture_output=True, text=True,
                               timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    if not answer or not answer.get("complete") or len(answer.get("configs", [])) != len(shapes):
        return None
    return [None if c is None else mapped(s[0], s[1], *c) for s, c in zip(shapes, answer["configs"])]


def _serve() -> None:
    """Child side: answer one request from stdin; print one JSON line."""
    request = json.loads(sys.stdin.read())
    try:
        from nvMatmulHeuristics import (NvMatmulHeuristicsInterface, NvMatmulHeuristicsMatmulLayout,
                                        NvMatmulHeuristicsNvidiaGpu, NvMatmulHeuristicsTarget)
    except ImportError:
        print(json.dumps({"complete": False, "reason": "nvidia-matmul-heuristics is not installed"}), flush=True)
        return
    layout = NvMatmulHeuristicsMatmulLayout.TN_ROW_MAJOR
    iface = NvMatmulHeuristicsInterface(backend=NvMatmulHeuristicsTarget.CUTLASS3,
                                        precision=PRECISION[request["dtype"]])
    hardware = iface.createHardwareDescriptor()
    iface.setHardwarePredefinedGpu(hardware, NvMatmulHeuristicsNvidiaGpu.H200_SXM)
    iface.loadInternalDiscoverySet(layout, hardware)
    out = []
    for m, n, k in request["shapes"]:
        found = iface.get_with_mnk(m=m, n=n, k=k, matmulLayout=layout, count=1, hardware_descriptor=hardware)
        kernel = found[0]["kernel"] if found else None
        out.append(None if kernel is None else [kernel.cta_tile_m, kernel.cta_tile_n, kernel.cluster_m,
                                                kernel.cluster_n, kernel.split_k])
    print(json.dumps({"complete": True, "configs": out}), flush=True)


if __name__ == "__main__":
    _serve()

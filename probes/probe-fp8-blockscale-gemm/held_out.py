"""The held-out set of probe-fp8-blockscale-gemm (issue 34): FP8 layer shapes from real models
(kernelwiki/harness/shapes.py: DeepSeek-V3, Llama-3, Qwen, Mixtral, Gemma; M from decode to prefill)
that the kernel's tiling choice was never fitted on, drawn at run time by the run's seed, each gated
and timed beside DeepGEMM 340d988. Pure Python, so the draw and the summaries are tested on the CPU.

Left out of the draw: the probe's own cases (DeepGEMM's shapes, on which TILE_COST was fitted) and
FITTED_ON, the sweep on which the stream-K costs were fitted (H200 request fp8-2, 2026-12-02).
"""

from __future__ import annotations

import math

from kernelwiki.harness import shapes

MAX_ELEMENTS = 8192 * 16384
"""At most this many elements in the largest operand of a drawn shape (128 MiB of e4m3; the FP32
reference dequantizes it to 512 MiB), so input sets and each shape's timing stay small."""
TIME_BUDGET_S = 40
"""No new shape starts after this many seconds of the case: the shapes left are recorded as not timed."""
MIN_SHAPES = 8
"""Fewer timed shapes than this and the case does not pass: a geomean of a handful says little."""
ITERS = 15
FITTED_ON = frozenset({
    (1, 4096, 7168), (4, 36864, 7168), (8, 7168, 18432), (16, 1536, 7168), (16, 18432, 7168), (24, 24576, 1536),
    (32, 3584, 18944), (32, 10240, 8192), (8, 576, 7168), (2, 32768, 512), (16, 57344, 8192), (48, 8192, 28672),
    (64, 7168, 2048), (96, 7168, 16384), (128, 4608, 3584), (128, 28672, 4096), (192, 7168, 18432),
    (256, 4096, 14336), (256, 1536, 7168), (384, 10240, 8192), (640, 7168, 2048), (1024, 8192, 8192)})
M_CLASSES = ((1, 32, "decode"), (33, 256, "mid"), (257, 1 << 30, "prefill"))
"""Rows by class for the per-class geomeans: decode (M <= 32), 33-256, above 256."""


def fp8_layers() -> tuple[shapes.Layer, ...]:
    """The layers both kernels take: K a multiple of 128 (one scale block per K tile) and N of 64
    (DeepGEMM 340d988's normal layout)."""
    return tuple(layer for layer in shapes.LAYERS if layer.k % 128 == 0 and layer.n % 64 == 0)


def tuning_set(cases: list[dict]) -> set[tuple[int, int, int]]:
    """(m, n, k) of the probe's normal-layout cases and of FITTED_ON: what the tiling choice was fitted on."""
    own = set()
    for params in (c.get("params", {}) for c in cases):
        if params.get("layout") == "normal" and "shape" in params:
            m, n, k = (int(x) for x in str(params["shape"]).split("x"))
            own.add((m, n, k))
    return own | set(FITTED_ON)


def draw(seed: int, count: int, cases: list[dict]) -> list[dict]:
    """The held-out shapes of a run: `count` shapes of fp8_layers() x shapes.M_VALUES drawn with
    `seed`, none of the tuning set, none larger than MAX_ELEMENTS."""
    return shapes.held_out(seed, count, exclude=tuning_set(cases), layers=fp8_layers(), max_elements=MAX_ELEMENTS)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict]) -> dict:
    """geomean_ratio and worst_ratio of ours / DeepGEMM over the rows that hold a ratio (None when
    none does), the number of shapes each covers, and the geomean of each M class that has rows."""
    ratios = [row["ratio"] for row in rows if isinstance(row.get("ratio"), (int, float)) and row["ratio"] > 0]
    out = {"geomean_ratio": round(geomean(ratios), 4) if ratios else None,
           "worst_ratio": round(min(ratios), 4) if ratios else None, "ratios": len(ratios)}
    for low, high, name in M_CLASSES:
        in_class = [row["ratio"] for row in rows if low <= row["m"] <= high and row.get("ratio")]
        if in_class:
            out[f"class_{name}_geomean_ratio"] = round(geomean(in_class), 4)
    return out


def compact(row: dict) -> str:
    """One shape of the record's per-shape list: m x n x k, model/layer, our tiling, ours / DeepGEMM."""
    ratio = f"{row['ratio']:.3f}" if row.get("ratio") else "no ratio"
    return f"{row['m']}x{row['n']}x{row['k']} {row['model']}/{row['layer']} {row['tiling']} {ratio}"


def label(tiling: dict) -> str:
    """A tiling in a few characters: 64x128 1x1 a16 sk132 (stages of 16 rows of A, stream-K over 132
    CTAs) or 256x128 1x2."""
    text = f"{tiling['tile_m']}x{tiling['tile_n']} {tiling['cluster_mn'][0]}x{tiling['cluster_mn'][1]}"
    if tiling.get("a_rows", tiling["tile_m"]) != tiling["tile_m"]:
        text += f" a{tiling['a_rows']}"
    return text + (f" sk{tiling['ctas']}" if tiling.get("streamk") else "")

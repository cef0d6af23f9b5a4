"""The held-out set of probe-hopper-gemm (issue 27): GEMM shapes from real model layers that the
configuration choice was never fitted to, drawn at run time by the run's seed, and what each chooser
(choose_config, NVIDIA's heuristics through nvmmh, tune=True's measured choice, the oracle of a forced
sweep) leaves against the strongest baseline. Pure Python, so the planning and the summaries are tested
on the CPU.

Time budget (one H200, bf16, 24 shapes of at most MAX_ELEMENTS elements per operand): per shape the
first pass is tune=True's own (hopper_gemm.time_sweep: choose_config's pick and the other
configurations of autotune.sweep, 8 in all, each as one CUDA graph of up to 40 launches cycled over
input sets that span three L2s); its fastest is the tuned choice. Then one ctx.bench times ours
(choose_config), nvmmh's configuration, the tuned one, cuBLAS, quack and the FINALISTS fastest of the
first pass, SWEEP_ITERS iterations each; every kernel the drawn shapes need is compiled first, in
parallel processes, into the disk cache (hopper_gemm.precompile_for).
The first H200 run, which benched the whole sweep of every shape, passed 330 s without finishing:
hence the first pass, and no shape starts after TIME_BUDGET_S.
"""

from __future__ import annotations

import math

from kernelwiki.harness import shapes

from artifacts.kernels.hopper_gemm.config import GemmConfig

SWEEP_ITERS = 10
FINALISTS = 3
"""Sweep configurations that reach the full protocol: the fastest FINALISTS of the first pass; ours,
nvmmh's pick, the tuned one, cuBLAS and quack always reach it."""
TIME_BUDGET_S = 70
"""No new shape starts after this many seconds of the case (the shapes left are recorded as not timed),
so the case ends inside the probe's timeout whatever a shape costs on a fresh machine."""
MIN_SHAPES = 8
"""Fewer timed shapes than this and the case does not pass: a geomean of a handful says little."""
MAX_ELEMENTS = 8192 * 16384
"""At most this many elements in the largest operand of a drawn shape (bf16: 256 MiB), so the input
sets and the sweep's outputs stay small and each shape's timing short."""


def tuning_set(cases: list[dict]) -> set[tuple[int, int, int]]:
    """(m, n, k) of the probe's llm-shapes cases: the shapes choose_config was fitted on."""
    return {(int(p["m"]), int(p["n"]), int(p["k"])) for p in (c.get("params", {}) for c in cases)
            if p.get("set") == "llm-shapes"}


def draw(seed: int, count: int, cases: list[dict]) -> list[dict]:
    """The held-out shapes of a run: `count` shapes of shapes.LAYERS x shapes.M_VALUES drawn with
    `seed`, none of the tuning set, none larger than MAX_ELEMENTS."""
    return shapes.held_out(seed, count, exclude=tuning_set(cases), max_elements=MAX_ELEMENTS)


def finalists(first_pass_ms: dict[str, float], count: int = FINALISTS) -> list[str]:
    """The `count` fastest names of the sweep's first pass (ms per launch), fastest first."""
    return sorted(first_pass_ms, key=first_pass_ms.__getitem__)[:count]


def label(config: GemmConfig) -> str:
    """A configuration in a few characters: 128x256 2x1 s1 (and " swap" for swap-AB)."""
    swap = " swap" if config.swap_ab else ""
    return f"{config.tile_m}x{config.tile_n} {config.cluster_mn[0]}x{config.cluster_mn[1]} s{config.split_k}{swap}"


M_CLASSES = ((1, 16), (17, 64), (65, 128), (129, 256), (257, 1024), (1025, None))
"""The M classes each chooser's geomean is also reported for (issue 34's done-when: each >= 0.95)."""


def class_name(low: int, high: int | None) -> str:
    return f"class_{low}_{high}" if high else f"class_above_{low - 1}"


def class_summary(rows: list[dict], choosers: tuple[str, ...]) -> dict:
    """{chooser_class_LOW_HIGH_geomean_ratio: geomean of the chooser's ratios over the rows with M in
    the class (None for a class without a row), ..., class_LOW_HIGH_shapes: how many}."""
    out = {}
    for low, high in M_CLASSES:
        name = class_name(low, high)
        members = [row for row in rows if low <= row["m"] and (high is None or row["m"] <= high)]
        out[f"{name}_shapes"] = len(members)
        for chooser in choosers:
            ratios = [row.get(chooser) for row in members]
            usable = bool(ratios) and all(isinstance(r, (int, float)) and r > 0 for r in ratios)
            out[f"{chooser}_{name}_geomean_ratio"] = round(geomean(ratios), 4) if usable else None
    return out


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list[dict], choosers: tuple[str, ...]) -> dict:
    """{chooser_geomean_ratio, chooser_worst_ratio} over the shapes for each chooser whose ratio
    (its TFLOP/s / the shape's strongest baseline) every row holds; None where a row lacks it."""
    out = {}
    for chooser in choosers:
        ratios = [row.get(chooser) for row in rows]
        complete = bool(ratios) and all(isinstance(r, (int, float)) and r > 0 for r in ratios)
        out[f"{chooser}_geomean_ratio"] = round(geomean(ratios), 4) if complete else None
        out[f"{chooser}_worst_ratio"] = round(min(ratios), 4) if complete else None
    return out


def compact(row: dict) -> str:
    """One shape of the record's per-shape list: m x n x k, model/layer, our config, our ratio (and
    the oracle's config and ratio)."""
    text = f"{row['m']}x{row['n']}x{row['k']} {row['model']}/{row['layer']} {row['config']} {row['choose_config']:.3f}"
    if row.get("tuned"):
        text += f" (tuned {row['tuned_config']} {row['tuned']:.3f})"
    if row.get("oracle"):
        text += f" (oracle {row['oracle_config']} {row['oracle']:.3f})"
    return text

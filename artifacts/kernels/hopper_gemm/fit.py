"""Fit choose_config's cost model to the sweep, and check it on model families it was not fitted to.

What it does
    Reads sweep.py's JSON lines (every candidate of config.candidates timed on each shape of the plan,
    and cuBLAS), fits the terms of config.predicted_us (log-space Levenberg-Marquardt on the log of
    each configuration's time relative to its shape's fastest, the configurations near the fastest
    weighted most: the chooser only has to rank them), and validates by leaving out one model family
    at a time: fitted on the others, how much slower than the shape's fastest configuration is the one
    it picks, and how fast against cuBLAS. Writes the terms (config.COST_MODEL_FILE's format, with the
    validation summary) and the compact table of the sweep (the fastest TABLE_TOP configurations of
    each shape and cuBLAS, a few tens of KB: what a refit needs to start from).
Run (any machine, numpy):
    python -m artifacts.kernels.hopper_gemm.fit --points points.jsonl --plan plan.json \\
        --table artifacts/kernels/hopper_gemm/sweep_h200.csv --model artifacts/kernels/hopper_gemm/cost_model_h200.json
    python -m artifacts.kernels.hopper_gemm.fit --table artifacts/kernels/hopper_gemm/sweep_h200.csv   (refit from the table)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .config import COST, COST_TERMS, K_TILE_BYTES, SOFT_MAX, WGMMA_M, GemmConfig, candidates, predicted_us

TABLE_TOP = 8
SMS = 132
NEAR = 0.15   # a configuration this much (log) slower than its shape's fastest weighs e^-1 of the fastest


def config_text(c: GemmConfig) -> str:
    """128x80.1x2.s2.w: tile, cluster, split, and w for swap-AB."""
    return f"{c.tile_m}x{c.tile_n}.{c.cluster_mn[0]}x{c.cluster_mn[1]}.s{c.split_k}" + (".w" if c.swap_ab else "")


def parse_config(text: str) -> GemmConfig:
    parts = text.split(".")
    tile_m, tile_n = (int(v) for v in parts[0].split("x"))
    cm, cn = (int(v) for v in parts[1].split("x"))
    return GemmConfig(tile_m, tile_n, (cm, cn), int(parts[2][1:]), swap_ab=len(parts) > 3 and parts[3] == "w")


def read_points(points_path: Path, plan_path: Path) -> list[dict]:
    """[{m, n, k, family, cublas_us, times: {GemmConfig: us}}] of every shape with cuBLAS and at least
    two configurations timed without an error."""
    families = json.loads(plan_path.read_text())["families"]
    shapes: dict[tuple, dict] = {}
    for line in points_path.read_text().splitlines():
        record = json.loads(line)
        if "us" not in record or "error" in record:
            continue
        m, n, k, tile_m, tile_n, cm, cn, split, swap = record["point"]
        shape = shapes.setdefault((m, n, k), {"m": m, "n": n, "k": k, "family": families.get(f"{m},{n},{k}", "?"),
                                              "cublas_us": None, "times": {}})
        if tile_m == 0:
            shape["cublas_us"] = record["us"]
        else:
            shape["times"][GemmConfig(tile_m, tile_n, (cm, cn), split, swap_ab=bool(swap))] = record["us"]
    return [s for s in shapes.values() if s["cublas_us"] and len(s["times"]) >= 2]


def write_table(shapes: list[dict], path: Path, top: int = TABLE_TOP) -> None:
    """One line per shape: m,n,k,family,cuBLAS us,then the `top` fastest configurations as config:us."""
    lines = ["m,n,k,family,cublas_us,fastest_configs_us"]
    for s in sorted(shapes, key=lambda s: (s["family"], s["m"], s["n"], s["k"])):
        best = sorted(s["times"].items(), key=lambda item: item[1])[:top]
        lines.append(f"{s['m']},{s['n']},{s['k']},{s['family']},{s['cublas_us']:.4g},"
                     + " ".join(f"{config_text(c)}:{us:.4g}" for c, us in best))
    path.write_text("\n".join(lines) + "\n")


def read_table(path: Path) -> list[dict]:
    shapes = []
    for line in path.read_text().splitlines()[1:]:
        m, n, k, family, cublas, configs = line.split(",", 5)
        times = {parse_config(c): float(us) for c, us in (item.rsplit(":", 1) for item in configs.split())}
        shapes.append({"m": int(m), "n": int(n), "k": int(k), "family": family, "cublas_us": float(cublas),
                       "times": times})
    return shapes


def _features(shapes: list[dict]):
    """numpy columns of every (shape, configuration) point, as predicted_us reads them."""
    import numpy as np

    rows, index = [], []
    for i, s in enumerate(shapes):
        m, n, k = s["m"], s["n"], s["k"]
        for c, us in s["times"].items():
            km, kn = (n, m) if c.swap_ab else (m, n)
            cm, cn = c.cluster_mn
            steps = math.ceil(math.ceil(k * 2 / K_TILE_BYTES) / c.split_k)
            tiles_m, tiles_n = -(-math.ceil(km / c.tile_m) // cm) * cm, -(-math.ceil(kn / c.tile_n) // cn) * cn
            waves = math.ceil(tiles_m * tiles_n * c.split_k // (cm * cn) / (SMS // (cm * cn)))
            rows.append((waves, steps, c.tile_m, c.tile_n, cm, cn, c.split_k, float(c.swap_ab),
                         float(c.tile_m == 3 * WGMMA_M), km * k * 2 / 2 ** 20, kn * k * 2 / 2 ** 20, m * n * 2 / 2 ** 20,
                         math.ceil(kn / c.tile_n) / cn - 1, math.ceil(km / c.tile_m) / cm - 1, us))
            index.append(i)
    return np.array(rows, dtype=float), np.array(index)


def _predict(theta, cols):
    """predicted_us over the feature columns for log-terms theta (COST_TERMS order)."""
    import numpy as np

    t = dict(zip(COST_TERMS, np.exp(theta)))
    waves, steps, tm, tn, cm, cn, split, swap, r192, a_mb, b_mb, d_mb, a_extra, b_extra = (cols[:, j] for j in range(14))
    moved = a_mb * (1 + a_extra * t["reread"]) + b_mb * (1 + b_extra * t["reread"]) + d_mb
    mma = t["mma_us"] * tm * (tn + t["narrow_n"]) / 4096
    mma = mma * np.where(r192 > 0, t["rows192"], 1.0) * np.where(swap > 0, t["swap"], 1.0)
    load = t["load_us"] * (tm / cn + tn / cm) * K_TILE_BYTES / 1024
    area = tm * tn / 4096
    tile = t["tile_us"] + steps * np.maximum(mma, load) + t["epilogue_us"] * area
    tile = tile + np.where(split > 1, t["reduce_us"] * area * split, 0.0)
    p = SOFT_MAX
    return t["launch_us"] + ((waves * tile) ** p + (t["hbm_us"] * moved) ** p) ** (1 / p)


def _residuals(theta, cols, index, best_log):
    import numpy as np

    log_pred = np.log(_predict(theta, cols))
    measured = np.log(cols[:, -1])
    relative = measured - best_log[index]
    weight = np.exp(-relative / NEAR) + 0.05
    # the predicted gap of each configuration to the shape's fastest, against the measured gap
    pred_best = np.full(best_log.shape, np.inf)
    np.minimum.at(pred_best, index, np.where(relative == 0, log_pred, np.inf))
    return np.concatenate([np.sqrt(weight) * ((log_pred - pred_best[index]) - relative),
                           0.3 * (pred_best - best_log)])   # and the absolute scale, weakly


def fit(shapes: list[dict], start: dict[str, float] | None = None, iterations: int = 60) -> dict[str, float]:
    """The terms minimizing _residuals over `shapes` (Levenberg-Marquardt, numeric Jacobian, log terms)."""
    import numpy as np

    cols, index = _features(shapes)
    best_log = np.array([math.log(min(s["times"].values())) for s in shapes])
    theta = np.log(np.array([(start or COST)[name] for name in COST_TERMS]))
    damping = 1e-2
    r = _residuals(theta, cols, index, best_log)
    for _ in range(iterations):
        jac = np.empty((r.size, theta.size))
        for j in range(theta.size):
            step = np.zeros_like(theta)
            step[j] = 1e-4
            jac[:, j] = (_residuals(theta + step, cols, index, best_log) - r) / 1e-4
        g, h = jac.T @ r, jac.T @ jac
        improved = False
        for _ in range(8):
            trial = theta - np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-9), g)
            rt = _residuals(trial, cols, index, best_log)
            if rt @ rt < r @ r:
                theta, r, damping, improved = trial, rt, damping / 3, True
                break
            damping *= 4
        if not improved:
            break
    return {name: float(v) for name, v in zip(COST_TERMS, np.exp(theta))}


def pick(shape: dict, terms: dict[str, float]) -> GemmConfig:
    """The cost model's choice for a shape among its candidates, restricted to those the sweep timed."""
    found = [c for c in candidates(shape["m"], shape["n"], shape["k"], allow_swap=True) if c in shape["times"]]
    return min(found or shape["times"], key=lambda c: predicted_us(c, shape["m"], shape["n"], shape["k"], cost=terms))


def score(shapes: list[dict], terms: dict[str, float]) -> dict:
    """Geomeans over `shapes` of the pick's time over the fastest timed configuration (1.0: the oracle)
    and of cuBLAS's time over the pick's (above 1: faster than cuBLAS), and the worst of each."""
    regrets, ratios = [], []
    for s in shapes:
        us = s["times"][pick(s, terms)]
        regrets.append(us / min(s["times"].values()))
        ratios.append(s["cublas_us"] / us)

    def geo(values):
        return math.exp(sum(map(math.log, values)) / len(values))
    return {"shapes": len(shapes), "pick_over_oracle": round(geo(regrets), 4), "worst_pick_over_oracle":
            round(max(regrets), 4), "cublas_over_pick": round(geo(ratios), 4), "worst_cublas_over_pick":
            round(min(ratios), 4)}


def validate(shapes: list[dict], terms: dict[str, float]) -> dict:
    """Leave one family out: fitted on the others (from `terms`), scored on it; and all families pooled."""
    held = []
    per_family = {}
    for family in sorted({s["family"] for s in shapes}):
        train = [s for s in shapes if s["family"] != family]
        test = [s for s in shapes if s["family"] == family]
        fitted = fit(train, terms, iterations=15)
        per_family[family] = score(test, fitted)
        held += [(s, fitted) for s in test]
    regrets = [s["times"][pick(s, t)] / min(s["times"].values()) for s, t in held]
    ratios = [s["cublas_us"] / s["times"][pick(s, t)] for s, t in held]
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v))   # noqa: E731
    return {"families": len(per_family), "held_out_pick_over_oracle": round(geo(regrets), 4),
            "held_out_cublas_over_pick": round(geo(ratios), 4), "worst_held_out_cublas_over_pick": round(min(ratios), 4),
            "per_family": per_family}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=Path, help="sweep.py's JSON lines")
    parser.add_argument("--plan", type=Path, help="the plan they were timed from (its families)")
    parser.add_argument("--table", type=Path, required=True, help="the compact table: written from --points, else read")
    parser.add_argument("--model", type=Path, help="write the fitted terms and the validation here")
    args = parser.parse_args()
    if args.points:
        shapes = read_points(args.points, args.plan)
        write_table(shapes, args.table)
    else:
        shapes = read_table(args.table)
    terms = fit(shapes)
    summary = {"fitted": score(shapes, terms), "validation": validate(shapes, terms)}
    print(json.dumps(summary["fitted"]), json.dumps({k: v for k, v in summary["validation"].items() if k != "per_family"}))
    if args.model:
        args.model.write_text(json.dumps({"source": f"fit.py on {args.points or args.table}: {len(shapes)} shapes",
                                          "terms": {k: round(v, 6) for k, v in terms.items()}, **summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()

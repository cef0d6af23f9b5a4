"""probe-rowwise-membound: our CuTe DSL RMSNorm, residual add + RMSNorm, LayerNorm and softmax forward
against quack 0.6.5, torch eager and torch.compile on the H200, bf16, fp16 and fp32.

Bandwidth cases (`set: 512 MiB`): each input 512 MiB, N = 256 ... 262144. Decode cases (`set: decode`):
M = 1 ... 8 rows, timed as many launches in one CUDA graph over rotated input sets (the harness's short
method). Each case: fresh normal inputs, our outputs poisoned and gated against a reference in fp32
(16-bit inputs) or fp64 (fp32 inputs) with tolerances derived from torch eager's own error at that
dtype (gates.reference_tolerance); every baseline gated the same way (the headline is against the
fastest correct one); then every candidate timed under the harness protocol (ctx.bench).
Bandwidth = bytes each launch must move (rowwise_ops.moved_bytes) / time, as a fraction of the SM
copy ceiling of probe-calibration. One more case checks softmax on special values (the largest
finite values, rows of -inf, +inf, NaN and mixed) against torch.softmax, NaN for NaN.

Before the first case, every kernel the selected cases need is compiled in parallel processes
(rowwise_ops.precompile: ours and quack export object files, torch.compile fills the inductor
caches); the cases then run serially in this process, which only loads them.

Run through the runner: kernelwiki probe run --probe probe-calibration --probe probe-rowwise-membound
Compile only (no GPU): kernelwiki probe run --probe probe-rowwise-membound --compile-only --no-record
"""

from __future__ import annotations

import argparse
import math
import sys

import rowwise_ops as ops

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

BANDWIDTH_ITERS = 15
DECODE_ITERS = 15
SPECIAL_N = 4096
COMPILE_CASES = [(op, "bf16", n) for op in ops.OPS for n in (1024, 2928, 16384, 131072, 262144)] \
    + [(op, "fp32", n) for op in ops.OPS for n in (4096, 262144)]
"""What compile-only mode builds: several rows per CTA, column predicates, one CTA per row, clusters of
8 and 16, and fp32."""

CONTROLS = {
    ("rmsnorm", "bf16"): {"broken": "tile_mean", "n": 2928},
    ("rmsnorm", "fp16"): {"broken": "tile_mean", "n": 16288},
    ("rmsnorm", "fp32"): {"broken": "eps_dropped", "n": 4096, "scale": 0.6},
    ("add_rmsnorm", "bf16"): {"broken": "tile_mean", "n": 2800},
    ("add_rmsnorm", "fp16"): {"broken": "tile_mean", "n": 16192},
    ("add_rmsnorm", "fp32"): {"broken": "eps_dropped", "n": 4096, "scale": 0.42},
    ("layernorm", "bf16"): {"broken": "tile_mean", "n": 2928},
    ("layernorm", "fp16"): {"broken": "tile_mean", "n": 16288},
    ("layernorm", "fp32"): {"broken": "eps_dropped", "n": 4096, "scale": 1.75, "eps": 1e-5},
    ("softmax", "bf16"): {"broken": "zero_padding", "n": 2928},
    ("softmax", "fp16"): {"broken": "zero_padding", "n": 16288},
    ("softmax", "fp32"): {"broken": "zero_padding", "n": 4092, "offset": 6.0},
}
"""Each op and dtype's negative control: the broken variant (norm.NormForward / softmax.SoftmaxForward),
its row length (2928, 2800, 16288, 16192 and 4092 are not multiples of their tiles: 3072, 16384 and
4096) and its inputs (x = offset + scale * randn), sized so that the bug moves the output by a few
times torch's own error at that dtype (measured on the H200 in the development run): tile_mean by
about 2.4 % at 2928, 4.7 % at 2800 (the residual add's gate is wider: torch rounds x + r first),
0.3 % at 16288 and 0.6 % at 16192; zero_padding by pad / sum(exp(x)) - 3 % at 2928, 0.4 % at 16288,
2e-6 at 4092 with logits offset by 6; eps_dropped by eps / (2 mean(x^2)), 1e-6 to 2e-6 at these scales."""
CONTROL_ROWS = 4096
SPECIAL_ROWS = ("all largest", "all -largest", "largest among normal", "largest and -largest", "all -inf", "all +inf",
                "-inf among normal", "+inf among normal", "nan among normal", "mixed", "normal")


def case_shape(params: dict) -> tuple[str, str, int, int]:
    op, dtype, n = params["op"], params["dtype"], int(params["n"])
    m = int(params.get("m") or ops.rows_for(op, dtype, n))
    return op, dtype, m, n


def expected(s) -> tuple[tuple, list]:
    """The reference outputs of a set and how each is gated: the normalized output with tolerances
    derived from torch eager's error on it; the residual add's new residual bit for bit against
    torch's own x + r (both add in fp32 and round to nearest even once)."""
    refs, library = ops.reference(s), ops.library(s)
    tolerances = [gates.reference_tolerance(library[0], refs[0])]
    if len(refs) > 1:
        refs, tolerances = (refs[0], library[1]), tolerances + ["exact"]
    return refs, tolerances


def gate(s, fn, refs: tuple, tolerances: list, outputs: int | None = None) -> dict:
    """Run `fn` once into poisoned outputs (ours) or its own (baselines) and check its first
    `outputs` outputs (all by default) against the references (`expected`)."""
    import torch

    for out in (s.out, s.rout):
        if out is not None:
            gates.poison(out)
    outs = fn(s)
    torch.cuda.synchronize()
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[s.x.dtype]
    parts = {}
    for name, out, ref, tol in list(zip(("out", "residual_out"), outs, refs, tolerances))[:outputs]:
        if tol == "exact":
            parts[name] = {**gates.bit_exact(out, ref, "torch x + r"), "all_written": not bool(torch.isnan(out).any())}
            parts[name]["passed"] = parts[name]["passed"] and parts[name]["all_written"]
        else:
            parts[name] = gates.check(out, ref, dtype, **tol)
    return parts["out"] if len(parts) == 1 else gates.combine(parts)


PRECOMPILED: dict = {}
"""precompile's summary in this process (jobs, failures, seconds), for the record's protocol."""


def run_case(case: dict, ctx: Context) -> dict:
    if PRECOMPILED:
        ctx.protocol.setdefault("precompile", dict(PRECOMPILED,
                                                   how="every kernel compiled first in parallel processes "
                                                       "(ours and quack: object files; torch.compile: the "
                                                       "inductor caches, autotuned there), then loaded here"))
    if case["params"].get("set") == "special values":
        return special_values_case()
    import torch

    op, dtype, m, n = case_shape(case["params"])
    decode = case["params"].get("set") == "decode"
    with torch.no_grad():
        first = ops.make_set(op, dtype, m, n, ctx.generator(1))
        refs, tolerances = expected(first)
        correctness = gate(first, ops.ours_fn(op), refs, tolerances)
        correct, notes, timed = {}, {}, {}
        for name, fn in ops.candidates(op).items():
            if name == "ours":
                timed[name] = fn
                continue
            try:
                correct[name] = bool(gate(first, fn, refs, tolerances)["passed"])
                timed[name] = fn
            except Exception as err:   # noqa: BLE001  (a baseline that fails is recorded with its reason)
                correct[name] = False
                notes[name] = {"reason": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]}
        del refs
        torch.cuda.empty_cache()
        generator = ctx.generator(2)
        timing = ctx.bench({name: (lambda s, fn=fn: fn(s)) for name, fn in timed.items()},
                           lambda i: first if i == 0 else ops.make_set(op, dtype, m, n, generator),
                           ops.set_bytes(first), iters=DECODE_ITERS if decode else BANDWIDTH_ITERS)
        del first
        torch.cuda.empty_cache()
    total = ops.moved_bytes(op, m, n, ops.element_bytes(dtype))
    metrics = {"bytes_moved": total, "plan": ops.plan_text(op, dtype, m, n)}
    if decode:
        micros = {name: t["median_ms"] * 1e3 for name, t in timing.items()}
        values = {name: micros.get(name) for name in correct}
        headline = ctx.headline_against("time-per-launch", micros["ours"], "us", values, correct=correct,
                                        higher_is_better=False, notes=notes)
    else:
        tbps = {name: total / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
        values = {name: tbps.get(name) for name in correct}
        ceiling = ctx.ceilings.get("copy")
        fastest = max((v for name, v in values.items() if v and correct[name]), default=None)
        if ceiling and fastest:
            metrics["best_baseline_fraction_of_ceiling"] = round(fastest / float(ceiling), 4)
        headline = ctx.headline_against("bandwidth", tbps["ours"], "TB/s", values, correct=correct,
                                        peak_key="copy", ceiling_key="copy", notes=notes)
    return {"correctness": correctness, "timing": timing, "metrics": metrics, **headline}


# --- softmax on special values --------------------------------------------------------------------------

def special_rows(dtype: str, n: int):
    """Rows of special values, each with its name: the dtype's largest finite value everywhere, or in
    one place among normal values, its negative, -inf, +inf and NaN rows and among normal values,
    and a mixed row. Built on the CPU in float32, so the expected values are computable there too."""
    import torch

    t = ops.torch_dtype(dtype)
    big = torch.finfo(t).max
    g = torch.Generator().manual_seed(7)
    normal = torch.randn(n, generator=g)
    rows = {
        "all largest": torch.full((n,), big), "all -largest": torch.full((n,), -big),
        "largest among normal": normal.clone().index_fill_(0, torch.tensor([n // 2]), big),
        "largest and -largest": torch.tensor([big, -big]).repeat(n // 2),
        "all -inf": torch.full((n,), -math.inf), "all +inf": torch.full((n,), math.inf),
        "-inf among normal": normal.clone().index_fill_(0, torch.tensor([0, 5, n - 1]), -math.inf),
        "+inf among normal": normal.clone().index_fill_(0, torch.tensor([3]), math.inf),
        "nan among normal": normal.clone().index_fill_(0, torch.tensor([n - 2]), math.nan),
        "mixed": normal.clone().index_fill_(0, torch.tensor([1]), big).index_fill_(0, torch.tensor([2]), -math.inf)
                       .index_fill_(0, torch.tensor([4]), -big),
        "normal": normal,
    }
    return list(SPECIAL_ROWS), torch.stack([rows[name] for name in SPECIAL_ROWS]).to(t)


def special_values_case() -> dict:
    """Our softmax against torch.softmax on special_rows for each dtype: NaN exactly where torch has
    NaN, and elsewhere within a few roundings of the dtype (4 ulp of 1, relative to the row's maximum)."""
    import torch

    from artifacts.kernels.rowwise import softmax

    parts = {}
    for dtype in ops.DTYPES:
        names, rows = special_rows(dtype, SPECIAL_N)
        x = rows.cuda()
        expected = torch.softmax(x, dim=-1)
        got = softmax.softmax_forward(x)
        torch.cuda.synchronize()
        nan_expected, nan_got = torch.isnan(expected), torch.isnan(got)
        finite = ~nan_expected
        error = (got.float() - expected.float()).abs()
        tol = 4 * torch.finfo(x.dtype).eps
        bad_rows = [names[i] for i in range(len(names))
                    if not torch.equal(nan_expected[i], nan_got[i])
                    or bool((error[i][finite[i]] > tol).any())]
        worst = float(error[finite].max()) if bool(finite.any()) else 0.0
        parts[dtype] = {"passed": not bad_rows, "rows": len(names), "wrong_rows": bad_rows,
                        "max_abs_err": worst, "max_abs_tolerance": tol,
                        "nan_rows_expected": int(nan_expected.all(dim=1).sum())}
    return {"correctness": gates.combine(parts), "metrics": {"rows_per_dtype": len(names), "n": SPECIAL_N}}


# --- negative controls ---------------------------------------------------------------------------------

def control(op: str, dtype: str):
    settings = CONTROLS[op, dtype]

    def run(ctx: Context) -> dict:
        import torch

        with torch.no_grad():
            s = ops.make_set(op, dtype, CONTROL_ROWS, settings["n"], ctx.generator(3),
                             scale=settings.get("scale", 1.0), offset=settings.get("offset", 0.0))
            # the broken variants touch the normalized output only (the residual is written before the
            # reduction): the control is judged on it, each of its tests at 1.5-10x (gates.control_reach)
            return gate(s, ops.ours_fn(op, broken=settings["broken"], eps=settings.get("eps")), *expected(s), outputs=1)
    return run


def negative_controls() -> dict:
    return {f"{op}-{dtype}": control(op, dtype) for op, dtype in CONTROLS}


# --- compile only and precompile ------------------------------------------------------------------------

def compile_kernels(arch: str) -> compile_mod.Emitted:
    """Every op at the row lengths that exercise each path (COMPILE_CASES), and each broken variant once."""
    import cutlass

    from artifacts.kernels.rowwise import norm, softmax

    types = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}

    def build(op: str, dtype: str, n: int, broken: str | None = None):
        if op == "softmax":
            return softmax.compile_for(arch, n, types[dtype], broken=broken)
        return norm.compile_for(arch, n, types[dtype], op=op, bias=op == "layernorm", broken=broken)

    built = [build(op, dtype, n) for op, dtype, n in COMPILE_CASES]
    built += [build(op, dtype, s["n"], s["broken"]) for (op, dtype), s in CONTROLS.items()]
    emitted = compile_mod.from_cute(built[0], arch)
    for one in built[1:]:
        emitted.extend(compile_mod.from_cute(one, arch))
    return emitted


def precompile_jobs(cases: list[dict]) -> list[tuple]:
    """The compile jobs (rowwise_ops.precompile_job) of the selected cases and the controls."""
    jobs = []
    for case in cases:
        params = case.get("params", {})
        if params.get("set") == "special values":
            jobs += [("ours", "softmax", dtype, SPECIAL_N, None, len(SPECIAL_ROWS)) for dtype in ops.DTYPES]
            continue
        op, dtype, m, n = case_shape(params)
        jobs += [("ours", op, dtype, n, None, m), ("quack", op, dtype, n), ("compile", op, dtype, m, n)]
    jobs += [("ours", op, dtype, s["n"], s["broken"], CONTROL_ROWS) for (op, dtype), s in CONTROLS.items()]
    # the longest first (torch.compile, then quack), so that no worker is left with a long tail
    return sorted(dict.fromkeys(jobs), key=lambda job: ("compile", "quack", "ours").index(job[0]))


def main() -> None:
    probe = Probe(__file__)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--mode", default="run")
    parser.add_argument("--case", action="append", default=[])
    known, _ = parser.parse_known_args(sys.argv[1:])
    if known.mode == "run":
        cases = [c for c in probe.spec["cases"] if not known.case or c["id"] in known.case]
        PRECOMPILED.update(ops.precompile(precompile_jobs(cases)))
        print(f"precompile: {PRECOMPILED}", flush=True)
    probe.main(run_case=run_case, negative_control=negative_controls(), compile=compile_kernels)


if __name__ == "__main__":
    main()

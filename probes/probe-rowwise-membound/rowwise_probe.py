"""probe-rowwise-membound: our CuTe DSL RMSNorm and softmax forward against quack 0.6.5, torch eager and
torch.compile on the H200, bf16 in and out.

Each case: fresh normal inputs (RMSNorm weight 1 + 0.1 x normal), our output poisoned and gated against
an FP32 reference with tolerances derived from torch eager's bf16 error (gates.reference_tolerance);
then every candidate timed under the harness protocol (ctx.bench: graph replay after an L2 sweep for
these long kernels). Bandwidth = (bytes of x + bytes of out + bytes of the weight) / time; the
headline is ours, as a fraction of the copy ceiling, with the ratio to the fastest baseline.

Run through the runner: kernelwiki probe run --probe probe-rowwise-membound
Compile only (no GPU): kernelwiki probe run --probe probe-rowwise-membound --compile-only --no-record
"""

from __future__ import annotations

from types import SimpleNamespace

from artifacts.kernels.rowwise import rmsnorm as rmsnorm_mod
from artifacts.kernels.rowwise import rowwise_common
from artifacts.kernels.rowwise import softmax as softmax_mod
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

EPS = 1e-6
RAGGED_N = 2928            # a multiple of 8 that is not a multiple of its row tile (3072): column predicates
COMPILE_NS = (1024, 4096, RAGGED_N, 131072)   # one CTA per row (warp / block reduction), predicates, cluster of 8
_compiled_baselines: dict = {}


def parse_shape(text: str) -> tuple[int, int]:
    m, n = (int(v) for v in text.split("x"))
    return m, n


def reference(op: str, x, w):
    """FP32 reference of one op (the math every candidate should produce before rounding to bf16)."""
    import torch

    xf = x.float()
    if op == "rmsnorm":
        return xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + EPS) * w.float()
    return torch.softmax(xf, dim=-1)


def moved_bytes(op: str, m: int, n: int, element: int = 2) -> int:
    """Bytes a candidate must move: x read once, out written once, and (RMSNorm) the weight read once."""
    return 2 * m * n * element + (n * element if op == "rmsnorm" else 0)


def eager(op: str):
    import torch
    import torch.nn.functional as F

    if op == "rmsnorm":
        return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)
    return lambda x, w: torch.softmax(x, dim=-1)


def baselines(op: str) -> dict:
    """{name: fn(x, w) -> out} of the libraries compared, built once per op (torch.compile keeps its
    own cache of compiled shapes; quack compiles per N on first use)."""
    if op in _compiled_baselines:
        return _compiled_baselines[op]
    import quack
    import torch

    quack_fn = (lambda x, w: quack.rmsnorm(x, w, eps=EPS)) if op == "rmsnorm" else (lambda x, w: quack.softmax(x))
    found = {"quack": quack_fn, "torch eager": eager(op), "torch.compile": torch.compile(eager(op))}
    _compiled_baselines[op] = found
    return found


def ours(op: str, broken: bool = False):
    if op == "rmsnorm":
        return lambda x, w, out: rmsnorm_mod.rmsnorm_forward(x, w, out, EPS, tile_mean=broken)
    return lambda x, w, out: softmax_mod.softmax_forward(x, out, zero_padding=broken)


def make_set(m: int, n: int, generator):
    import torch

    x = torch.randn(m, n, device="cuda", generator=generator, dtype=torch.float32).to(torch.bfloat16)
    w = (1.0 + 0.1 * torch.randn(n, device="cuda", generator=generator)).to(torch.bfloat16)
    return SimpleNamespace(x=x, w=w, out=torch.empty_like(x))


def gate(op: str, s, fn) -> dict:
    """Run `fn` once into a poisoned output and check it against the FP32 reference, with tolerances
    k x torch eager's own bf16 error on the same inputs."""
    import torch

    ref = reference(op, s.x, s.w)
    library = eager(op)(s.x, s.w)
    tolerances = gates.reference_tolerance(library, ref)
    del library
    gates.poison(s.out)
    fn(s.x, s.w, s.out)
    torch.cuda.synchronize()
    result = gates.check(s.out, ref, "bf16", **tolerances)
    del ref
    torch.cuda.empty_cache()
    return result


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    op = params["op"]
    m, n = parse_shape(params["shape"])
    with torch.no_grad():
        first = make_set(m, n, ctx.generator(1))
        correctness = gate(op, first, ours(op))
        launch = ours(op)
        candidates = {"ours": lambda s: launch(s.x, s.w, s.out)}
        for name, fn in baselines(op).items():
            candidates[name] = lambda s, fn=fn: fn(s.x, s.w)
        generator = ctx.generator(2)
        timing = ctx.bench(candidates, lambda i: first if i == 0 else make_set(m, n, generator),
                           set_bytes=3 * m * n * 2 + 2 * n)
        del first, candidates
        torch.cuda.empty_cache()   # the next case has other shapes: give the 2 GiB buffers back
    total = moved_bytes(op, m, n)
    tbps = {name: total / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    best = max((name for name in tbps if name != "ours"), key=lambda name: tbps[name])
    metrics = {"bytes_moved": total, "plan": repr(_plan(n)),
               **{f"tbps_{name.replace(' ', '_').replace('.', '_')}": round(v, 4) for name, v in tbps.items()}}
    if ctx.ceilings.get("copy"):
        metrics["best_baseline_fraction_of_ceiling"] = round(tbps[best] / float(ctx.ceilings["copy"]), 4)
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("bandwidth", tbps["ours"], "TB/s",
                                   {name: v for name, v in tbps.items() if name != "ours"},
                                   peak_key="copy", ceiling_key="copy")}


def _plan(n: int):
    import cutlass

    return rowwise_common.plan_row(n, cutlass.BFloat16.width)


def negative_control(ctx: Context) -> dict:
    """Both broken variants at the ragged row length must fail the derived gate; `passed` (the probe
    fails) when either gets through."""
    import torch

    with torch.no_grad():
        s = make_set(8192, RAGGED_N, ctx.generator(3))
        results = {op: gate(op, s, ours(op, broken=True)) for op in ("rmsnorm", "softmax")}
    return {"passed": any(r["passed"] for r in results.values()), **results}


def compile_kernels(arch: str) -> compile_mod.Emitted:
    """Both kernels at the row lengths that exercise each path: warp-only and block reductions, column
    predicates, and an 8-CTA cluster row."""
    emitted = None
    for module in (rmsnorm_mod, softmax_mod):
        for n in COMPILE_NS:
            one = compile_mod.from_cute(module.compile_for(arch, n), arch)
            if emitted is None:
                emitted = one
            else:
                emitted.extend(one)
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernels)

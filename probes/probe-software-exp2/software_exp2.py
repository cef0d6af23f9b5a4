"""probe-software-exp2: accuracy and throughput of our exp2 emulation on the H200.

Accuracy: exp2 of 2^24 points uniform in [-127, 0] by each path, against exact 2^x (float64);
error in ulps of the float32 result (denormal results excluded: ex2.approx.ftz flushes them).
Throughput: chains x <- -(2^x) - 0.5 (2048 steps, 8 chains per thread, 8 blocks of 256 threads
per SM), with 0..8 of every 8 chains on the software path; all splits timed together by ctx.bench.

Run through the runner: kernelwiki probe run --probe probe-software-exp2
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.software_exp2 import exp2  # our kernel; importable without a GPU

REPEATS, VEC, THREADS, BLOCKS_PER_SM = 2048, 8, 256, 8
SPLITS = (0, 2, 4, 6, 8)
_compiled: dict = {}


def compiled(op, x, y):
    """op compiled for tensors shaped like x, y; bind(it, x2, y2) launches it on any such pair."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    from kernelwiki.harness.timing import cute_stream

    return cute.compile(op, from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16), cute_stream())


def bind(op_compiled, x, y):
    """A launch of the compiled op on x -> y, on the stream current at each call (graph capture)."""
    from cutlass.cute.runtime import from_dlpack

    from kernelwiki.harness.timing import cute_stream

    args = (from_dlpack(x, assumed_align=16), from_dlpack(y, assumed_align=16))
    return lambda: op_compiled(*args, cute_stream())


def launcher(op, x, y):
    return bind(compiled(op, x, y), x, y)


def ulp_errors(y, x) -> dict:
    import torch

    exact = torch.exp2(x.double())
    normal = exact >= 2.0**-126  # ftz flushes denormal results
    ulp = torch.exp2(torch.floor(torch.log2(exact[normal])) - 23)
    err = ((y.double()[normal] - exact[normal]).abs() / ulp)
    rel = ((y.double()[normal] - exact[normal]).abs() / exact[normal])
    return {"max_ulp": float(err.max().item()), "mean_ulp": float(err.mean().item()),
            "max_rel_err": float(rel.max().item()), "points": int(normal.sum().item())}


def accuracy(case: dict, ctx: Context) -> dict:
    import torch

    x = -127.0 * torch.rand(1 << 24, device="cuda", generator=ctx.generator(1))
    y = gates.poison(torch.empty_like(x))
    software = case["id"] == "accuracy-software"
    launcher(exp2.Exp2Map(software), x, y)()
    torch.cuda.synchronize()
    errors = ulp_errors(y, x)
    # The software path feeds bf16 probabilities: its error must stay far below bf16's 2^-8.
    limit = 2.0**-12 if software else 2.0**-20
    exact = torch.exp2(x.double())
    correctness = gates.check_relative_elements(y, exact, limit, where=exact >= 2.0**-126)   # ftz: normal results
    return {"correctness": correctness, "metrics": errors,
            "headline": ctx.headline("max-ulp-error", errors["max_ulp"], "ulp")}


def chains_reference(x):
    import torch

    ref = x.double()
    for _ in range(REPEATS):
        ref = -torch.exp2(ref) - 0.5
    return ref


def throughput(case: dict, ctx: Context) -> dict:
    import torch

    from kernelwiki.harness.timing import bound

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = sms * BLOCKS_PER_SM * THREADS * VEC
    names = {s: f"split-{s}-of-8" for s in SPLITS}
    if "inputs" not in _compiled:
        def make_set(i: int) -> dict:
            x = -1.0 - 0.5 * torch.rand(n, device="cuda", generator=ctx.generator(2 + 1000 * i))
            outputs = {s: torch.empty_like(x) for s in SPLITS}
            if "ops" not in _compiled:
                _compiled["ops"] = {s: compiled(exp2.Exp2Throughput(s, VEC, REPEATS, THREADS), x, outputs[s])
                                    for s in SPLITS}
            return {"x": x, "outputs": outputs,
                    **{names[s]: bind(_compiled["ops"][s], x, outputs[s]) for s in SPLITS}}

        checked = make_set(0)
        _compiled.update(inputs=checked["x"], outputs=checked["outputs"], launches=checked,
                         reference=chains_reference(checked["x"]))
        _compiled["timing"] = ctx.bench(bound(list(names.values())), lambda i: checked if i == 0 else make_set(i),
                                        2 * n * 4, iters=20, warmup=3)
    s = case["params"]["software_of_8"]
    out = _compiled["outputs"][s]
    gates.poison(out)
    _compiled["launches"][names[s]]()
    torch.cuda.synchronize()
    correctness = chain_gate(out, _compiled["reference"])
    timing = _compiled["timing"]
    count = n * REPEATS
    def per_clk(name: str) -> float:
        t = timing[name]
        clock_hz = (t["sm_clock_mhz_after"] or 1980.0) * 1e6
        return count / (t["median_ms"] * 1e-3) / sms / clock_hz
    value = per_clk(names[s])
    baseline = None if s == 0 else ("all ex2.approx", per_clk(names[0]))
    return {"correctness": correctness, "timing": timing[names[s]],
            "metrics": {"exp2_per_launch": count,
                        "gexp2_per_s_per_sm": round(count / (timing[names[s]]["median_ms"] * 1e-3) / sms / 1e9, 3)},
            "headline": ctx.headline("exp2-per-clk-per-sm", value, "exp2/clk/SM", baseline=baseline)}


def run_case(case: dict, ctx: Context) -> dict:
    return accuracy(case, ctx) if case["id"].startswith("accuracy") else throughput(case, ctx)


def chain_gate(out, ref) -> dict:
    """The tf32 gate with its element test tightened to the relative tolerance at the largest
    reference value: the table's element tolerance (2e-2 x RMS) is ten times its relative one, so
    an error spread evenly over every element (a wrong coefficient) could fail the norm by 10x and
    still pass the element test; this way a control fails both by the same few times."""
    tol = gates.tolerance("tf32")
    return gates.check(out, ref, "tf32", tol=tol, max_abs_tol=tol * float(ref.abs().max()))


def negative_control(ctx: Context) -> dict:
    import torch

    n = 132 * THREADS * VEC
    x = -1.0 - 0.5 * torch.rand(n, device="cuda", generator=ctx.generator(3))
    y = gates.poison(torch.empty_like(x))
    launcher(exp2.Exp2Throughput(8, VEC, REPEATS, THREADS, broken=True), x, y)()
    torch.cuda.synchronize()
    return chain_gate(y, chains_reference(x))


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(exp2.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

"""probe-calibration: the ceilings other records quote.

copy-bandwidth     a device-to-device copy of a 4 GiB buffer, the faster of two ways: torch's copy_
                   (cudaMemcpyAsync: captured in a CUDA graph it becomes a memcpy node, seen on the H200
                   at about two thirds of the SM copy's rate) and an SM copy (x * 1 through torch's
                   vectorized elementwise kernel, exact for every float); bandwidth counts bytes read
                   plus bytes written; each checked bit for bit against the source.
cublas-bf16-8192   torch.matmul (cuBLAS) on bf16 8192^3 normal inputs; checked against an FP32 matmul
                   of the same inputs (TF32 off).

Both are timed by ctx.bench, the protocol every probe that quotes them uses (each is a long
kernel: a CUDA-graph replay after a read sweep of the L2), on the input set that was checked.

Run through the runner: kernelwiki probe run --probe probe-calibration
"""

from __future__ import annotations

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe


def copy_case(case: dict, ctx: Context) -> dict:
    import torch

    elements = case["params"]["bytes"] // 4

    def make_inputs(i: int) -> tuple:
        src = torch.randn(elements, device="cuda", generator=ctx.generator(1 + 100 * i))
        return src, gates.poison(torch.empty_like(src))

    copies = {"torch copy_": lambda s: s[1].copy_(s[0]), "SM copy (x * 1)": lambda s: torch.mul(s[0], 1.0, out=s[1])}
    checked = make_inputs(0)
    src, dst = checked
    checks = {}
    for name, copy in copies.items():
        gates.poison(dst)
        copy(checked)
        torch.cuda.synchronize()
        checks[name] = gates.check(dst, src, "exact")
    timing = ctx.bench(copies, lambda i: checked if i == 0 else make_inputs(i), 2 * elements * 4, iters=30, warmup=3)
    tbps = {name: 2 * elements * 4 / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    fastest = max(tbps, key=tbps.get)
    return {"correctness": gates.combine(checks), "timing": timing,
            "metrics": {"bytes_moved": 2 * elements * 4, "ceiling_from": fastest,
                        **{f"tbps_{name}": round(v, 4) for name, v in tbps.items()}},
            "baselines": [{"name": name, "value": round(v, 4)} for name, v in tbps.items() if name != fastest],
            "headline": ctx.headline("bandwidth", tbps[fastest], "TB/s", peak_key="copy")}


def gemm_case(case: dict, ctx: Context) -> dict:
    import torch

    m, n, k = (int(x) for x in case["params"]["shape"].split("x"))

    def make_inputs(i: int) -> tuple:
        gen = ctx.generator(2 + 100 * i)
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        b = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
        return a, b, gates.poison(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))

    checked = make_inputs(0)
    a, b, out = checked
    torch.matmul(a, b, out=out)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = torch.matmul(a.float(), b.float())
    correctness = gates.check(out, ref, "bf16")
    del ref
    timing = ctx.bench({"cuBLAS": lambda s: torch.matmul(s[0], s[1], out=s[2])},
                       lambda i: checked if i == 0 else make_inputs(i), 2 * (m * k + k * n + m * n),
                       iters=40, warmup=5)["cuBLAS"]
    tflops = 2 * m * n * k / (timing["median_ms"] * 1e-3) / 1e12
    return {"correctness": correctness, "timing": timing,
            "headline": ctx.headline("tflops", tflops, "TFLOP/s", peak_key="bf16")}


def run_case(case: dict, ctx: Context) -> dict:
    return {"copy-bandwidth": copy_case, "cublas-bf16-8192": gemm_case}[case["id"]](case, ctx)


def negative_control(ctx: Context) -> dict:
    """Both gates this probe uses must reject a wrong result: the exact gate a copy with one element
    changed, the bf16 gate a cuBLAS product that leaves out the last 16 of K (one wgmma K step:
    about 4x the relative and 5x the element tolerance, within the 1.5-10x a control must reach).
    `passed` - the control did not fail, and the probe fails - when either gate lets its case through."""
    import torch

    src = torch.randn(1 << 24, device="cuda", generator=ctx.generator(3))
    dst = gates.poison(torch.empty_like(src))
    dst.copy_(src)
    dst[12345] += 1.0  # the deliberate corruption
    exact = gates.check(dst, src, "exact")

    gen = ctx.generator(4)
    k, cut = 2048, 16
    a = torch.randn(2048, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(k, 2048, device="cuda", generator=gen).to(torch.bfloat16)
    out = gates.poison(torch.empty(2048, 2048, device="cuda", dtype=torch.bfloat16))
    torch.matmul(a[:, :k - cut], b[:k - cut], out=out)
    torch.backends.cuda.matmul.allow_tf32 = False
    bf16 = gates.check(out, torch.matmul(a.float(), b.float()), "bf16")
    return {"passed": exact["passed"] or bf16["passed"], "exact": exact, "bf16": bf16}


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)

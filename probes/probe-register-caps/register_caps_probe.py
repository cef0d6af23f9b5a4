"""probe-register-caps: one register-hungry kernel (artifacts/kernels/registers/pressure.cu, 64
accumulators and 64 coefficients live per thread) built at several register caps: what ptxas
reports (registers, stack frame, spill bytes), what the SASS holds (LDL/STL), what the runtime
says (registers, local bytes, resident warps per SM), and, on the GPU, its time against the
uncapped build in the same run. Compile-only mode also records what ptxas does with setmaxnreg in
three kernel shapes (artifacts/kernels/registers/setmaxnreg.cu) and which of __launch_bounds__ and
-maxrregcount wins.

Correctness first: every build's output (poisoned before the launch) against an fp64 reference of
the same recurrence, fp32 gate. Timing: ctx.bench, the capped build and the uncapped one as two
candidates on the same input sets.

Run through the runner: kernelwiki probe run --probe probe-register-caps [--compile-only]
"""

from __future__ import annotations

from functools import lru_cache

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.registers import registers

ITERS = 128
THREADS_PER_SM = 2048
PRESSURE_KERNEL = "_Z8pressurePKfS0_Pfiii"


def _flags(params: dict) -> list[str]:
    return registers.build_flags(int(params.get("cap", registers.UNCAPPED)), params.get("bounds"))


@lru_cache(maxsize=None)
def _kernel(flags: tuple[str, ...]) -> registers.PressureKernel:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context exists before the library's runtime starts
    return registers.PressureKernel(compile_mod.nvcc_library(registers.SOURCE, "sm_90a", list(flags)))


@lru_cache(maxsize=None)
def _build_report(flags: tuple[str, ...], arch: str = "sm_90a") -> dict:
    """ptxas's account and the SASS counts of one build."""
    usage, _ = compile_mod.ptxas_usage(registers.SOURCE, arch, list(flags))
    emitted = compile_mod.nvcc(registers.SOURCE, arch, list(flags))
    counts = registers.sass_counts(emitted.sass) if emitted.sass is not None else {}
    return {**usage.get(PRESSURE_KERNEL, {}), **{f"sass_{k}": v for k, v in counts.items()}}


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def _problem(ctx: Context, salt: int = 0):
    import torch

    n = torch.cuda.get_device_properties(0).multi_processor_count * THREADS_PER_SM
    generator = ctx.generator(salt)
    # uniform in (-0.9, 0.9): a product of 128 normal factors would overflow fp32
    x = (torch.rand(ITERS * n, device="cuda", generator=generator) * 1.8 - 0.9).float()
    coef = torch.randn(registers.ACC, device="cuda", generator=generator)
    return n, x, coef


def _output(kernel: registers.PressureKernel, n: int, x, coef, round_fp16: bool = False):
    import torch

    y = gates.poison(torch.empty(n, dtype=torch.float32, device="cuda"))
    kernel.launch(x, coef, y, n, ITERS, stream=_stream(), round_fp16=round_fp16)
    torch.cuda.synchronize()
    return y


def checked(kernel: registers.PressureKernel, ctx: Context, *, salt: int = 0) -> dict:
    """The build's output against the fp64 reference (fp32 gate) and bit for bit against the
    uncapped build's correct output on the same inputs."""
    n, x, coef = _problem(ctx, salt)
    y = _output(kernel, n, x, coef)
    uncapped = _output(_kernel(()), n, x, coef)
    return gates.combine({"bit-exact vs uncapped": gates.check(y, uncapped, "exact"),
                          "fp64 reference": gates.check(y, registers.reference(x, coef, ITERS, n), "fp32")})


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    flags = tuple(_flags(case["params"]))
    kernel, uncapped = _kernel(flags), _kernel(())
    correctness = checked(kernel, ctx)
    n, x, coef = _problem(ctx)
    set_bytes = (x.numel() + n + coef.numel()) * 4

    def make_inputs(i: int):
        if i == 0:
            return x, coef, torch.empty(n, dtype=torch.float32, device="cuda")
        _, xi, ci = _problem(ctx, salt=1000 + i)
        return xi, ci, torch.empty(n, dtype=torch.float32, device="cuda")

    def launcher(k: registers.PressureKernel):
        return lambda s: k.launch(s[0], s[1], s[2], n, ITERS, stream=_stream())

    candidates = {"this build": launcher(kernel)}
    if flags:
        candidates["uncapped"] = launcher(uncapped)
    timing = ctx.bench(candidates, make_inputs, set_bytes)
    metrics = {**_build_report(flags), **{f"runtime_{k}": v for k, v in kernel.attributes().items()},
               "nvcc_flags": " ".join(flags) or "(none)", "threads": n, "iters": ITERS}
    micros = timing["this build"]["median_ms"] * 1e3
    baseline = ("uncapped build", timing["uncapped"]["median_ms"] * 1e3) if flags else None
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("time", micros, "us", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """The uncapped build storing its sum through fp16 (an epilogue in the wrong precision) must fail
    the bit-exact comparison with the uncapped build's correct output: a register cap changes where
    values live, never the arithmetic, so every capped case is held to that exact gate too."""
    n, x, coef = _problem(ctx, 99)
    return gates.check(_output(_kernel(()), n, x, coef, round_fp16=True), _output(_kernel(()), n, x, coef), "exact")


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """The cap-32 build's PTX and SASS (spills: LDL/STL), and what ptxas did in each build as facts."""
    emitted = compile_mod.nvcc(registers.SOURCE, arch, registers.build_flags(32))
    for name, flags in {"cap-32": registers.build_flags(32), "uncapped": registers.build_flags(registers.UNCAPPED),
                        "bounds-1-with-maxrregcount-32": registers.build_flags(32, bounds=1)}.items():
        usage = compile_mod.ptxas_usage(registers.SOURCE, arch, flags)[0].get(PRESSURE_KERNEL, {})
        emitted.facts.append(f"{name}:{'spills' if usage.get('spill_store_bytes') else 'no-spills'}")
        emitted.facts.append(f"{name}:registers-{usage.get('registers')}")
    for cap in (96, registers.UNCAPPED):
        built = compile_mod.nvcc(registers.SOURCE, arch, registers.build_flags(cap))
        if built.sass is None:   # no disassembler: no fact (the expected one is then reported missing)
            continue
        name = "uncapped" if cap == registers.UNCAPPED else f"cap-{cap}"
        uniform = registers.sass_counts(built.sass)["ffma_uniform"]
        emitted.facts.append(f"{name}:ffma-{'reads' if uniform else 'no'}-uniform-registers")
    for shape, label in registers.SETMAXNREG_SHAPES.items():
        shape_flags = [f"-DSHAPE={shape}"]
        built = compile_mod.nvcc(registers.SETMAXNREG_SOURCE, arch, shape_flags)
        report = compile_mod.ptxas_usage(registers.SETMAXNREG_SOURCE, arch, shape_flags)[1]
        kept = "kept" if built.sass is not None and "USETMAXREG" in built.sass else "ignored"
        emitted.facts.append(f"setmaxnreg-{label}:{kept}{'+C7508' if 'C7508' in report else ''}")
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

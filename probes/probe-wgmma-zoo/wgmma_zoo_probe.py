"""probe-wgmma-zoo: wgmma configurations in isolation — correctness, FLOP per SM clock, latency.

Every case: (1) one K block of the configuration against a float64 reference of the same operands
(normal inputs, already representable in the input type, so only the accumulation can differ);
(2) throughput: one CTA per SM, two warpgroups each issuing 4096 K blocks, FLOP per SM clock from
clock64 and TFLOP/s from ctx.bench; (3) latency: one warpgroup issuing fence / wgmma / commit /
wait 0 back to back, cycles per instruction. The kernel's SASS must contain HGMMA (IGMMA for s8).

Run through the runner: kernelwiki probe run --probe probe-wgmma-zoo [--compile-only]
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates, peaks
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.wgmma_zoo import wgmma_zoo as zoo  # our kernels; rendering and building need no GPU

THROUGHPUT_ITERS = 4096
LATENCY_ITERS = 1024
# Exact operands, FP32 accumulation vs a float64 reference: only the tensor core's accumulation
# order and precision differ. The tf32 gate (2e-3 relative) sits far above that and far below a
# wrong layout or descriptor (errors of order 1).
GATE = {"bf16": "tf32", "fp16": "tf32", "tf32": "tf32", "s8": "exact"}
PEAK_KEY = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32"}
_measured: dict[str, float] = {}


@lru_cache(maxsize=1)
def _loaded() -> tuple[zoo.ZooModule, dict[str, str], list[str]]:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context is current before the driver loads the cubin
    built = zoo.build("sm_90a")
    sass = compile_mod.disassemble(built.cubin) or ""
    return zoo.ZooModule(built.cubin), zoo.sass_by_kernel(sass), zoo.serialization_warnings(built.ptxas_log)


def operands(config: zoo.ZooConfig, seed: int):
    """Normal operands in the input type: A (64, k_block); B (N, k_block), or (k_block, N) MN-major."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a_shape = (64, config.k_block)
    b_shape = (config.k_block, config.n) if config.b_mn_major else (config.n, config.k_block)
    a, b = (torch.randn(shape, generator=g, device="cuda") for shape in (a_shape, b_shape))
    if config.dtype == "bf16":
        return a.bfloat16(), b.bfloat16()
    if config.dtype == "fp16":
        return a.half(), b.half()
    if config.dtype == "tf32":  # clear the 13 low mantissa bits: exactly representable in tf32
        mask = torch.tensor(-8192, dtype=torch.int32, device="cuda")
        return ((x.view(torch.int32) & mask).view(torch.float32) for x in (a, b))
    return ((x * 32).round().clamp(-127, 127).to(torch.int8) for x in (a, b))


def _rows(tensor):
    """The operand as rows of 128 bytes, as the kernel copies them."""
    import torch

    return tensor.contiguous().view(torch.uint8).view(-1, 128)


def check(config: zoo.ZooConfig, a, b, *, kernel: zoo.ZooConfig | None = None, reference_operands=None) -> dict:
    """Run one K block of `kernel` (default: config) on a, b and compare with config's reference
    (of `reference_operands` = (a, b) if given: the operands the kernel should have seen)."""
    import torch

    module, _, _ = _loaded()
    acc = torch.int32 if config.integer else torch.float32
    d = gates.poison(torch.empty(64, config.n, dtype=acc, device="cuda"))
    cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    module.launch(kernel or config, _rows(a), _rows(b), d, cycles, iters=1, mode=zoo.MODE_CHECK, grid=1,
                  threads=128, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref = zoo.reference(config, *(reference_operands or (a, b)))
    if config.integer:
        return gates.check(d, ref.to(torch.int32), "exact")
    return gates.check(d, ref.float(), GATE[config.dtype])


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    config = zoo.CONFIGS[case["params"]["config"]]
    module, sass, serialized = _loaded()
    a, b = operands(config, ctx.seed)
    correctness = check(config, a, b)
    kernel_sass = sass.get(config.kernel_name, "")
    correctness["sass"] = {"expected": config.sass_mnemonic(), "found": config.sass_mnemonic() in kernel_sass}
    correctness["passed"] = correctness["passed"] and correctness["sass"]["found"]

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    threads = 128 * zoo.WARPGROUPS
    acc = torch.int32 if config.integer else torch.float32

    def make_set(i: int) -> dict:
        """Operands (set 0: the checked ones), the kernel's sink and its per-CTA cycle counts."""
        x, w = (a, b) if i == 0 else operands(config, ctx.seed + 1000 * i)
        return {"a": _rows(x), "b": _rows(w), "sink": torch.empty(sms * threads, dtype=acc, device="cuda"),
                "cycles": torch.zeros(sms, dtype=torch.int64, device="cuda")}

    def throughput(s: dict) -> None:
        module.launch(config, s["a"], s["b"], s["sink"], s["cycles"], iters=THROUGHPUT_ITERS,
                      mode=zoo.MODE_THROUGHPUT, grid=sms, threads=threads,
                      stream=torch.cuda.current_stream().cuda_stream)

    first = make_set(0)
    set_bytes = sum(t.numel() * t.element_size() for t in first.values())
    timing = ctx.bench({"wgmma": throughput}, lambda i: first if i == 0 else make_set(i), set_bytes,
                       iters=10, warmup=3)
    rows_a, rows_b, sink, cycles = first["a"], first["b"], first["sink"], first["cycles"]
    stream = torch.cuda.current_stream().cuda_stream
    flops_per_cta = zoo.WARPGROUPS * THROUGHPUT_ITERS * zoo.INSTRUCTIONS_PER_BLOCK * config.flops_per_instruction()
    cta_cycles = cycles.tolist()
    per_clock = flops_per_cta / statistics.median(cta_cycles)
    seconds = timing["wgmma"]["median_ms"] * 1e-3
    tflops = sms * flops_per_cta / seconds / 1e12

    latency_cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    module.launch(config, rows_a, rows_b, sink, latency_cycles, iters=LATENCY_ITERS, mode=zoo.MODE_LATENCY,
                  grid=1, threads=128, stream=stream)
    torch.cuda.synchronize()
    latency = latency_cycles.item() / LATENCY_ITERS

    metrics = {
        "tflops": round(tflops, 2),
        "latency_cycles": round(latency, 1),
        "cta_cycles_spread": round(max(cta_cycles) / min(cta_cycles), 4),
        "implied_sm_clock_mhz": round(statistics.median(cta_cycles) / seconds / 1e6, 0),
        "ptxas_serialization_warnings": len(serialized),
    }
    peak = peaks.datasheet(ctx.gpu_short, PEAK_KEY.get(config.dtype, ""))
    if peak:
        metrics["tflops_fraction_of_datasheet"] = round(tflops / peak, 4)
    baseline = ("bf16-n256", _measured["bf16-n256"]) if "bf16-n256" in _measured else None
    _measured[config.name] = per_clock
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("flop-per-clk-per-sm", per_clock, "FLOP/clk/SM", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """bf16, N = 64: A and B converted to bf16 by truncation (round toward zero, a hand-written
    `bits >> 16` conversion) where round-to-nearest was meant. Each operand is then up to one ulp
    off, and D about 3x the gate's tolerance (a NumPy model; the wrong major-mode declaration this
    control used before missed by ~700x, which a gate ten times looser would still catch)."""
    import torch

    config = zoo.CONFIGS["bf16-n64"]
    g = torch.Generator(device="cuda").manual_seed(ctx.seed + 1)
    x, w = torch.randn(64, config.k_block, generator=g, device="cuda"), torch.randn(config.n, config.k_block,
                                                                                    generator=g, device="cuda")
    truncated = [(t.view(torch.int32) & -65536).view(torch.float32).bfloat16() for t in (x, w)]
    return check(config, *truncated, reference_operands=(x.bfloat16(), w.bfloat16()))


def compile_kernel(arch: str) -> compile_mod.Emitted:
    built = zoo.build(arch)
    emitted = compile_mod.Emitted(arch, ptx=built.ptx)
    emitted.sass = compile_mod.disassemble(built.cubin)
    by_kernel = zoo.sass_by_kernel(emitted.sass or "")
    for config in zoo.CONFIGS.values():
        if config.sass_mnemonic() in by_kernel.get(config.kernel_name, ""):
            emitted.facts.append(f"{config.name}:{config.sass_mnemonic()}")
    if not zoo.serialization_warnings(built.ptxas_log):
        emitted.facts.append("no-wgmma-serialization")
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

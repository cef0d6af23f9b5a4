"""probe-tma-copy: bandwidth of our TMA copy kernel by tile shape and stage count.

Each case copies a 16384x16384 tensor, checks the copy bit for bit (destination poisoned with NaN
first), then times the kernel and torch's own copy with ctx.bench (interleaved; a copy of this
size is a long kernel: a CUDA-graph replay after a read sweep of the L2).
Compile-only mode compiles the kernel for each target with fake tensors and scans PTX and SASS.

Run through the runner: kernelwiki probe run --probe probe-tma-copy [--compile-only]
"""

from __future__ import annotations


from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.tma_copy import tma_copy  # our kernel, importable without a GPU

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
SMEM_PER_SM = 227 * 1024


def build(dtype: str, m: int, n: int, tile: tuple[int, int], stages: int, drop_last_tile: bool = False):
    """Compile the kernel for (m, n) tensors of `dtype`; returns (make_set(i), ctas_per_sm), where
    make_set(i) is input set i: {src, dst, dst_torch, copy} with copy() launching our kernel
    src -> dst on the current stream."""
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    from kernelwiki.harness.timing import cute_stream

    cute_dtype = tma_copy.DTYPES[TORCH_DTYPES[dtype]]
    tma_copy.TmaCopy.can_implement(cute_dtype, m, n, tile, stages)
    ring_bytes = stages * tile[0] * tile[1] * cute_dtype.width // 8
    ctas_per_sm = max(1, min(4, SMEM_PER_SM // (ring_bytes + 1024)))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    op = tma_copy.TmaCopy(cute_dtype, tile, stages, max_ctas=sms * ctas_per_sm, drop_last_tile=drop_last_tile)
    compiled = None

    def make_set(i: int) -> dict:
        nonlocal compiled
        src = torch.randn(m, n, device="cuda").to(getattr(torch, TORCH_DTYPES[dtype]))
        dst = torch.empty_like(src)
        c_src, c_dst = from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16)
        if compiled is None:
            compiled = cute.compile(op, c_src, c_dst, cute_stream())
        return {"src": src, "dst": dst, "dst_torch": torch.empty_like(src),
                "copy": lambda: compiled(c_src, c_dst, cute_stream())}
    return make_set, ctas_per_sm


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    m, n = (int(x) for x in params["shape"].split("x"))
    torch.manual_seed(ctx.seed)
    make_set, ctas_per_sm = build(params["dtype"], m, n, tuple(params["tile"]), params["stages"])
    checked = make_set(0)
    src = checked["src"]
    gates.poison(checked["dst"])
    checked["copy"]()
    torch.cuda.synchronize()
    correctness = gates.check(checked["dst"], src, "exact")
    moved = 2 * src.numel() * src.element_size()
    baselines = {"torch copy_": lambda s: s["dst_torch"].copy_(s["src"]),                 # a memcpy node in a graph
                 "SM copy (x * 1)": lambda s: torch.mul(s["src"], 1, out=s["dst_torch"])}   # an elementwise kernel
    timing = ctx.bench({"tma_copy": lambda s: s["copy"](), **baselines}, lambda i: checked if i == 0 else make_set(i),
                       moved, iters=30, warmup=5)
    tbps = {name: moved / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    strongest = max(baselines, key=tbps.get)   # the headline is against the faster copy
    return {"correctness": correctness, "timing": timing,
            "metrics": {"bytes_moved": moved, "ctas_per_sm": ctas_per_sm},
            "baselines": [{"name": name, "value": round(tbps[name], 4)} for name in baselines],
            "headline": ctx.headline("bandwidth", tbps["tma_copy"], "TB/s", peak_key="copy", ceiling_key="copy",
                                     baseline=(strongest, tbps[strongest]))}


def negative_control(ctx: Context) -> dict:
    import torch

    broken = build("fp32", 2048, 2048, (128, 64), 4, drop_last_tile=True)[0](0)
    gates.poison(broken["dst"])
    broken["copy"]()
    torch.cuda.synchronize()
    return gates.check(broken["dst"], broken["src"], "exact")


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.from_cute(tma_copy.compile_for(arch), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

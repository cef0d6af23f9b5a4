"""Our Hopper GEMM for torch tensors: `gemm(a, b)` and `compile_gemm(a, b)` (the host interface).

    d = alpha * a @ b.T (batched: d[l] = alpha * a[l] @ b[l].T), a: ([L,] M, K), b: ([L,] N, K) in bf16,
    fp16, fp32 (TF32 math) or float8_e4m3fn, optionally with a fused epilogue (bias, GELU-tanh / SiLU,
    residual, e4m3 quantize-on-store). compile_gemm checks the tensors (types, devices, strides, overlap,
    alignment: a ValueError naming the value for anything the kernel cannot read), picks the
    configuration (config.choose_config, or tune=True: autotune.py measures it), fetches the compiled
    kernel (jit.kernel_for: one compile per configuration, cached on disk) and returns a launch that
    reads the stream current at each call (CUDA-graph capture works on any stream).

The package, by job (read in this order):
    config.py          GemmConfig and the rule that picks one (choose_config, swapped_config)
    gemm_sm90.py       the kernel: HopperGemm, a warp-specialized persistent wgmma GEMM (its docstring
                       explains the design: roles, ring, schedules, split-K, swap-AB, constraints)
    gemm_base.py       the skeleton it shares with the FP8 block-scaled GEMM (TMA atoms, scheduler walk,
                       mbarrier ring, producer loop, stmatrix + TMA-store epilogue)
    tile_scheduler.py  which K tiles each work tile covers, and the in-kernel split-K reduction
    fused_epilogue.py  the fused epilogue's math per accumulator slice (epilogue_reference.py: the same in torch)
    jit.py             compiling with dynamic shapes, the in-memory and on-disk kernel cache
    autotune.py        tune=True: time the candidates once per shape bucket, keep the fastest on disk
    nvmmh.py           NVIDIA's matmul heuristics' pick, for comparison
    sm90_common.py, pipeline_checks.py, tf32_mma.py: views, fake tensors and the cache; barrier counts
                       checked at compile time; our TF32 warpgroup MMA
    variants/naive.py  a one-stage teaching version

Compile only (any machine): python -m artifacts.kernels.hopper_gemm.hopper_gemm --arch sm_90a
Run: probe-hopper-gemm (kernelwiki probe run --probe probe-hopper-gemm) on an H200.
"""

from __future__ import annotations

import argparse
import math

import cutlass

from . import autotune
from .config import PINGPONG_TILE_M, GemmConfig, choose_config, split_workspace, swapped_config
from .fused_epilogue import EpilogueSpec
from .gemm_sm90 import D_M_MAJOR_DTYPES, D_MAJOR_MODE, MAJOR_MODE, HopperGemm
from .jit import compile_for, kernel_for, precompile
from .sm90_common import batch_last, canonical, check_alignment, current_stream, cute_view


def _dtypes() -> dict:
    import torch

    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16, torch.float32: cutlass.Float32,
            torch.float8_e4m3fn: cutlass.Float8E4M3FN}


def _as_mkl(name: str, t, rows_name: str):
    """(view (rows, K, L) of a (rows, K) or (L, rows, K) tensor, major 'k' or 'mn'); ValueError otherwise.
    A size-1 mode counts as contiguous (its stride addresses nothing)."""
    if t.dim() not in (2, 3):
        raise ValueError(f"{name}: expected ({rows_name}, K) or (L, {rows_name}, K); got shape {tuple(t.shape)}")
    rows, cols = t.shape[-2:]
    if t.stride(-1) == 1 or cols == 1:
        major, leading = "k", -1
    elif t.stride(-2) == 1 or rows == 1:
        major, leading = "mn", -2
    else:
        raise ValueError(f"{name}: neither {rows_name} nor K is contiguous (strides {tuple(t.stride())}); "
                         f"call .contiguous()")
    return batch_last(canonical(t, leading)), major


def compile_gemm(a, b, out_dtype=None, alpha: float = 1.0, tile_n: int | None = None, cluster_mn=None,
                 swizzle: int = 1, out=None, tile_m: int | None = None, split_k: int | None = None,
                 schedule: str = "cooperative", bias=None, activation: str | None = None, residual=None,
                 beta: float = 1.0, out_scale: float | None = None, swap_ab: bool | None = None, tune: bool = False,
                 **variant):
    """For torch tensors a: (M, K) or (L, M, K), b: (N, K) or (L, N, K) (bf16, fp16, float32 = tf32
    math, or float8_e4m3fn; K contiguous, or for the 16-bit types M/N contiguous, e.g.
    `x.t().contiguous().t()`): (run, d), where run() computes d = alpha * a @ b.T on the stream
    current at the call (so it can be captured in a CUDA graph on any stream), into the same d
    (`out` if given: (M, N) or (L, M, N), N contiguous). out_dtype defaults to a's type (fp32 for
    tf32 math), bf16 for fp8 inputs. Settings left None come from choose_config (with
    schedule="pingpong": tile_m 64 and no split-K, what that schedule runs); `variant` reaches
    HopperGemm (the negative control). run.config is the configuration used.

    Fused epilogue (fused_epilogue.py): d = act(alpha * a @ b.T + bias) + beta * residual, with bias
    (N,) broadcast over rows (and batches), activation "gelu_tanh", "silu" or None, residual shaped
    like d (N contiguous; it may be `out` itself, read before it is overwritten), bias and residual
    of d's type; choose_config never splits K under a fused epilogue, a split_k given does (the last
    split applies the epilogue once, to the whole sum). out_dtype
    torch.float8_e4m3fn quantizes on store: d = e4m3(result / out_scale), saturated to +-448, so
    out_scale * d approximates the result (bias and residual then bf16).

    swap_ab=True: the kernel computes out^T = b @ a.T (b as its A, a as its B: the weight's rows fill
    the 64-row side of the wgmma, a's few rows its narrow N side) and TMA-stores that M-major, which
    is out (M, N) with N contiguous: no transpose, no padding of a. tile_m, tile_n and cluster_mn are
    then the swapped kernel's (tile_m over N, tile_n over M); batch, alpha, views and both operands'
    majors mean what they mean unswapped. It needs a 16-bit out, no fused epilogue, split_k 1 and the
    cooperative schedule (ValueError otherwise). swap_ab=None: choose_config's rule (swap_ab_pays)
    where config.SWAP_AB_AUTO is on and the settings allow it; unswapped otherwise.

    tune=True: the configuration is measured instead of chosen by rule (autotune.py: the first call of
    a shape bucket times every unswapped configuration on these tensors and caches the fastest on
    disk); with the plain epilogue and the cooperative schedule, no setting forced, swap_ab not True."""
    if tune:
        forced = {name: value for name, value in (
            ("tile_m", tile_m), ("tile_n", tile_n), ("cluster_mn", cluster_mn), ("split_k", split_k), ("bias", bias),
            ("activation", activation), ("residual", residual), ("out_scale", out_scale)) if value is not None}
        if swap_ab:
            forced["swap_ab"] = swap_ab
        if forced or schedule != "cooperative" or variant:
            raise ValueError(f"tune=True measures the configuration itself, for the plain epilogue: it takes no "
                             f"forced setting or epilogue operand (got {sorted(forced) or 'none'}), no schedule but "
                             f"'cooperative' (got {schedule!r}) and no variant (got {sorted(variant) or 'none'})")
    import torch

    dtypes = _dtypes()
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in dtypes:
            raise ValueError(f"{name}: dtype {t.dtype} unsupported; use one of {', '.join(map(str, dtypes))}")
        if not t.is_cuda:
            raise ValueError(f"{name}: tensor is on {t.device}; the kernel reads CUDA tensors")
    if a.dtype != b.dtype:
        raise ValueError(f"a and b must have the same dtype; got {a.dtype} and {b.dtype}")
    va, a_major = _as_mkl("a", a, "M")
    vb, b_major = _as_mkl("b", b, "N")
    (m, k, batch), (n, kb, batch_b) = va.shape, vb.shape
    if k != kb or a.dim() != b.dim() or batch != batch_b:
        raise ValueError(f"expected a: ([L,] M, K) and b: ([L,] N, K) with the same K and L; got {tuple(a.shape)} "
                         f"and {tuple(b.shape)}")
    out_dtype = out_dtype or (out.dtype if out is not None else
                              torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype)
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn):
        raise ValueError(f"out_dtype {out_dtype} unsupported; use torch.bfloat16, torch.float16, torch.float32 or "
                         f"torch.float8_e4m3fn (with out_scale=)")
    shape_d = (m, n) if a.dim() == 2 else (batch, m, n)
    if out is None:
        out = torch.empty(shape_d, dtype=out_dtype, device=a.device)
    elif tuple(out.shape) != shape_d or out.dtype != out_dtype or out.device != a.device:
        raise ValueError(f"out: expected {shape_d} {out_dtype} on {a.device}; got {tuple(out.shape)} {out.dtype} "
                         f"on {out.device}")
    vd, out_major = _as_mkl("out", out, "M")
    if out_major != "k" or (n > 1 and vd.stride(1) != 1):
        raise ValueError(f"out: N must be the contiguous dimension (strides {tuple(out.stride())})")
    for name, t in (("a", a), ("b", b)):
        if _overlap(out, t):
            raise ValueError(f"out overlaps {name} in memory; the kernel reads {name} while it writes out: "
                             f"pass a separate tensor")
    spec, epilogue_args, stand_in = _epilogue_operands(bias, activation, residual, beta, out_scale, out, shape_d,
                                              variant.pop("bias_tile_local", False))
    ab_dtype = cutlass.TFloat32 if a.dtype == torch.float32 else dtypes[a.dtype]
    props = torch.cuda.get_device_properties(a.device)
    sms = props.multi_processor_count
    if tune:
        chosen = autotune.tuned_config(a, b, out_dtype, a_major, b_major, lambda: time_sweep(a, b, out_dtype, alpha),
                                       usable=lambda c: _runs(a, b, out_dtype, alpha, c, out))
    elif swap_ab:
        _check_swap_settings(out_dtype, dtypes[out_dtype], spec, schedule)
        chosen = swapped_config(m, n, k, batch, sms, ab_dtype.width)
    else:
        swap_allowed = (swap_ab is None and dtypes[out_dtype] in D_M_MAJOR_DTYPES and not spec.fused
                        and split_k in (None, 1) and schedule == "cooperative")
        # ping-pong takes the fused epilogue's widths (TILE_NS) and no split: the same candidates
        chosen = choose_config(m, n, k, batch, sms, ab_dtype.width, allow_split=not spec.fused, allow_swap=swap_allowed,
                               fused=spec.fused or schedule == "pingpong")
    swap = chosen.swap_ab
    if schedule == "pingpong":
        chosen = GemmConfig(PINGPONG_TILE_M, chosen.tile_n, chosen.cluster_mn, 1, schedule=schedule)
    config = GemmConfig(tile_m or chosen.tile_m, tile_n or chosen.tile_n,
                        tuple(cluster_mn) if cluster_mn is not None else chosen.cluster_mn,
                        chosen.split_k if split_k is None else split_k, swizzle, schedule, swap)
    (kernel_a, ka_major), (kernel_b, kb_major), vd, d_major = kernel_operands((va, a_major), (vb, b_major), out, swap)
    km, kn = (n, m) if swap else (m, n)
    if cluster_mn is None and (math.ceil(km / config.tile_m) < config.cluster_mn[0] or
                               math.ceil(kn / config.tile_n) < config.cluster_mn[1] or (split_k or 1) > 1):
        # the chosen cluster may not suit a forced tile or split
        config = GemmConfig(config.tile_m, config.tile_n, (1, 1), config.split_k, swizzle, schedule, swap)
    try:
        HopperGemm.can_implement(ab_dtype, dtypes[out_dtype], km, kn, k, config.tile_n, config.cluster_mn, ka_major,
                                 kb_major, config.tile_m, config.split_k, batch, schedule, spec, d_major)
    except ValueError as err:
        if not swap:
            raise
        raise ValueError(f"swap_ab=True runs the kernel on (b, a) into out^T (its M is N={n}, its N is M={m}): "
                         f"{err}") from None
    for name, t, v, leading in (("a", a, va, MAJOR_MODE[a_major]), ("b", b, vb, MAJOR_MODE[b_major]),
                                ("out", out, vd, D_MAJOR_MODE[d_major])):
        check_alignment(name, t, v, leading)

    # split-K, reduced inside the kernel: every split's FP32 partial into the workspace, the last split
    # of each output tile to arrive (its counter says) sums them in split order into out
    partial_elems, counter_elems = split_workspace(km, kn, batch, config)
    workspace, split_args = (), ()
    if partial_elems >= 2 ** 31:
        raise ValueError(f"split_k={config.split_k} at {batch}x{m}x{n}: the split-K workspace would hold {partial_elems} "
                         f"FP32 partials, past the kernel's 32-bit extent; use a smaller split_k")
    if config.split_k > 1:
        workspace = (torch.empty(partial_elems, dtype=torch.float32, device=a.device),
                     torch.zeros(counter_elems, dtype=torch.int32, device=a.device))   # zeroed once; the kernel resets them
        split_args = tuple(cute_view(t, 0) for t in workspace)
        if not spec.fused:   # the split kernel's epilogue slots come before the workspace: stand-ins
            epilogue_args, stand_in = _stand_in_operands(out)
    with torch.cuda.device(a.device):
        if spec.fused:
            variant = {**variant, "epilogue": spec}
        kernel = kernel_for(ab_dtype, dtypes[out_dtype], ka_major, kb_major, config, tuple(sorted(variant.items())),
                            d_major)
    operand_type = cutlass.TFloat32 if ab_dtype == cutlass.TFloat32 else None   # fp32 operands are read as tf32
    views = (cute_view(kernel_a, MAJOR_MODE[ka_major], operand_type),
             cute_view(kernel_b, MAJOR_MODE[kb_major], operand_type),
             cute_view(vd, D_MAJOR_MODE[d_major]))
    scale, split = cutlass.Float32(alpha), cutlass.Int32(config.split_k)

    device = a.device
    allocated_on = torch.cuda.current_stream(device)

    def run():
        """Launch on the stream current now: one launch, split-K included. A CUDA graph captured from
        run() holds raw pointers to the split-K workspace, which run() owns: keep run alive as long as
        such a graph. The workspace's counters are shared by every launch of this run: one run must not
        execute concurrently with itself (two streams, or two graphs replayed at once); make one
        compile_gemm per stream for that. A run on another stream than compile_gemm's must be ordered
        after it (wait_stream), which zeroes the counters."""
        stream = torch.cuda.current_stream(device)
        if stream != allocated_on:   # the workspace is freed later only after this stream's work
            for t in workspace:
                t.record_stream(stream)
        with torch.cuda.device(device):
            kernel(*views, scale, split, current_stream(), *epilogue_args, *split_args)
    run.config = config
    run.stand_in = stand_in   # the fused epilogue's unused operands point into it
    return run, out


def _runs(a, b, out_dtype, alpha: float, config: GemmConfig, out=None) -> bool:
    """Whether compile_gemm accepts `config` for a @ b.T (what time_sweep asks of each candidate): a
    tuned entry read from the tuning file, which is untrusted, is used only then."""
    try:
        compile_gemm(a, b, out_dtype, alpha, tile_m=config.tile_m, tile_n=config.tile_n, cluster_mn=config.cluster_mn,
                     split_k=config.split_k, swap_ab=config.swap_ab, out=out)
    except ValueError:
        return False
    return True


def kernel_operands(a_view, b_view, out, swap: bool):
    """((A view, major), (B view, major), D view (M, N, L), D's major) as the kernel reads them, from the
    (rows, K, L) views and majors of a and b and the user's out ([L,] M, N), N contiguous. Swapped:
    b is the kernel's A and a its B, and D is out^T, (N, M, L) with its M (the user's N) contiguous."""
    if swap:
        return b_view, a_view, batch_last(canonical(out.transpose(-1, -2), -2)), "m"
    return a_view, b_view, batch_last(canonical(out, -1)), "n"


def _check_swap_settings(out_dtype, d_dtype, spec: EpilogueSpec, schedule: str) -> None:
    """ValueError naming the setting that swap_ab=True cannot run with (its M-major store's limits);
    out_dtype is the user's (torch) name of the kernel's D type d_dtype."""
    if d_dtype not in D_M_MAJOR_DTYPES:
        raise ValueError(f"swap_ab=True with out dtype {out_dtype} unsupported: the transposed store writes 16-bit "
                         f"values; use torch.bfloat16 or torch.float16 (or swap_ab=False)")
    if spec.fused:
        raise ValueError(f"swap_ab=True with a fused epilogue ({spec.describe()}) unsupported; use swap_ab=False")
    if schedule != "cooperative":
        raise ValueError(f"swap_ab=True with schedule={schedule!r} unsupported; use schedule='cooperative'")


def _epilogue_operands(bias, activation, residual, beta: float, out_scale: float | None, out, shape_d,
                       bias_tile_local: bool = False):
    """(EpilogueSpec, the kernel's trailing arguments, the tensor behind the stand-in views, which the
    caller keeps alive) for compile_gemm's epilogue settings; ValueError
    naming the value for what the kernel cannot read: bias must be (N,), contiguous, residual shaped
    like out with N contiguous, both of out's type (bf16 for an e4m3 out) on its device, 16-byte
    aligned (the kernel's view assumes it; rows too), bias apart from out, residual apart from out or
    out itself; out_scale positive and finite, given exactly when out is e4m3.
    bias_tile_local: the negative control's indexing bug (EpilogueSpec)."""
    import torch

    quantize = out.dtype == torch.float8_e4m3fn
    if quantize != (out_scale is not None):
        raise ValueError(f"out_scale={out_scale} with out dtype {out.dtype}: a float8_e4m3fn out needs its per-tensor "
                         f"scale (out_scale=), and only it takes one")
    if quantize and not (0 < out_scale < math.inf):
        raise ValueError(f"out_scale={out_scale}: the scale of an e4m3 out must be positive and finite")
    spec = EpilogueSpec(bias is not None, activation, residual is not None, quantize, bias_tile_local)  # names a bad activation
    if residual is None and beta != 1.0:
        raise ValueError(f"beta={beta} without a residual: beta scales the residual tensor; pass residual=")
    if not spec.fused:
        return spec, (), None
    n = shape_d[-1]
    operand_dtype = torch.bfloat16 if quantize else out.dtype
    for name, t, shape in (("bias", bias, (n,)), ("residual", residual, shape_d)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a torch tensor; got {type(t).__name__}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: expected shape {tuple(shape)}; got {tuple(t.shape)}")
        if t.dtype != operand_dtype:
            raise ValueError(f"{name}: dtype {t.dtype} unsupported; the epilogue reads {name} in {operand_dtype} "
                             f"(out's type, bf16 for a float8_e4m3fn out)")
        if t.device != out.device:
            raise ValueError(f"{name}: tensor is on {t.device}; out is on {out.device}")
        if n > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name}: N must be the contiguous dimension (strides {tuple(t.stride())})")
    if bias is not None and _overlap(bias, out):
        raise ValueError("bias overlaps out in memory; other tiles read bias while this one writes out: pass a "
                         "separate tensor")
    if residual is not None and _overlap(residual, out) and (residual.data_ptr(), residual.stride()) != \
            (out.data_ptr(), out.stride()):
        raise ValueError("residual overlaps out without being out: an element would be read after another tile "
                         "wrote it; pass out itself or a separate tensor")
    # what a spec does not read still fills its slot: views of a small zero tensor of the type compiled for
    stand_in = _stand_in(out)
    vbias = canonical(bias, -1) if bias is not None else stand_in[0, :1]
    vc = batch_last(canonical(residual, -1)) if residual is not None else batch_last(stand_in)
    check_alignment("bias", vbias, vbias, 0)
    check_alignment("residual", residual if residual is not None else stand_in, vc, 1)
    return spec, (cute_view(vbias, 0), cute_view(vc, 1), cutlass.Float32(beta if residual is not None else 0.0),
                  cutlass.Float32(1.0 / out_scale if quantize else 1.0)), stand_in


def _stand_in(out):
    """A small zero tensor of the type the epilogue reads bias and residual in (out's, bf16 for an e4m3
    out): what fills the operand slots a kernel has and does not read."""
    import torch

    return torch.zeros(1, 8, dtype=torch.bfloat16 if out.dtype == torch.float8_e4m3fn else out.dtype,
                       device=out.device)


def _stand_in_operands(out):
    """(the four epilogue operands, the tensor behind them) of a split kernel without a fused epilogue:
    its signature has those slots before the split-K workspace; nothing reads them."""
    stand_in = _stand_in(out)
    return (cute_view(stand_in[0, :1], 0), cute_view(batch_last(stand_in), 1), cutlass.Float32(0.0),
            cutlass.Float32(1.0)), stand_in


def _overlap(x, y) -> bool:
    """Whether the memory spans of two tensors intersect (a conservative test: spans, not elements)."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    def span(t):
        start = t.data_ptr()
        return start, start + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1


def time_sweep(a, b, out_dtype=None, alpha: float = 1.0) -> dict[GemmConfig, float]:
    """{configuration: ms per launch} of choose_config's pick and every configuration of autotune.sweep
    that compile_gemm accepts for a @ b.T (what tune=True times), each into its own scratch outputs
    (the caller's tensors are only read), cycled over copies of a and b that together span
    autotune.ROTATED_BYTES (as the probes time: the L2 cold for each launch)."""
    import torch

    m, k = a.shape[-2:]
    n = b.shape[-2]
    batch = a.shape[0] if a.dim() == 3 else 1
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    bits = 8 if a.dtype == torch.float8_e4m3fn else 32 if a.dtype == torch.float32 else 16
    swap = (out_dtype or (torch.bfloat16 if a.dtype == torch.float8_e4m3fn else a.dtype)) in (torch.bfloat16, torch.float16)
    configs = [choose_config(m, n, k, batch, sms, bits, allow_swap=swap)]
    configs += [c for c in autotune.sweep(m, n, k, batch, sms, bits, allow_swap=swap) if c not in configs]
    set_bytes = a.numel() * a.element_size() + b.numel() * b.element_size()
    copies = max(1, min(autotune.MAX_INPUT_SETS, math.ceil(autotune.ROTATED_BYTES / max(1, set_bytes))))
    sets = [(a, b)] + [(a.clone(), b.clone()) for _ in range(copies - 1)]
    runs = {}
    for config in configs:
        try:
            runs[config] = [compile_gemm(x, y, out_dtype, alpha, tile_m=config.tile_m, tile_n=config.tile_n,
                                         cluster_mn=config.cluster_mn, split_k=config.split_k,
                                         swap_ab=config.swap_ab)[0] for x, y in sets]
        except ValueError:   # a configuration this problem cannot use (a split wider than its K tiles)
            continue
    return autotune.time_runs(runs)


def precompile_for(problems: list[tuple[int, int, int]], tune: bool = False, workers: int | None = None) -> list[str]:
    """Compile, in parallel processes (jit.precompile), the bf16 kernels that compile_gemm would pick for
    each (m, n, k) problem on this GPU, and with tune=True every configuration time_sweep times too, so
    that the calls that follow load them from the disk cache. Returns the workers' errors."""
    import os

    import torch

    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    kernels = {}
    for m, n, k in problems:
        chosen = [choose_config(m, n, k, 1, sms, 16, allow_swap=True)]
        for config in chosen + (autotune.sweep(m, n, k, 1, sms, 16) if tune else []):
            key = (config.tile_m, config.tile_n, config.cluster_mn, min(config.split_k, 2), config.swap_ab)
            kernels[key] = ("BFloat16", "BFloat16", "k", "k", GemmConfig(*key[:4]), "m" if config.swap_ab else "n")
    return precompile(list(kernels.values()), workers or max(1, min(16, (os.cpu_count() or 2) - 1)))


def gemm(a, b, out_dtype=None, alpha: float = 1.0, out=None, **settings):
    """d = alpha * a @ b.T (batched: d[l] = alpha * a[l] @ b[l].T) for torch tensors a: ([L,] M, K),
    b: ([L,] N, K), into `out` or a new tensor. One compiled kernel serves every shape of a
    configuration (kept in memory and on disk); settings (tile_m, tile_n, cluster_mn, split_k) override
    choose_config; tune=True measures the configuration instead (autotune.py); schedule="pingpong"
    picks the ping-pong consumers; swap_ab=True runs the swapped product into out; bias=, activation=,
    residual=, beta=, out_scale= fuse an epilogue (see compile_gemm)."""
    run, d = compile_gemm(a, b, out_dtype, alpha, out=out, **settings)
    run()
    return d


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    compile_for(args.arch)
    print(f"compiled for {args.arch}")

"""Our Hopper GEMM on the GPU, beyond the probe's shapes: M = 1, ragged tiles, views, odd strides,
batches, every input type and layout can_implement accepts, split-K reduced inside the kernel (shapes,
tiles, types, views, determinism, counters reset across runs and graph replays, fused epilogues, its
negative control), graph capture on a side stream, and the ValueErrors for what it refuses; the same
for the ping-pong schedule and for the fused epilogues (bias, GELU-tanh, SiLU, residual, e4m3
quantize-on-store) against epilogue_reference, for swap-AB (swap_ab=True: M = 1 to 100, every input
type, forced and narrow tiles, views, the switched-on default rule, its refusals) and for tune=True.
Skipped without an sm_90 GPU."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU", allow_module_level=True)
from artifacts.kernels.hopper_gemm import config, hopper_gemm

pytestmark = pytest.mark.gpu
# relative Frobenius error allowed, by output type: the output's rounding dominates (bf16 ~4e-3,
# fp16 ~5e-4); fp32 output (tf32 math on tf32-exact inputs) sums exact products in FP32
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}


def _operands(dtype, lead: tuple, m: int, n: int, k: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(*lead, m, k, device="cuda", generator=g)
    b = torch.randn(*lead, n, k, device="cuda", generator=g)
    if dtype == torch.float8_e4m3fn:
        return a.to(dtype), b.to(dtype)
    if dtype == torch.float32:   # values exact in tf32, so the reference sees what the MMA multiplies
        return ((x.view(torch.int32) & -8192).view(torch.float32) for x in (a, b))
    return a.to(dtype), b.to(dtype)


def _check(a, b, d, alpha: float = 1.0):
    ref = alpha * (a.double() @ b.double().transpose(-1, -2))
    assert not torch.isnan(d).any(), "unwritten output"
    err = ((d.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    tol = TOL[d.dtype] if d.dtype != torch.float32 else TOL[torch.float32]   # the output's rounding dominates
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("m, n, k", [(1, 8, 64), (1, 4096, 4096), (2, 264, 136), (3, 4096, 7168), (7, 520, 200),
                                     (63, 1000, 72), (64, 8192, 1024), (65, 2112, 7168), (127, 256, 4096),
                                     (256, 4096, 4096), (1000, 24, 1000), (4000, 2104, 7000)])
def test_bf16_shapes(m, n, k):
    a, b = _operands(torch.bfloat16, (), m, n, k)
    d = hopper_gemm.gemm(a, b)
    _check(a, b, d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn])
@pytest.mark.parametrize("m", [1, 5, 130])
def test_every_input_type(dtype, m):
    a, b = _operands(dtype, (), m, 264, 512, seed=m)
    d = hopper_gemm.gemm(a, b, alpha=0.5)
    _check(a.float(), b.float(), d, 0.5)


@pytest.mark.parametrize("tile_m, tile_n, split_k, cluster", [(64, 64, 1, (1, 1)), (64, 192, 3, (1, 1)),
                                                            (128, 128, 2, (1, 1)), (128, 192, 1, (1, 2)), (128, 128, 1, (2, 1)),
                                                            (128, 256, 5, (1, 1))])
def test_forced_configurations(tile_m, tile_n, split_k, cluster):
    a, b = _operands(torch.bfloat16, (), 333, 776, 1000)
    d = hopper_gemm.gemm(a, b, tile_m=tile_m, tile_n=tile_n, split_k=split_k, cluster_mn=cluster)
    _check(a, b, d)


def test_views_and_odd_strides():
    a, b = _operands(torch.bfloat16, (), 64, 512, 1024)
    _check(a[17:18], b, hopper_gemm.gemm(a[17:18], b))           # one row of a larger matrix
    wide_a, wide_b = _operands(torch.bfloat16, (), 100, 296, 1088)
    a2, b2 = wide_a[:, 8:8 + 1024], wide_b[:, :1024]              # row stride 1088, offset by 16 bytes
    _check(a2, b2, hopper_gemm.gemm(a2, b2))
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()      # M- and N-major (16-bit types)
    _check(at, bt, hopper_gemm.gemm(at, bt))


def test_batched_and_out():
    a, b = _operands(torch.bfloat16, (3,), 100, 264, 520)
    out = torch.full((3, 100, 264), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert hopper_gemm.gemm(a, b, out=out) is out
    _check(a, b, out)
    a1, b1 = _operands(torch.bfloat16, (1,), 1, 64, 64)
    _check(a1, b1, hopper_gemm.gemm(a1, b1))


def _repeats_exactly(run, d, times: int):
    """run() `times` more times into a poisoned d: each must give the first run's bits. Returns them."""
    run()
    first = d.clone()
    for _ in range(times):
        d.fill_(float("nan"))
        run()
        assert torch.equal(d, first)
    return first


def test_split_k_is_deterministic():
    a, b = _operands(torch.bfloat16, (), 16, 4096, 14336)
    run, d = hopper_gemm.compile_gemm(a, b, swap_ab=False, split_k=4)
    assert run.config.split_k == 4
    _repeats_exactly(run, d, 3)
    _check(a, b, d)


def _replay_on_a_side_stream(run, d):
    """Capture `run` into a CUDA graph on a side stream, poison D, replay: D must come from the replay."""
    run()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()


def test_graph_capture_on_a_side_stream():
    a, b = _operands(torch.bfloat16, (), 1, 4096, 4096)
    run, d = hopper_gemm.compile_gemm(a, b)
    _replay_on_a_side_stream(run, d)
    _check(a, b, d)


# --- split-K reduced inside the kernel: the last split of each output tile sums the partials ---------

def _split_run(a, b, split_k: int, **settings):
    """(run, d) of a forced split, d poisoned; the split is the one asked for (1x1 cluster)."""
    run, d = hopper_gemm.compile_gemm(a, b, split_k=split_k, **settings)
    assert run.config.split_k == split_k and run.config.cluster_mn == (1, 1)
    if d.dtype == torch.float8_e4m3fn:
        d.view(torch.uint8).fill_(0x7F)
    else:
        d.fill_(float("nan"))
    return run, d


@pytest.mark.parametrize("split_k", [2, 3, 4, 5, 8, 11, 16])
@pytest.mark.parametrize("m, n, k", [(1, 6144, 4096), (16, 4096, 14336), (7, 520, 200), (65, 2112, 7168),
                                     (130, 264, 1000)])
def test_split_k_shapes(split_k, m, n, k):
    """M = 1, ragged M, N and K; at K = 200 (4 K tiles) every split past 4 has empty ranges, whose
    partials are zero and still count."""
    a, b = _operands(torch.bfloat16, (), m, n, k, seed=split_k)
    run, d = _split_run(a, b, split_k)
    run()
    _check(a, b, d)


@pytest.mark.parametrize("tile_m, tile_n", [(64, 128), (64, 256), (128, 64), (128, 192)])
def test_split_k_every_tile(tile_m, tile_n):
    a, b = _operands(torch.bfloat16, (), 333, 776, 3000)
    run, d = _split_run(a, b, 6, tile_m=tile_m, tile_n=tile_n)
    run()
    _check(a, b, d)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn])
def test_split_k_every_input_type(dtype):
    a, b = _operands(dtype, (), 5, 1032, 4096, seed=11)
    run, d = _split_run(a, b, 4, alpha=0.5)
    run()
    _check(a.float(), b.float(), d, 0.5)


def test_split_k_batched_views_and_out():
    a, b = _operands(torch.bfloat16, (3,), 100, 264, 2048)
    out = torch.empty(3, 100, 264, dtype=torch.bfloat16, device="cuda")
    run, d = _split_run(a, b, 5, out=out)
    assert d is out
    run()
    _check(a, b, out)
    wide_a, wide_b = _operands(torch.bfloat16, (), 100, 296, 4104)
    a2, b2 = wide_a[:, 8:8 + 4096], wide_b[:, :4096]               # row stride 4104, offset by 16 bytes
    big = torch.empty(120, 304, dtype=torch.bfloat16, device="cuda")
    out2 = big[7:107, 8:8 + 296]                                     # out as a view, row stride 304
    run, d = _split_run(a2, b2, 7, out=out2)
    run()
    _check(a2, b2, out2)
    a3, b3 = _operands(torch.bfloat16, (), 64, 512, 4096)
    at, bt = a3.t().contiguous().t(), b3.t().contiguous().t()       # M- and N-major
    run, d = _split_run(at, bt, 3)
    run()
    _check(at, bt, d)
    one = a2[17:18]                                                  # one row of a larger matrix
    run, d = _split_run(one, b2, 9)
    run()
    _check(one, b2, d)


def test_split_k_is_bitwise_repeatable_and_its_counters_reset():
    """Three runs give the same bits (the fixed order); a run after them still reduces (the last
    split of each tile reset the counter), and so does a second compile_gemm's (its own counters)."""
    a, b = _operands(torch.bfloat16, (), 1, 6144, 4096, seed=5)
    run, d = _split_run(a, b, 5)
    first = _repeats_exactly(run, d, 3)
    _check(a, b, d)
    other, d2 = _split_run(a, b, 5)
    other()
    assert torch.equal(d2, first)


def test_split_k_graph_capture_on_a_side_stream_replayed_twice():
    a, b = _operands(torch.bfloat16, (), 16, 4096, 14336, seed=6)
    run, d = _split_run(a, b, 8)
    run()
    eager = d.clone()
    _replay_on_a_side_stream(run, d)          # the warm-up run, capture, one replay
    assert torch.equal(d, eager)
    d.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):                         # replays back to back: each finds the counters at 0
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(d, eager)


def test_split_k_with_a_fused_epilogue():
    """act(sum) applied once by the last split: exact for bias, activation, residual (out itself too)
    and the e4m3 quantize-on-store."""
    m, n, k = 16, 4096, 8192
    a, b = _operands(torch.bfloat16, (), m, n, k, seed=8)
    settings = _epilogue_operands(EPILOGUES["bias-gelu_tanh-residual"], (), m, n, k, torch.bfloat16)
    run, d = _split_run(a, b, 6, alpha=0.5, beta=-0.75, **settings)
    run()
    _check_fused(a, b, d, settings, alpha=0.5, beta=-0.75)
    out = (torch.randn(m, n, device="cuda") * 20).bfloat16()
    before = out.clone()
    run, _ = hopper_gemm.compile_gemm(a, b, out=out, residual=out, split_k=4)
    run()
    _check_fused(a, b, out, {"residual": before})
    ref = _fused_reference(a, b, {})
    out_scale = ref.abs().max().item() / 448
    run, d = _split_run(a, b, 4, out_dtype=torch.float8_e4m3fn, out_scale=out_scale)
    run()
    rounded = (ref / out_scale).float().to(torch.float8_e4m3fn).double() * out_scale
    got = d.float().double() * out_scale
    err, floor = ((got - ref).norm() / ref.norm()).item(), ((rounded - ref).norm() / ref.norm()).item()
    assert err <= 1.5 * floor + 1e-3


def test_split_k_control_breaks_one_tile_only():
    """skip_last_slice (the decode probe's control): output tile (0, 0) misses its last K range, every
    other element equals the correct kernel's bit for bit."""
    a, b = _operands(torch.bfloat16, (), 16, 4096, 15424, seed=9)
    good, d_good = _split_run(a, b, 16, tile_m=64, tile_n=256)
    good()
    bad, d_bad = _split_run(a, b, 16, tile_m=64, tile_n=256, skip_last_slice=True)
    bad()
    torch.cuda.synchronize()
    assert torch.equal(d_bad[:, 256:], d_good[:, 256:])
    missing = (a[:, 15360:].double() @ b[:256, 15360:].double().t())
    assert ((d_good[:, :256].double() - d_bad[:, :256].double() - missing).norm() / missing.norm()).item() < 0.2


def test_refusals_name_the_value():
    a, b = _operands(torch.bfloat16, (), 64, 256, 1024)
    with pytest.raises(ValueError, match="data_ptr .* is not 16-byte aligned"):
        storage = torch.empty(64 * 1024 + 1, dtype=torch.bfloat16, device="cuda")
        hopper_gemm.gemm(storage[1:].view(64, 1024), b)
    with pytest.raises(ValueError, match="K=100: the contiguous dimension of A"):
        hopper_gemm.gemm(a[:, :100].contiguous(), b[:, :100].contiguous())
    with pytest.raises(ValueError, match="stride 1030 .* not a multiple of 16 bytes"):
        wide = torch.randn(64, 1030, device="cuda").bfloat16()
        hopper_gemm.gemm(wide[:, :1024], b)
    with pytest.raises(ValueError, match="neither M nor K is contiguous"):
        hopper_gemm.gemm(a[:, ::2], b[:, ::2])
    with pytest.raises(ValueError, match="same dtype"):
        hopper_gemm.gemm(a, b.half())
    with pytest.raises(ValueError, match="out: expected"):
        hopper_gemm.gemm(a, b, out=torch.empty(64, 255, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="tile_n=88"):   # tile widths are multiples of 16 (96 became one)
        hopper_gemm.gemm(a, b, tile_n=88)
    square = torch.randn(64, 64, device="cuda").bfloat16()
    with pytest.raises(ValueError, match="out overlaps a"):
        hopper_gemm.gemm(square, square.clone(), out=square)
    with pytest.raises(ValueError, match="stride 0 in mode 0"):
        hopper_gemm.gemm(a[:1].expand(64, 1024), b)


# --- the ping-pong schedule (schedule="pingpong": two consumer warpgroups on alternate 64-row tiles) --

PINGPONG = {"schedule": "pingpong"}


@pytest.mark.parametrize("m, n, k", [(1, 8, 64), (1, 4096, 4096), (2, 264, 136), (7, 520, 200), (63, 1000, 72),
                                     (65, 2112, 7168), (127, 256, 4096), (1000, 24, 1000), (4000, 2104, 7000),
                                     (4096, 4096, 512)])
def test_pingpong_shapes(m, n, k):
    a, b = _operands(torch.bfloat16, (), m, n, k)
    run, d = hopper_gemm.compile_gemm(a, b, **PINGPONG)
    assert run.config.schedule == "pingpong" and run.config.tile_m == 64
    run()
    _check(a, b, d)


@pytest.mark.parametrize("tile_n", [64, 128, 192, 256])
@pytest.mark.parametrize("cluster", [(1, 1), (2, 1)], ids=["1x1", "2x1"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_pingpong_tiles_and_clusters(tile_n, cluster, dtype):
    # 3000 rows: 47 row tiles, the last ragged (56 rows), 776 columns ragged in every tile width:
    # 188 (tile_n 256) to 611 (64) tiles over 132 SMs, so both warpgroups take turns, some CTAs an
    # odd number of tiles (the last one's turn unanswered), in 2x1 an odd tile row count
    a, b = _operands(dtype, (), 3000, 776, 1000, seed=tile_n)
    d = hopper_gemm.gemm(a, b, tile_n=tile_n, cluster_mn=cluster, alpha=0.5, **PINGPONG)
    _check(a, b, d, 0.5)


def test_pingpong_matches_the_cooperative_schedule_and_repeats_exactly():
    """Many tiles per CTA (both warpgroups take several turns): every launch gives the same bits (a race
    between the two warpgroups' epilogues on the shared D buffers would not), close to cooperative."""
    a, b = _operands(torch.bfloat16, (), 4096, 7168, 2048)
    run, d = hopper_gemm.compile_gemm(a, b, tile_n=256, cluster_mn=(2, 1), **PINGPONG)
    first = _repeats_exactly(run, d, 10)
    cooperative = hopper_gemm.gemm(a, b, tile_m=128, tile_n=256, cluster_mn=(2, 1))
    _check(a, b, first)
    assert ((first.float() - cooperative.float()).norm() / cooperative.float().norm()).item() < 1e-2


def test_pingpong_views_odd_strides_and_fp32_out():
    a, b = _operands(torch.bfloat16, (), 64, 512, 1024)
    _check(a[17:18], b, hopper_gemm.gemm(a[17:18], b, **PINGPONG))
    wide_a, wide_b = _operands(torch.bfloat16, (), 100, 296, 1088)
    a2, b2 = wide_a[:, 8:8 + 1024], wide_b[:, :1024]
    _check(a2, b2, hopper_gemm.gemm(a2, b2, **PINGPONG))
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()
    _check(at, bt, hopper_gemm.gemm(at, bt, **PINGPONG))
    _check(a, b, hopper_gemm.gemm(a, b, out_dtype=torch.float32, **PINGPONG))


def test_pingpong_batched_and_out():
    a, b = _operands(torch.float16, (3,), 100, 264, 520)
    out = torch.full((3, 100, 264), float("nan"), dtype=torch.float16, device="cuda")
    assert hopper_gemm.gemm(a, b, out=out, **PINGPONG) is out
    _check(a, b, out)


def test_pingpong_graph_capture_on_a_side_stream():
    a, b = _operands(torch.bfloat16, (), 2000, 4096, 1024)
    run, d = hopper_gemm.compile_gemm(a, b, **PINGPONG)
    _replay_on_a_side_stream(run, d)
    _check(a, b, d)


def test_pingpong_refusals_name_the_value():
    a, b = _operands(torch.bfloat16, (), 64, 256, 1024)
    with pytest.raises(ValueError, match="schedule='pingpong' with tile_m=128"):
        hopper_gemm.gemm(a, b, tile_m=128, **PINGPONG)
    with pytest.raises(ValueError, match="schedule='pingpong' with split_k=2"):
        hopper_gemm.gemm(a, b, split_k=2, **PINGPONG)
    with pytest.raises(ValueError, match="schedule='pingpong' with A/B dtype Float8E4M3FN"):
        hopper_gemm.gemm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), **PINGPONG)


# --- fused epilogues (fused_epilogue.py): D = act(alpha * acc + bias) + beta * C ---------------------

from artifacts.kernels.hopper_gemm import epilogue_reference  # noqa: E402

EPILOGUES = {"bias": ("bias",), "gelu_tanh": ("gelu_tanh",), "silu": ("silu",), "residual": ("residual",),
             "bias-silu": ("bias", "silu"), "bias-gelu_tanh-residual": ("bias", "gelu_tanh", "residual")}


def _epilogue_operands(names, lead: tuple, m: int, n: int, k: int, dtype, seed: int = 1):
    """bias (N,) and residual ([L,] M, N) at the product's scale (sqrt(K)), so any misplaced element shows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    scale = k ** 0.5
    bias = (torch.randn(n, device="cuda", generator=g) * scale).to(dtype) if "bias" in names else None
    residual = (torch.randn(*lead, m, n, device="cuda", generator=g) * scale).to(dtype) if "residual" in names else None
    activation = next((x for x in names if x in epilogue_reference.ACTIVATIONS), None)
    return {"bias": bias, "activation": activation, "residual": residual}


def _fused_reference(a, b, settings: dict, alpha: float = 1.0, beta: float = 1.0):
    bias, residual = settings.get("bias"), settings.get("residual")
    return epilogue_reference.fused_epilogue(a.double() @ b.double().transpose(-1, -2), torch, alpha,
                                             None if bias is None else bias.double(), settings.get("activation"),
                                             None if residual is None else residual.double(), beta)


def _check_fused(a, b, d, settings: dict, alpha: float = 1.0, beta: float = 1.0):
    ref = _fused_reference(a, b, settings, alpha, beta)
    assert not torch.isnan(d).any(), "unwritten output"
    err = ((d.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err <= TOL[d.dtype], f"relative error {err:.2e} > {TOL[d.dtype]:.0e}"


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (1, 8, 64), (2, 264, 136), (130, 520, 200), (4000, 2104, 7000)])
def test_fused_epilogue_shapes(epilogue, m, n, k):
    a, b = _operands(torch.bfloat16, (), m, n, k)
    settings = _epilogue_operands(EPILOGUES[epilogue], (), m, n, k, torch.bfloat16)
    run, d = hopper_gemm.compile_gemm(a, b, **settings)
    assert run.config.split_k == 1   # choose_config does not split under a fused epilogue
    d.fill_(float("nan"))
    run()
    _check_fused(a, b, d, settings)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn])
def test_fused_epilogue_every_input_type_with_alpha_and_beta(dtype):
    a, b = _operands(dtype, (), 130, 264, 512, seed=3)
    out_dtype = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    settings = _epilogue_operands(EPILOGUES["bias-gelu_tanh-residual"], (), 130, 264, 512, out_dtype)
    d = hopper_gemm.gemm(a, b, alpha=0.5, beta=-0.75, **settings)
    _check_fused(a.float(), b.float(), d, settings, alpha=0.5, beta=-0.75)


@pytest.mark.parametrize("tile_m, tile_n, cluster", [(64, 64, (1, 1)), (128, 192, (1, 2)), (128, 128, (2, 1)),
                                                    (64, 16, (1, 1)), (128, 32, (1, 1))])
def test_fused_epilogue_forced_configurations(tile_m, tile_n, cluster):
    a, b = _operands(torch.bfloat16, (), 333, 776, 1000)
    settings = _epilogue_operands(EPILOGUES["bias-silu"] + ("residual",), (), 333, 776, 1000, torch.bfloat16)
    d = hopper_gemm.gemm(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=cluster, **settings)
    _check_fused(a, b, d, settings)


@pytest.mark.parametrize("m, n, k", [(3000, 776, 1000), (1, 4096, 4096)])
def test_fused_epilogue_with_the_pingpong_schedule(m, n, k):
    a, b = _operands(torch.bfloat16, (), m, n, k)
    settings = _epilogue_operands(EPILOGUES["bias-gelu_tanh-residual"], (), m, n, k, torch.bfloat16)
    d = hopper_gemm.gemm(a, b, schedule="pingpong", alpha=0.5, **settings)
    _check_fused(a, b, d, settings, alpha=0.5)


def test_fused_epilogue_views_batches_and_in_place_residual():
    # bias and residual as views of larger tensors (16-byte-aligned offsets, row stride 1032)
    a, b = _operands(torch.bfloat16, (), 100, 1024, 512)
    big = torch.randn(120, 1032, device="cuda").bfloat16() * 20
    settings = {"bias": big[3, 8:8 + 1024], "activation": "gelu_tanh", "residual": big[7:107, :1024]}
    _check_fused(a, b, hopper_gemm.gemm(a, b, **settings), settings)
    # one row of a larger A
    _check_fused(a[17:18], b, hopper_gemm.gemm(a[17:18], b, bias=settings["bias"]), {"bias": settings["bias"]})
    # batched: bias shared by the batches, residual per batch
    a3, b3 = _operands(torch.bfloat16, (3,), 100, 264, 520)
    batched = _epilogue_operands(EPILOGUES["bias-gelu_tanh-residual"], (3,), 100, 264, 520, torch.bfloat16)
    _check_fused(a3, b3, hopper_gemm.gemm(a3, b3, **batched), batched)
    # the residual is out itself (x += proj(h)): each element read before its tile overwrites it
    out = (torch.randn(100, 1024, device="cuda") * 20).bfloat16()
    before = out.clone()
    assert hopper_gemm.gemm(a, b, out=out, residual=out) is out
    _check_fused(a, b, out, {"residual": before})


def test_fused_epilogue_graph_capture_on_a_side_stream():
    a, b = _operands(torch.bfloat16, (), 16, 4096, 4096)
    settings = _epilogue_operands(EPILOGUES["bias-gelu_tanh-residual"], (), 16, 4096, 4096, torch.bfloat16)
    run, d = hopper_gemm.compile_gemm(a, b, **settings)
    _replay_on_a_side_stream(run, d)
    _check_fused(a, b, d, settings)


def test_fused_epilogue_refusals_name_the_value():
    a, b = _operands(torch.bfloat16, (), 64, 256, 1024)
    bias = torch.zeros(256, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="bias: dtype torch.float16 unsupported"):
        hopper_gemm.gemm(a, b, bias=bias.half())
    with pytest.raises(ValueError, match="bias: tensor is on cpu"):
        hopper_gemm.gemm(a, b, bias=bias.cpu())
    with pytest.raises(ValueError, match="activation='relu' unsupported"):
        hopper_gemm.gemm(a, b, activation="relu")
    with pytest.raises(ValueError, match=r"residual: expected shape \(64, 256\)"):
        hopper_gemm.gemm(a, b, residual=torch.zeros(64, 128, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.parametrize("epilogue", ["bias-gelu_tanh-residual", "none"])
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (130, 528, 200), (4000, 2112, 7000)])
def test_e4m3_out_quantizes_on_store(epilogue, m, n, k):
    """d = e4m3(result / out_scale): dequantized, as close to the FP64 result as torch's own rounding of
    that result to e4m3 (FP32 accumulation order aside); values past 448 x out_scale saturate."""
    a, b = _operands(torch.bfloat16, (), m, n, k)
    settings = _epilogue_operands(EPILOGUES.get(epilogue, ()), (), m, n, k, torch.bfloat16)
    ref = _fused_reference(a, b, settings)
    out_scale = ref.abs().max().item() / 448
    run, d = hopper_gemm.compile_gemm(a, b, out_dtype=torch.float8_e4m3fn, out_scale=out_scale, **settings)
    assert d.dtype == torch.float8_e4m3fn and run.config.split_k == 1
    d.view(torch.uint8).fill_(0x7F)   # e4m3 NaN: unwritten elements show
    run()
    got = d.float().double() * out_scale
    assert not torch.isnan(got).any(), "unwritten output"
    rounded = (ref / out_scale).float().to(torch.float8_e4m3fn).double() * out_scale
    err, floor = ((got - ref).norm() / ref.norm()).item(), ((rounded - ref).norm() / ref.norm()).item()
    assert err <= 1.5 * floor + 1e-3, f"relative error {err:.3e}; torch's e4m3 rounding of the result: {floor:.3e}"
    saturated = hopper_gemm.gemm(a, b, out_dtype=torch.float8_e4m3fn, out_scale=out_scale / 4, **settings)
    assert not torch.isnan(saturated.float()).any() and saturated.float().abs().max().item() == 448.0


# --- swap-AB (swap_ab=True: the kernel runs on (b, a) and stores out^T M-major, which is out) ---------

SWAP = {"swap_ab": True}


def _run_poisoned(a, b, **settings):
    """(run, d) of compile_gemm with d poisoned before the one launch: what d holds came from it."""
    run, d = hopper_gemm.compile_gemm(a, b, **settings)
    d.fill_(float("nan"))
    run()
    return run, d


@pytest.mark.parametrize("m, n, k", [(1, 8, 64), (1, 6144, 4096), (8, 520, 200), (13, 4096, 14336), (13, 264, 136),
                                     (64, 1000, 72), (100, 2112, 1000), (1, 4104, 4104)])
def test_swap_ab_shapes(m, n, k):
    a, b = _operands(torch.bfloat16, (), m, n, k)
    run, d = _run_poisoned(a, b, **SWAP)
    assert run.config.swap_ab and tuple(d.shape) == (m, n) and d.stride(-1) == 1
    _check(a, b, d)


@pytest.mark.parametrize("dtype, out_dtype", [(torch.bfloat16, None), (torch.float16, None),
                                              (torch.float32, torch.bfloat16), (torch.float8_e4m3fn, None)],
                         ids=["bf16", "fp16", "tf32-bf16-out", "fp8"])
@pytest.mark.parametrize("m", [1, 13, 64])
def test_swap_ab_every_input_type(dtype, out_dtype, m):
    a, b = _operands(dtype, (), m, 264, 512, seed=m)
    run, d = _run_poisoned(a, b, out_dtype=out_dtype, alpha=0.5, **SWAP)
    assert run.config.swap_ab
    _check(a.float(), b.float(), d, 0.5)


@pytest.mark.parametrize("tile_m, tile_n, cluster", [(64, 16, (1, 1)), (128, 16, (1, 1)), (64, 32, (2, 1)),
                                                    (128, 64, (1, 2)), (128, 256, (2, 1))])
def test_swap_ab_forced_configurations(tile_m, tile_n, cluster):
    a, b = _operands(torch.bfloat16, (), 13, 776, 1000)
    run, d = _run_poisoned(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=cluster, **SWAP)
    assert (run.config.tile_m, run.config.tile_n, run.config.cluster_mn) == (tile_m, tile_n, cluster)
    _check(a, b, d)


@pytest.mark.parametrize("tile_m, tile_n", [(64, 16), (128, 32)])
def test_narrow_tiles_unswapped(tile_m, tile_n):
    a, b = _operands(torch.bfloat16, (), 333, 776, 1000)
    _check(a, b, _run_poisoned(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=(1, 1))[1])


def test_swap_ab_views_and_odd_strides():
    a, b = _operands(torch.bfloat16, (), 64, 512, 1024)
    _check(a[17:18], b, hopper_gemm.gemm(a[17:18], b, **SWAP))   # one row of a larger matrix
    wide_a, wide_b = _operands(torch.bfloat16, (), 100, 296, 1088)
    a2, b2 = wide_a[3:16, 8:8 + 1024], wide_b[:, :1024]          # 13 rows, row stride 1088, offset by 16 bytes
    _check(a2, b2, hopper_gemm.gemm(a2, b2, **SWAP))
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()      # M- and N-major (16-bit types)
    _check(at, bt, hopper_gemm.gemm(at, bt, **SWAP))
    big = torch.full((13, 512 + 24), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = big[:, 8:8 + 512]                                      # out's rows 536 apart, offset by 16 bytes
    assert hopper_gemm.gemm(a[:13], b, out=out, **SWAP) is out
    _check(a[:13], b, out)
    assert big[:, :8].isnan().all() and big[:, 8 + 512:].isnan().all(), "wrote outside out"


def test_swap_ab_batched_and_out():
    a, b = _operands(torch.float16, (3,), 13, 264, 520)
    out = torch.full((3, 13, 264), float("nan"), dtype=torch.float16, device="cuda")
    assert hopper_gemm.gemm(a, b, out=out, **SWAP) is out
    _check(a, b, out)
    a1, b1 = _operands(torch.bfloat16, (1,), 1, 64, 64)
    _check(a1, b1, hopper_gemm.gemm(a1, b1, **SWAP))


def test_swap_ab_graph_capture_on_a_side_stream():
    a, b = _operands(torch.bfloat16, (), 13, 4096, 4096)
    run, d = hopper_gemm.compile_gemm(a, b, **SWAP)
    _replay_on_a_side_stream(run, d)
    _check(a, b, d)


def test_swap_ab_default_follows_the_rule_unless_switched_off(monkeypatch):
    a, b = _operands(torch.bfloat16, (), 1, 6144, 4096)
    monkeypatch.setattr(config, "SWAP_AB_AUTO", False)
    assert not hopper_gemm.compile_gemm(a, b)[0].config.swap_ab
    monkeypatch.setattr(config, "SWAP_AB_AUTO", True)
    run, d = _run_poisoned(a, b)
    assert run.config.swap_ab
    _check(a, b, d)
    assert not hopper_gemm.compile_gemm(a, b, swap_ab=False)[0].config.swap_ab
    bias = torch.randn(6144, device="cuda").bfloat16()
    assert not hopper_gemm.compile_gemm(a, b, bias=bias)[0].config.swap_ab   # a fused epilogue stays unswapped


def test_swap_ab_refusals_name_the_value():
    a, b = _operands(torch.bfloat16, (), 13, 264, 512)
    with pytest.raises(ValueError, match="swap_ab=True with out dtype torch.float32 unsupported"):
        hopper_gemm.gemm(a, b, out_dtype=torch.float32, **SWAP)
    with pytest.raises(ValueError, match=r"swap_ab=True with a fused epilogue \(bias\) unsupported"):
        hopper_gemm.gemm(a, b, bias=torch.zeros(264, dtype=torch.bfloat16, device="cuda"), **SWAP)
    with pytest.raises(ValueError, match="swap_ab=True with schedule='pingpong' unsupported"):
        hopper_gemm.gemm(a, b, schedule="pingpong", **SWAP)
    a2, b2 = _operands(torch.bfloat16, (), 13, 260, 512)
    with pytest.raises(ValueError, match=r"swap_ab=True runs the kernel on \(b, a\) into out\^T \(its M is N=260, "
                                         r"its N is M=13\): M=260: columns of D must be a multiple of 16 bytes"):
        hopper_gemm.gemm(a2, b2, **SWAP)
    with pytest.raises(ValueError, match=r"N=13: the contiguous dimension of B"):   # a M-major: 13 rows, 26 bytes
        hopper_gemm.gemm(a.t().contiguous().t(), b, **SWAP)


# --- the tiles mid-M needs (issue 34): swapped tiles sized to the rows, split with swap and clusters,
# 192-row tiles, any width a multiple of 16 ----------------------------------------------------------------

@pytest.mark.parametrize("m, n, k, tile_m, tile_n, cluster, split_k", [
    (160, 4096, 14336, 128, 80, (1, 2), 2),     # cuBLAS's 128x80 1x2 split: two token tiles share the weight tile
    (200, 4096, 14336, 128, 112, (1, 2), 2),    # 104 rounded up to 16
    (96, 6144, 4096, 64, 96, (1, 1), 1),
    (160, 6144, 4096, 128, 80, (2, 1), 1),
    (200, 2112, 7168, 128, 208, (2, 1), 3),     # 17 weight tiles: the 2x1 partner of the last is outside D
    (40, 520, 1000, 64, 48, (1, 1), 5),
    (333, 776, 1000, 64, 176, (1, 2), 2),       # two token tiles, ragged
])
def test_swap_ab_tiles_sized_to_the_rows(m, n, k, tile_m, tile_n, cluster, split_k):
    a, b = _operands(torch.bfloat16, (), m, n, k, seed=m + n)
    run, d = _run_poisoned(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=cluster, split_k=split_k, swap_ab=True)
    assert run.config.swap_ab and (run.config.tile_n, run.config.split_k) == (tile_n, split_k)
    _check(a, b, d)
    if split_k > 1:
        _repeats_exactly(run, d, 2)


@pytest.mark.parametrize("tile_m, tile_n, cluster, split_k", [
    (128, 128, (2, 1), 3),    # 3 row tiles: the last pair's second CTA is past D and reduces nothing
    (128, 128, (1, 2), 2),    # 7 column tiles: the same along N
    (64, 192, (2, 1), 4),
    (192, 128, (1, 1), 2),
    (128, 80, (2, 1), 2),     # a width of 16-wide epilogue slices, N-major
])
def test_split_k_with_clusters_and_odd_tile_counts(tile_m, tile_n, cluster, split_k):
    a, b = _operands(torch.bfloat16, (), 333, 776, 4096, seed=tile_n)
    run, d = _run_poisoned(a, b, tile_m=tile_m, tile_n=tile_n, cluster_mn=cluster, split_k=split_k, swap_ab=False)
    _check(a, b, d)
    first = _repeats_exactly(run, d, 2)
    _replay_on_a_side_stream(run, d)            # the counters were reset by every launch before
    assert torch.equal(d, first)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn])
@pytest.mark.parametrize("tile_n, cluster", [(192, (2, 1)), (128, (1, 1)), (160, (1, 2))])
def test_192_row_tiles(dtype, tile_n, cluster):
    a, b = _operands(dtype, (), 1000, 2104, 1000, seed=tile_n)
    run, d = _run_poisoned(a, b, alpha=0.5, tile_m=192, tile_n=tile_n, cluster_mn=cluster, swap_ab=False)
    assert run.config.tile_m == 192
    _check(a.float(), b.float(), d, 0.5)


@pytest.mark.parametrize("m, n, k", [(96, 4096, 14336), (160, 4096, 14336), (200, 4096, 14336), (96, 6144, 4096),
                                     (160, 6144, 4096), (384, 14336, 4096), (768, 6144, 4096), (129, 3072, 8192),
                                     (257, 2112, 7168), (1025, 4096, 4096)])
def test_the_chooser_on_mid_m_shapes(m, n, k):
    """Whatever choose_config picks where the tiles mid-M needs compete (swapped or not, split or not)."""
    a, b = _operands(torch.bfloat16, (), m, n, k, seed=k)
    run, d = _run_poisoned(a, b)
    assert run.config == hopper_gemm.choose_config(m, n, k, 1, torch.cuda.get_device_properties(0).multi_processor_count,
                                                   16, allow_swap=True)
    _check(a, b, d)


# --- tune=True (autotune.py) ---------------------------------------------------------------------------

@pytest.fixture
def small_sweep(tmp_path, monkeypatch):
    """Tuning over three configurations (compiles stay few), into a tuning file of this test's own."""
    from artifacts.kernels.hopper_gemm import autotune

    configs = [hopper_gemm.GemmConfig(64, 128, (1, 1), 1), hopper_gemm.GemmConfig(128, 256, (1, 1), 1),
               hopper_gemm.GemmConfig(64, 256, (1, 1), 2)]
    monkeypatch.setattr(autotune, "sweep", lambda *args, **kwargs: configs)
    monkeypatch.setattr(autotune, "cache_path", lambda: tmp_path / "tuning.json")
    monkeypatch.setattr(autotune, "_TUNED", {})
    return autotune, configs


@pytest.mark.parametrize("m, n, k, lead", [(1, 4096, 4096, ()), (13, 520, 200, ()), (300, 1000, 1032, ()),
                                           (40, 264, 512, (3,))])
def test_tune_measures_a_configuration_runs_it_and_keeps_it(small_sweep, monkeypatch, m, n, k, lead):
    autotune, configs = small_sweep
    a, b = _operands(torch.bfloat16, lead, m, n, k, seed=m)
    run, d = hopper_gemm.compile_gemm(a, b, tune=True)
    run()
    _check(a, b, d)
    candidates = configs + [hopper_gemm.choose_config(m, n, k, a.shape[0] if lead else 1, allow_swap=True)]
    assert (run.config.tile_m, run.config.tile_n, run.config.split_k) in {
        (c.tile_m, c.tile_n, c.split_k) for c in candidates}
    assert autotune.read_cache(autotune.cache_path())   # stored

    def untimed(*args, **kwargs):
        raise AssertionError("a tuned bucket was timed again")
    autotune._TUNED.clear()                             # a new process: the file answers, nothing is timed
    monkeypatch.setattr(hopper_gemm, "time_sweep", untimed)
    run2, d2 = hopper_gemm.compile_gemm(a, b, tune=True)
    assert run2.config == run.config
    run2()
    _check(a, b, d2)


def test_tune_under_capture_needs_a_tuned_bucket(small_sweep):
    autotune, _ = small_sweep
    a, b = _operands(torch.bfloat16, (), 8, 512, 512)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with pytest.raises(RuntimeError, match="cannot run under CUDA-graph capture"):
            with torch.cuda.graph(graph, stream=stream):
                hopper_gemm.compile_gemm(a, b, tune=True)
    torch.cuda.synchronize()
    run, d = hopper_gemm.compile_gemm(a, b, tune=True)   # tuned eagerly, then captured
    with torch.cuda.stream(stream):
        run()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured, _ = hopper_gemm.compile_gemm(a, b, out=d, tune=True)   # kept alive: the graph holds its workspace
            captured()
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(a, b, d)

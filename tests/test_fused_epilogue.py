"""The Hopper GEMM's fused epilogues without a GPU: each compiles for sm_90a (per-thread loads only
where something is read), the default kernel reads no global memory per thread, the refusals name
the value, the reference math, and the negative control's size against the gate."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import epilogue_reference, hopper_gemm
from artifacts.kernels.hopper_gemm.fused_epilogue import EpilogueSpec
from kernelwiki.harness import gates

BF16 = cutlass.BFloat16
SPECS = {"bias": EpilogueSpec(bias=True), "gelu_tanh": EpilogueSpec(activation="gelu_tanh"),
         "silu": EpilogueSpec(activation="silu"), "residual": EpilogueSpec(residual=True),
         "bias-gelu-residual": EpilogueSpec(True, "gelu_tanh", True),
         "control-bias-tile-local": EpilogueSpec(bias=True, bias_tile_local=True)}
E4M3 = cutlass.Float8E4M3FN


def _emitted(**kwargs):
    from kernelwiki.harness import compile as compile_mod

    return compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **kwargs), "sm_90a")


@pytest.mark.parametrize("name", list(SPECS))
def test_each_epilogue_compiles_without_spills(name):
    spec = SPECS[name]
    emitted = _emitted(epilogue=spec)
    assert "wgmma.mma_async.sync.aligned" in emitted.ptx
    loads = re.findall(r"\bLDG\.E\S*", emitted.sass or "")
    if emitted.sass is not None:
        assert "STSM" in emitted.sass and not re.search(r"\bSTL\b", emitted.sass)   # no register spills
        assert bool(loads) == (spec.bias or spec.residual)   # loads exactly when bias or C is read
        assert ("MUFU.EX2" in emitted.sass) == (spec.activation is not None)   # the activation's sigmoid


@pytest.mark.parametrize("kwargs", [{"d_dtype": cutlass.Float32, "ab_dtype": cutlass.TFloat32},
                                    {"ab_dtype": cutlass.Float8E4M3FN},
                                    {"m": 1, "tile_m": 64, "tile_n": 128, "cluster_mn": (1, 1)},
                                    {"tile_m": 64, "tile_n": 256, "schedule": "pingpong"}],
                         ids=["tf32-fp32-out", "fp8-in", "decode-tile", "pingpong"])
def test_fused_epilogue_with_other_types_and_tiles(kwargs):
    emitted = _emitted(epilogue=SPECS["bias-gelu-residual"], **kwargs)
    assert emitted.sass is None or not re.search(r"\bSTL\b", emitted.sass)


@pytest.mark.parametrize("spec", [EpilogueSpec(quantize=True), EpilogueSpec(True, "silu", True, True)],
                         ids=["quantize", "bias-silu-residual-quantize"])
def test_e4m3_out_quantizes_on_store(spec):
    """An e4m3 D: the saturating FP32 -> e4m3 conversion before the shared-memory store, the bias and C
    still read in bf16 (16-bit loads), no spills."""
    emitted = _emitted(d_dtype=E4M3, epilogue=spec)
    if emitted.sass is None:
        pytest.skip("no SASS disassembler")
    assert "F2FP.SATFINITE.E4M3.F32" in emitted.sass and "UTMASTG" in emitted.sass
    assert ("LDG.E.U16" in emitted.sass) == spec.bias and not re.search(r"\bSTL\b", emitted.sass)


def test_e4m3_out_needs_the_quantizing_epilogue():
    with pytest.raises(ValueError, match="D dtype Float8E4M3FN needs the quantizing epilogue"):
        hopper_gemm.HopperGemm.can_implement(BF16, E4M3, 256, 256, 256)
    hopper_gemm.HopperGemm.can_implement(BF16, E4M3, 256, 256, 256, epilogue=EpilogueSpec(quantize=True))
    with pytest.raises(ValueError, match="N=264: rows of D must be a multiple of 16 bytes"):
        hopper_gemm.HopperGemm.can_implement(BF16, E4M3, 256, 264, 256, epilogue=EpilogueSpec(quantize=True))


def test_default_kernel_reads_no_global_memory_per_thread():
    """The plain epilogue is untouched: every global access stays TMA (a default kernel that picked up
    the fused path's loads fails here)."""
    emitted = _emitted()
    if emitted.sass is None:
        pytest.skip("no SASS disassembler")
    assert not re.search(r"\bLDG\b|\bLDG\.", emitted.sass) and "MUFU.EX2" not in emitted.sass


def test_spec_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="activation='relu' unsupported"):
        EpilogueSpec(activation="relu")
    assert not EpilogueSpec().fused and EpilogueSpec(residual=True).describe() == "residual"


def test_choose_config_never_splits_for_a_fused_epilogue():
    for m, n, k in ((1, 4096, 4096), (128, 1024, 8192), (160, 4096, 14336)):
        fused = hopper_gemm.choose_config(m, n, k, allow_swap=True, fused=True)
        assert fused.split_k == 1 and not fused.swap_ab and fused.tile_n in (64, 128, 192, 256)
        assert hopper_gemm.choose_config(m, n, k, allow_split=False).split_k == 1


def test_host_refusals_name_the_value():
    """The torch-side checks of bias= / residual= / activation= / beta= (CPU tensors: they fail before
    anything reaches a GPU)."""
    torch = pytest.importorskip("torch")
    out = torch.empty(64, 256, dtype=torch.bfloat16)
    refuse = lambda match, **kw: pytest.raises(ValueError, match=match)   # noqa: E731
    args = dict(bias=None, activation=None, residual=None, beta=1.0)

    def call(out=out, out_scale=None, **kw):
        settings = {**args, **kw}
        return hopper_gemm._epilogue_operands(settings["bias"], settings["activation"], settings["residual"],
                                              settings["beta"], out_scale, out, (64, 256))
    with refuse("activation='tanh' unsupported"):
        call(activation="tanh")
    with refuse("beta=0.5 without a residual"):
        call(beta=0.5)
    with refuse(r"bias: expected shape \(256,\); got \(64,\)"):
        call(bias=torch.zeros(64, dtype=torch.bfloat16))
    with refuse("bias: dtype torch.float32 unsupported"):
        call(bias=torch.zeros(256))
    with refuse("bias: N must be the contiguous dimension"):
        call(bias=torch.zeros(512, dtype=torch.bfloat16)[::2])
    with refuse("bias overlaps out"):
        call(bias=out[0])
    with refuse(r"residual: expected shape \(64, 256\)"):
        call(residual=torch.zeros(64, 255, dtype=torch.bfloat16))
    with refuse("residual: N must be the contiguous dimension"):
        call(residual=torch.zeros(256, 64, dtype=torch.bfloat16).t())
    with refuse("residual overlaps out without being out"):
        call(residual=torch.cat([out, out])[1:65])
    with refuse("residual: stride 260 .* not a multiple of 16 bytes"):
        call(residual=torch.zeros(64, 260, dtype=torch.bfloat16)[:, :256])
    with refuse("bias: data_ptr .* is not 16-byte aligned"):
        call(bias=torch.zeros(257, dtype=torch.bfloat16)[1:])
    fp8_out = torch.empty(64, 256, dtype=torch.float8_e4m3fn)
    with refuse("out_scale=None with out dtype torch.float8_e4m3fn"):
        call(out=fp8_out)
    with refuse("out_scale=2.0 with out dtype torch.bfloat16"):
        call(out_scale=2.0)
    with refuse("out_scale=0.0: the scale of an e4m3 out must be positive"):
        call(out=fp8_out, out_scale=0.0)
    with refuse("bias: dtype torch.float8_e4m3fn unsupported; the epilogue reads bias in torch.bfloat16"):
        call(out=fp8_out, out_scale=1.0, bias=torch.zeros(256, dtype=torch.float8_e4m3fn))


def test_reference_activations():
    x = np.array([-20.0, -1.0, 0.0, 1.0, 3.0])
    # GELU (tanh form) and SiLU at known points (closed forms evaluated independently)
    gelu = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in x]
    silu = [v / (1 + math.exp(-v)) for v in x]
    np.testing.assert_allclose(epilogue_reference.activate(x, "gelu_tanh", np), gelu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(epilogue_reference.activate(x, "silu", np), silu, rtol=1e-12, atol=1e-12)
    assert abs(epilogue_reference.activate(np.array([1.0]), "gelu_tanh", np)[0] - 0.8411919906082768) < 1e-12
    with pytest.raises(ValueError, match="activation='gelu' unsupported"):
        epilogue_reference.activate(x, "gelu", np)


def test_kernel_sigmoid_form_matches_the_reference():
    """The kernel's form (x * sigmoid(2u) for GELU, one exp2 and a division) equals the reference's
    tanh form in FP32 to FP32 rounding, including large |x| (no NaN where exp2 overflows)."""
    x = np.linspace(-60, 60, 20001, dtype=np.float32)
    with np.errstate(over="ignore"):
        sigmoid = lambda z: np.float32(1) / (np.float32(1) + np.exp2(-z * np.float32(math.log2(math.e))))  # noqa: E731
        u = x * (x * x * np.float32(0.044715) + 1) * np.float32(math.sqrt(2 / math.pi))
        gelu, silu = x * sigmoid(2 * u), x * sigmoid(x)
    for name, got in (("gelu_tanh", gelu), ("silu", silu)):
        want = epilogue_reference.activate(x.astype(np.float64), name, np)
        assert not np.isnan(got).any()
        assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-5


def test_fused_reference_order():
    """act(alpha * product + bias) + beta * residual: bias after alpha and before the activation,
    the residual after it."""
    product, bias, residual = np.array([[2.0, -4.0]]), np.array([1.0, 2.0]), np.array([[10.0, 20.0]])
    got = epilogue_reference.fused_epilogue(product, np, 0.5, bias, "silu", residual, beta=0.25)
    x = 0.5 * product + bias
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)) + 0.25 * residual)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round FP32 to bf16 (nearest even) and back: the output's rounding in the unfused baseline."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def _probe():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "probes" / "probe-fused-epilogue" / "fused_epilogue_probe.py"
    spec = importlib.util.spec_from_file_location("fused_epilogue_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("bug, low, high", [("tile-local", 1.5, 10), ("dropped", 1, 10), ("none", 0, 1)])
def test_negative_control_misses_by_a_few_times_the_gate(bug, low, high):
    """The control's bug (bias indexed by the column inside its 64-wide tile, right for 1 of 64 column
    tiles) in NumPy at the probe's bias scale, against the gate derived like the probe's: DERIVED_FACTOR x
    the error of the unfused bf16 computation (the GEMM rounded to bf16, the bias added, rounded again).
    It must land between 1.5 and 10 times the gate; a bias dropped altogether fails it too; the correct
    fused result (one rounding) passes."""
    rng = np.random.default_rng(0)
    m, n, k, tile_n = 16, 4096, 256, 64
    product = (rng.standard_normal((m, k)) @ rng.standard_normal((n, k)).T).astype(np.float32)
    bias = _bf16((rng.standard_normal(n) * _probe().BIAS_SCALE * math.sqrt(k)).astype(np.float32))
    reference = product.astype(np.float64) + bias
    unfused = _bf16(_bf16(product) + bias)
    gate = gates.DERIVED_FACTOR * gates.relative_error(unfused, reference)
    wrong_bias = {"tile-local": bias[np.arange(n) % tile_n], "dropped": 0.0, "none": bias}[bug]
    ratio = gates.relative_error(_bf16(product + wrong_bias), reference) / gate
    assert low < ratio < high, ratio


def test_probe_epilogue_names():
    probe = _probe()
    assert probe.parts("bias-gelu_tanh") == ("gelu_tanh", True, False, False)
    assert probe.parts("bias-gelu_tanh-e4m3") == ("gelu_tanh", True, False, True)
    assert probe.parts("residual") == (None, False, True, False)
    with pytest.raises(ValueError, match="epilogue 'gelu' unknown"):
        probe.parts("gelu")
    assert probe._gemm_probe().accumulation_floor(4096) > 0   # probe-hopper-gemm's helpers load by path
    cases = probe.PROBE.spec["cases"]
    assert {c["params"]["epilogue"] for c in cases} == set(probe.EPILOGUES)

"""probe-fused-epilogue: our Hopper GEMM with the epilogue fused (bias, GELU-tanh, SiLU, residual add)
against the same math done unfused - our GEMM then a torch op, cuBLAS then a torch op, and
torch.compile of the unfused expression - on Llama-3-8B MLP-up and attention-out shapes.

Each case: bf16 normal operands (probe-hopper-gemm's _inputs: A (M, K), B (N, K), the FP32 product
of the same values as the reference's base), bias = BIAS_SCALE x sqrt(K) x normal (N,), residual =
sqrt(K) x normal (M, N) (the product's own scale); the reference is epilogue_reference.fused_epilogue
in FP32, the gate's tolerance derived from the error of cuBLAS + the torch op in bf16 (the unfused
computation: two bf16 roundings where ours has one), outputs poisoned first. Every candidate is
gated; then all are timed in one ctx.bench (CUDA graphs, shuffled order, input sets rotated past
3x L2 for short kernels). Headline: ours fused against the fastest correct of cuBLAS + op and
torch.compile; ours + op (our own unfused) is kept beside as the fusion's gain.

Run through the runner: kernelwiki probe run --probe probe-fused-epilogue [--compile-only]
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe
from kernelwiki.harness.timing import bound

from artifacts.kernels.hopper_gemm import epilogue_reference, hopper_gemm
from artifacts.kernels.hopper_gemm.fused_epilogue import EpilogueSpec

BIAS_SCALE = 0.02
"""The bias's RMS over the product's: small beside the activations, as trained biases are, and large
enough that a bias read from the wrong columns (the control) or dropped misses the gate by a few times."""
RESIDUAL_SCALE = 1.0
"""The residual stream's RMS over the product's."""
EPILOGUES = {"bias": ("bias",), "bias-gelu_tanh": ("bias", "gelu_tanh"), "silu": ("silu",),
             "residual": ("residual",), "bias-gelu_tanh-e4m3": ("bias", "gelu_tanh", "e4m3")}
E4M3_MAX = 448.0
SCALE_HEADROOM = 1.25
"""An e4m3 case's per-tensor scale: the checked set's amax x SCALE_HEADROOM / 448 (room for the
rounding of the unfused path, as delayed scaling leaves room for the next step's amax)."""
COMPILE_BUDGET_S = 40.0   # torch.compile is skipped (and says so) once its compiles took this long in the run
PROBE = Probe(__file__)
_compiled: dict = {}
_compile_seconds = [0.0]


def _load(name: str, path):
    """The module of a file by path, registered under `name` (once)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _gemm_probe():
    """probe-hopper-gemm's script as a module, for its input and gate helpers (_inputs, accumulation_floor);
    its sibling held_out, which it imports by name, is loaded first from the same folder."""
    folder = REPO_ROOT / "probes" / "probe-hopper-gemm"
    _load("held_out", folder / "held_out.py")
    return _load("hopper_gemm_probe", folder / "hopper_gemm_probe.py")


def parts(epilogue: str) -> tuple[str | None, bool, bool, bool]:
    """(activation, bias?, residual?, e4m3 out?) of an epilogue name of EPILOGUES."""
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue {epilogue!r} unknown; use one of {', '.join(EPILOGUES)}")
    named = EPILOGUES[epilogue]
    activation = next((p for p in named if p in epilogue_reference.ACTIVATIONS), None)
    return activation, "bias" in named, "residual" in named, "e4m3" in named


def torch_op(epilogue: str, out_scale: float | None):
    """The unfused epilogue as eager torch ops on the GEMM's bf16 output y, in place where torch allows:
    fn(y, bias, residual) -> the result (for an e4m3 epilogue, y / out_scale cast to e4m3)."""
    import torch
    import torch.nn.functional as F

    activation, has_bias, has_residual, quantize = parts(epilogue)

    def op(y, bias, residual):
        if has_bias:
            y = y.add_(bias)
        if activation == "gelu_tanh":
            y = F.gelu(y, approximate="tanh")
        elif activation == "silu":
            y = F.silu(y, inplace=True)
        if has_residual:
            y = y.add_(residual)
        if quantize:
            y = y.mul_(1.0 / out_scale).to(torch.float8_e4m3fn)
        return y
    return op


def _torch_compiled(epilogue: str, out_scale: float | None):
    """torch.compile of the whole unfused expression (matmul + op), one per epilogue, M dynamic; None
    (with the reason) when it does not compile here or the run's compile budget is spent."""
    import torch

    if epilogue in _compiled:
        return _compiled[epilogue]
    if _compile_seconds[0] > COMPILE_BUDGET_S:
        return None, f"skipped: torch.compile took {_compile_seconds[0]:.0f} s in this run already"
    op = torch_op(epilogue, out_scale)
    _compiled[epilogue] = (torch.compile(lambda a, b, bias, residual: op(a @ b.t(), bias, residual), dynamic=True),
                           None)
    return _compiled[epilogue]


def _operands(m: int, n: int, k: int, seed: int, epilogue: str, with_reference: bool):
    """(a, b, bias, residual, FP32 reference or None) of one input set."""
    import torch

    _, has_bias, has_residual, _ = parts(epilogue)
    a, b, _, _, product = _gemm_probe()._inputs("bf16", m, n, k, seed, with_reference=with_reference)
    g = torch.Generator(device="cuda").manual_seed(seed + 17)
    scale = math.sqrt(k)
    bias = (torch.randn(n, generator=g, device="cuda") * (BIAS_SCALE * scale)).bfloat16() if has_bias else None
    residual = (torch.randn(m, n, generator=g, device="cuda") * (RESIDUAL_SCALE * scale)).bfloat16() \
        if has_residual else None
    reference = None
    if with_reference:
        activation = parts(epilogue)[0]
        reference = epilogue_reference.fused_epilogue(
            product, torch, bias=None if bias is None else bias.float(), activation=activation,
            residual=None if residual is None else residual.float())
    return a, b, bias, residual, reference


def _fused_kwargs(epilogue: str, bias, residual, out_scale: float | None) -> dict:
    import torch

    activation, _, _, quantize = parts(epilogue)
    fp8 = {"out_dtype": torch.float8_e4m3fn, "out_scale": out_scale} if quantize else {}
    return {"bias": bias, "activation": activation, "residual": residual, **fp8}


def _launches(a, b, bias, residual, epilogue: str, compiled, out_scale: float | None) -> tuple[dict, dict]:
    """({name: launch}, {name: output}) of every candidate on one input set."""
    import torch

    op = torch_op(epilogue, out_scale)
    fused, d = hopper_gemm.compile_gemm(a, b, **_fused_kwargs(epilogue, bias, residual, out_scale))
    plain, y_ours = hopper_gemm.compile_gemm(a, b)
    y_cublas = y_ours.new_empty(y_ours.shape)
    outputs = {"ours fused": d}

    def ours_then_op():
        plain()
        outputs["ours + torch op"] = op(y_ours, bias, residual)

    def cublas_then_op():
        torch.matmul(a, b.t(), out=y_cublas)
        outputs["cuBLAS + torch op"] = op(y_cublas, bias, residual)

    launches = {"ours fused": fused, "ours + torch op": ours_then_op, "cuBLAS + torch op": cublas_then_op}
    if compiled is not None:
        def compiled_call():
            outputs["torch.compile"] = compiled(a, b, bias, residual)
        launches["torch.compile"] = compiled_call
    return launches, outputs


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    params = case["params"]
    m, n, k = (int(x) for x in params["shape"].split("x"))
    epilogue = params["epilogue"]
    a, b, bias, residual, reference = _operands(m, n, k, ctx.seed, epilogue, with_reference=True)
    quantize = parts(epilogue)[3]
    out_scale = float(reference.abs().max()) * SCALE_HEADROOM / E4M3_MAX if quantize else None
    compiled, compile_note = _torch_compiled(epilogue, out_scale)
    notes = {"torch.compile": {"skipped": compile_note}} if compile_note else {}
    launches, outputs = _launches(a, b, bias, residual, epilogue, compiled, out_scale)
    gates.poison(outputs["ours fused"].view(torch.uint8) if quantize else outputs["ours fused"])   # 0xFF: e4m3 NaN
    for name, launch in list(launches.items()):
        started = time.monotonic()
        try:
            launch()
        except Exception as err:   # noqa: BLE001  (torch.compile that does not build here is recorded, not fatal)
            if name != "torch.compile":
                raise
            launches.pop(name)
            notes["torch.compile"] = {"skipped": f"failed: {type(err).__name__}: {str(err)[:200]}"}
            _compiled[epilogue] = (None, notes["torch.compile"]["skipped"])   # not tried again in this run
        if name == "torch.compile":
            _compile_seconds[0] += time.monotonic() - started
    torch.cuda.synchronize()
    values = {name: out.float() * out_scale if quantize else out.float() for name, out in outputs.items()}
    tolerance = gates.reference_tolerance(values["cuBLAS + torch op"], reference,
                                          floor=_gemm_probe().accumulation_floor(k))
    dtype = "e4m3" if quantize else "bf16"
    checks = {name: gates.check(out, reference, dtype, **tolerance) for name, out in values.items()}
    correctness = dict(checks["ours fused"])
    correctness["baselines_passed"] = {name: c["passed"] for name, c in checks.items() if name != "ours fused"}
    del reference, outputs, values

    def make_set(i: int) -> dict:
        if i == 0:
            return launches
        x, w, bx, rx, _ = _operands(m, n, k, ctx.seed + 1000 * i, epilogue, with_reference=False)
        fresh, _ = _launches(x, w, bx, rx, epilogue, compiled if "torch.compile" in launches else None, out_scale)
        return fresh

    # what the fused launch touches (the smallest over the candidates): A, B, bias, residual, D
    set_bytes = 2 * (m * k + n * k + (n if bias is not None else 0) + (m * n if residual is not None else 0)) + \
        m * n * (1 if quantize else 2)
    timing = ctx.bench(bound(list(launches)), make_set, set_bytes, iters=20, warmup=3)
    flops = 2 * m * n * k
    tflops = {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    baselines = {name: tflops.get(name) for name in ("cuBLAS + torch op", "torch.compile")}
    correct = {name: checks[name]["passed"] for name in baselines if name in checks}
    metrics = {"epilogue": epilogue, "config": launches["ours fused"].config.describe(),
               "d_round_trip_bytes": 4 * m * n,   # D written in bf16 by the GEMM and read back by the op
               **({"out_scale": out_scale} if quantize else {}),
               "torch_compile_seconds_so_far": round(_compile_seconds[0], 1)}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("tflops", tflops["ours fused"], "TFLOP/s", baselines, correct=correct,
                                   peak_key="bf16", context={"ours + torch op": tflops["ours + torch op"]},
                                   notes=notes)}


def control_bias_tile_local(ctx: Context) -> dict:
    """Ours with the bias read by the column inside its output tile (the tile's offset forgotten):
    right for the first column of tiles only. 256x4096x4096 (64-wide tiles: 63 of 64 column tiles wrong),
    gated like a case: about 3x the gate at BIAS_SCALE."""
    import torch

    m, n, k = 256, 4096, 4096
    a, b, bias, _, reference = _operands(m, n, k, ctx.seed + 1, "bias", with_reference=True)
    run, d = hopper_gemm.compile_gemm(a, b, bias=bias, bias_tile_local=True)
    gates.poison(d)
    run()
    unfused = torch.matmul(a, b.t()).add_(bias)
    torch.cuda.synchronize()
    result = gates.check(d.float(), reference, "bf16", **gates.reference_tolerance(
        unfused.float(), reference, floor=_gemm_probe().accumulation_floor(k)))
    result.update(shape=f"{m}x{n}x{k}", config=run.config.describe())
    return result


NEGATIVE_CONTROLS = {"bias-tile-local-column": control_bias_tile_local}


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Each fused epilogue in the configurations the cases use (128x256 in a 2x1 cluster, the 64-row
    decode tile) and the e4m3 quantize-on-store, with fake tensors: the loads of bias and C, the
    activation's exp2, the saturating e4m3 conversion."""
    specs = [EpilogueSpec(bias=True), EpilogueSpec(True, "gelu_tanh"), EpilogueSpec(activation="silu"),
             EpilogueSpec(residual=True)]
    emitted = compile_mod.from_cute(hopper_gemm.compile_for(arch, epilogue=EpilogueSpec(True, "gelu_tanh", True)), arch)
    emitted.extend(compile_mod.from_cute(hopper_gemm.compile_for(
        arch, d_dtype=hopper_gemm.cutlass.Float8E4M3FN, epilogue=EpilogueSpec(True, "gelu_tanh", quantize=True)), arch))
    for spec in specs:
        emitted.extend(compile_mod.from_cute(
            hopper_gemm.compile_for(arch, m=16, tile_m=64, tile_n=128, cluster_mn=(1, 1), epilogue=spec), arch))
    return emitted


if __name__ == "__main__":
    PROBE.main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, compile=compile_kernel)

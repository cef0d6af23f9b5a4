"""probe-flash-attention-4: the pinned flash-attn-4 wheel on Hopper against cuDNN SDPA.

For each case (head dim, sequence length at 16k tokens per batch, causal or not, forward or
backward) the probe:
  1. draws q, k, v (and dO) from the normal distribution, shape (batch, seqlen, heads, head_dim);
  2. computes the reference in FP32 (PyTorch SDPA, memory-efficient backend, FP32 inputs);
  3. checks FA4's bf16 output (or gradients) with FlashAttention's own rule through the harness:
     each tensor's relative and largest element error against the reference at most twice that
     of PyTorch's bf16 SDPA (gates.reference_tolerance);
  4. times FA4, cuDNN SDPA and PyTorch's flash SDPA with ctx.bench (CUDA graphs; a backward as
     forward+backward minus forward, since autograd cannot capture a backward without its forward).
FLOPs: forward 4*b*h*s^2*d (half of it when causal), backward 2.5x the forward.

Run through the runner: kernelwiki probe run --probe probe-flash-attention-4
"""

from __future__ import annotations

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

TOKENS = 16384
ERROR_FACTOR = 2.0  # FA4 error <= 2 x PyTorch's own bf16 error, as in FlashAttention's tests


def sdpa(q, k, v, causal: bool, backend, scale=None):
    """PyTorch SDPA on (batch, seqlen, heads, dim) tensors with one backend."""
    import torch
    from torch.nn.attention import sdpa_kernel

    backends = backend if isinstance(backend, list) else [backend]
    with sdpa_kernel(backends):
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, scale=scale)
    return out.transpose(1, 2)


def fa4(q, k, v, causal: bool, scale=None):
    from flash_attn.cute.interface import flash_attn_func

    return flash_attn_func(q, k, v, causal=causal, softmax_scale=scale)[0]


def make_inputs(params: dict, ctx: Context, requires_grad: bool, index: int = 0):
    """q, k, v, dout of input set `index` (normal bf16, (batch, seqlen, heads, head_dim))."""
    import torch

    d, s = params["head_dim"], params["seqlen"]
    b, h = TOKENS // s, 2048 // d
    gen = ctx.generator(params["seqlen"] + params["head_dim"] + 100003 * index)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    if requires_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v, dout


def check(candidate: list, pytorch: list, reference: list, names: list[str]) -> dict:
    """FlashAttention's rule through the harness: each tensor (output, or dq/dk/dv) within
    ERROR_FACTOR x PyTorch's own bf16 error against the FP32 reference (gates.reference_tolerance,
    on the relative and the largest element error)."""
    return gates.combine({name: gates.check(got, ref, "bf16", **gates.reference_tolerance(base, ref, k=ERROR_FACTOR))
                          for name, got, base, ref in zip(names, candidate, pytorch, reference)})


def implementations(causal: bool) -> dict:
    """{name: forward(q, k, v)} for FA4 and the two SDPA backends."""
    from torch.nn.attention import SDPBackend

    return {"fa4": lambda q, k, v: fa4(q, k, v, causal),
            "cudnn": lambda q, k, v: sdpa(q, k, v, causal, SDPBackend.CUDNN_ATTENTION),
            "flash-sdpa": lambda q, k, v: sdpa(q, k, v, causal, SDPBackend.FLASH_ATTENTION)}


def run_case(case: dict, ctx: Context) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    p = case["params"]
    causal, backward = p["causal"], p["direction"] == "bwd"
    q, k, v, dout = make_inputs(p, ctx, requires_grad=backward)
    q32, k32, v32 = (t.detach().float().requires_grad_(backward) for t in (q, k, v))
    ref = sdpa(q32, k32, v32, causal, [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    out_fa = fa4(q, k, v, causal)
    out_pt = sdpa(q, k, v, causal, SDPBackend.FLASH_ATTENTION)
    out_cudnn = _attempt(lambda: sdpa(q, k, v, causal, SDPBackend.CUDNN_ATTENTION))
    if backward:
        ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
        fa_grads = torch.autograd.grad(out_fa, (q, k, v), dout)
        pt_grads = torch.autograd.grad(out_pt, (q, k, v), dout)
        correctness = check(list(fa_grads), list(pt_grads), list(ref_grads), ["dq", "dk", "dv"])
        cudnn_grads = None if out_cudnn is None else _attempt(lambda: torch.autograd.grad(out_cudnn, (q, k, v), dout))
        if cudnn_grads is not None:   # the baseline passes the same gate before it can be the headline
            correctness["cudnn_passed"] = check(list(cudnn_grads), list(pt_grads), list(ref_grads),
                                                ["dq", "dk", "dv"])["passed"]
        del ref_grads, fa_grads, pt_grads, cudnn_grads
    else:
        correctness = check([out_fa], [out_pt], [ref.detach()], ["o"])
        if out_cudnn is not None:
            correctness["cudnn_passed"] = check([out_cudnn], [out_pt], [ref.detach()], ["o"])["passed"]
    del ref, q32, k32, v32, out_fa, out_pt, out_cudnn

    # Timed by ctx.bench, each candidate captured in a CUDA graph. A backward cannot be captured
    # apart from its forward (autograd runs each backward op on its forward op's stream), so a
    # backward case times forward and forward+backward of each implementation, and the backward
    # is their difference.
    available = {}
    for name, forward in implementations(causal).items():
        try:
            out = forward(q, k, v)
            if backward:
                torch.autograd.grad(out, (q, k, v), dout)
        except RuntimeError as err:  # a backend without this configuration is reported, not fatal
            print(f"  {name} unavailable: {str(err).splitlines()[0][:200]}", flush=True)
            continue
        available[name] = forward
    candidates = {}
    for name, forward in available.items():
        candidates[f"{name} fwd" if backward else name] = lambda s, forward=forward: forward(s[0], s[1], s[2])
        if backward:
            candidates[f"{name} fwd+bwd"] = (lambda s, forward=forward:
                                              torch.autograd.grad(forward(s[0], s[1], s[2]), s[:3], s[3]))
    # thread_local capture for backward: autograd's worker thread runs the backward ops, and a CUDA
    # call of another thread invalidates a global-mode capture. A backward's input sets are fresh
    # leaves, never the checked q, k, v (which went through autograd eagerly above): with them the
    # first backward case's capture failed in every run ("operation would make the legacy stream
    # depend on a capturing blocking stream", found on the H200 on 2026-12-01), with fresh leaves it
    # captured; why only the first backward case's checked leaves fail is not known
    checked = (q, k, v, dout)
    timing = ctx.bench(candidates, lambda i: make_inputs(p, ctx, backward, i + 1) if backward else
                       (checked if i == 0 else make_inputs(p, ctx, backward, i)),
                       4 * q.numel() * q.element_size(), iters=20, warmup=3,   # q, k, v, O
                       capture_error_mode="thread_local" if backward else "global")
    if backward:
        ms = {name: timing[f"{name} fwd+bwd"]["median_ms"] - timing[f"{name} fwd"]["median_ms"] for name in available}
    else:
        ms = {name: timing[name]["median_ms"] for name in available}
    b, s, h, d = q.shape
    flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    tflops = {name: flops / (t * 1e-3) / 1e12 for name, t in ms.items()}
    metrics = {f"{name}_tflops": round(value, 2) for name, value in tflops.items()}
    # the headline: the fastest correct of cuDNN SDPA (gated above) and flash SDPA (the gate's own
    # reference implementation, so correct by construction)
    names = {"cudnn": "cuDNN SDPA", "flash-sdpa": "flash SDPA"}
    baselines = {names[name]: tflops.get(name) for name in names}
    correct = {"cuDNN SDPA": bool(correctness.get("cudnn_passed")), "flash SDPA": True}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("tflops", tflops["fa4"], "TFLOP/s", baselines, correct=correct, peak_key="bf16")}


def _attempt(call):
    """call()'s result, or None where the backend has no kernel for this configuration."""
    try:
        return call()
    except RuntimeError as err:
        print(f"  unavailable: {str(err).splitlines()[0][:200]}", flush=True)
        return None


CONTROL_SCALE = 1.01
"""The controls' bug: FA4 run with a softmax scale 1% high (what a log2(e) constant off in its third
digit does to an exp2-based softmax). A NumPy model puts the forward's error at about 3x the gate;
the 1.25x of earlier records landed near 100x, which a gate ten times looser would still catch."""


def control_forward(ctx: Context) -> dict:
    """Forward, head dim 128, 2048 tokens, not causal: O with the 1% scale error."""
    from torch.nn.attention import SDPBackend

    params = {"head_dim": 128, "seqlen": 2048}
    q, k, v, _ = make_inputs(params, ctx, requires_grad=False)
    ref = sdpa(q.float(), k.float(), v.float(), False, [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    wrong = fa4(q, k, v, False, scale=CONTROL_SCALE * 128 ** -0.5)
    return check([wrong], [sdpa(q, k, v, False, SDPBackend.FLASH_ATTENTION)], [ref], ["o"])


def control_backward(ctx: Context) -> dict:
    """Backward, head dim 128, 2048 tokens, not causal: dq, dk, dv of FA4 with the 1% scale error
    against the FP32 gradients, gated like the bwd cases."""
    import torch
    from torch.nn.attention import SDPBackend

    params = {"head_dim": 128, "seqlen": 2048}
    q, k, v, dout = make_inputs(params, ctx, requires_grad=True)
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    ref = sdpa(q32, k32, v32, False, [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
    pt_grads = torch.autograd.grad(sdpa(q, k, v, False, SDPBackend.FLASH_ATTENTION), (q, k, v), dout)
    wrong = torch.autograd.grad(fa4(q, k, v, False, scale=CONTROL_SCALE * 128 ** -0.5), (q, k, v), dout)
    return check(list(wrong), list(pt_grads), list(ref_grads), ["dq", "dk", "dv"])


NEGATIVE_CONTROLS = {"forward-scale": control_forward, "backward-scale": control_backward}


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=NEGATIVE_CONTROLS)

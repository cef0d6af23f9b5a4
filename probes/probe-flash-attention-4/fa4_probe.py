"""probe-flash-attention-4: the pinned flash-attn-4 wheel on Hopper against cuDNN SDPA.

For each case (head dim, sequence length at 16k tokens per batch, causal or not, forward or
backward) the probe:
  1. draws q, k, v (and dO) from the normal distribution, shape (batch, seqlen, heads, head_dim);
  2. computes the reference in FP32 (PyTorch SDPA, memory-efficient backend, FP32 inputs);
  3. checks FA4's bf16 output (or gradients) with FlashAttention's own rule: its max error
     against the reference is at most twice that of PyTorch's bf16 SDPA, plus a tiny atol;
  4. times FA4, cuDNN SDPA and PyTorch's flash SDPA interleaved with L2 flushed.
FLOPs: forward 4*b*h*s^2*d (half of it when causal), backward 2.5x the forward.

Run through the runner: kernelwiki probe run --probe probe-flash-attention-4
"""

from __future__ import annotations

from kernelwiki.harness.probe import Context, Probe

TOKENS = 16384
ERROR_FACTOR = 2.0  # FA4 error <= 2 x PyTorch's own bf16 error (+ atol), as in FlashAttention's tests
ATOL = 1e-5


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


def make_inputs(params: dict, ctx: Context, requires_grad: bool):
    import torch

    d, s = params["head_dim"], params["seqlen"]
    b, h = TOKENS // s, 2048 // d
    gen = ctx.generator(params["seqlen"] + params["head_dim"])
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    if requires_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    return q, k, v, dout


def gate(candidate: list, pytorch: list, reference: list) -> dict:
    """FlashAttention's rule over one or more tensors (output, or dq/dk/dv)."""
    import torch

    errors, limits, nan = [], [], 0
    for got, base, ref in zip(candidate, pytorch, reference):
        nan += int(torch.isnan(got).sum().item())
        err = (got.float() - ref).abs().max().item()
        base_err = (base.float() - ref).abs().max().item()
        errors.append(err)
        limits.append(ERROR_FACTOR * base_err + ATOL)
    passed = nan == 0 and all(e <= lim for e, lim in zip(errors, limits))
    return {"passed": passed, "max_abs_err": max(errors), "tolerance": ERROR_FACTOR,
            "rule": f"max|fa4 - ref| <= {ERROR_FACTOR} x max|pytorch_bf16 - ref| + {ATOL} for every tensor",
            "errors": [round(e, 6) for e in errors], "limits": [round(x, 6) for x in limits],
            "all_written": nan == 0, "rel_err": None}


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
    if backward:
        ref_grads = torch.autograd.grad(ref, (q32, k32, v32), dout.float())
        fa_grads = torch.autograd.grad(out_fa, (q, k, v), dout, retain_graph=True)
        pt_grads = torch.autograd.grad(out_pt, (q, k, v), dout, retain_graph=True)
        correctness = gate(list(fa_grads), list(pt_grads), list(ref_grads))
    else:
        correctness = gate([out_fa], [out_pt], [ref.detach()])
    del ref, q32, k32, v32

    candidates = {}
    for name, fn in (("fa4", lambda: fa4(q, k, v, causal)),
                     ("cudnn", lambda: sdpa(q, k, v, causal, SDPBackend.CUDNN_ATTENTION)),
                     ("flash-sdpa", lambda: sdpa(q, k, v, causal, SDPBackend.FLASH_ATTENTION))):
        try:
            out = fn()
        except RuntimeError as err:  # a backend without this configuration is reported, not fatal
            print(f"  {name} unavailable: {str(err).splitlines()[0][:200]}", flush=True)
            continue
        if backward:
            candidates[name] = lambda out=out: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        else:
            candidates[name] = fn
    timing = ctx.timer(warmup=3, iters=20).compare(candidates)
    b, s, h, d = q.shape
    flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    tflops = {name: flops / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    baseline = ("cuDNN SDPA", tflops["cudnn"]) if "cudnn" in tflops else ("flash SDPA", tflops.get("flash-sdpa"))
    return {"correctness": correctness, "timing": timing,
            "metrics": {f"{name}_tflops": round(value, 2) for name, value in tflops.items()},
            "baselines": [{"name": name, "value": round(value, 3), "ratio": round(tflops["fa4"] / value, 4)}
                          for name, value in tflops.items() if name != "fa4"],
            "headline": ctx.headline("tflops", tflops["fa4"], "TFLOP/s", peak_key="bf16", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    from torch.nn.attention import SDPBackend

    params = {"head_dim": 128, "seqlen": 2048}
    q, k, v, _ = make_inputs(params, ctx, requires_grad=False)
    ref = sdpa(q.float(), k.float(), v.float(), False, [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    wrong = fa4(q, k, v, False, scale=1.25 * 128 ** -0.5)  # the deliberate error: softmax scale 1.25x
    return gate([wrong], [sdpa(q, k, v, False, SDPBackend.FLASH_ATTENTION)], [ref])


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)

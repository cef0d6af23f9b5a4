"""Row-wise memory-bound kernels for Hopper in CuTe DSL: RMSNorm, residual add + RMSNorm, LayerNorm
and softmax forward (bf16, fp16 or fp32 in and out, fp32 math), rows staged through shared memory, one
or several rows per CTA or one row per cluster; see rowwise_common for the shared row plan.

`from artifacts.kernels.rowwise import rmsnorm_forward, add_rmsnorm_forward, layernorm_forward,
softmax_forward`. The names resolve on first use (PEP 562), so `python -m artifacts.kernels.rowwise.softmax`
runs the module without importing it twice.
"""

_EXPORTS = {"NormForward": "norm", "rmsnorm_forward": "norm", "add_rmsnorm_forward": "norm",
            "layernorm_forward": "norm", "SoftmaxForward": "softmax", "softmax_forward": "softmax"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)

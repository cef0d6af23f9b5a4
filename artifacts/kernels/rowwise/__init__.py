"""Row-wise memory-bound kernels for Hopper in CuTe DSL: RMSNorm and softmax forward (bf16/fp16 in and
out, fp32 math), one row per CTA or per cluster; see rowwise_common for the shared row plan."""

from .rmsnorm import RMSNormForward, rmsnorm_forward
from .softmax import SoftmaxForward, softmax_forward

__all__ = ["RMSNormForward", "SoftmaxForward", "rmsnorm_forward", "softmax_forward"]

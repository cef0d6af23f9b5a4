"""Small-M GEMM (GEMV) on the CUDA cores: FP32 FMA for bf16, dp4a for int8 (gemv.cu, gemv.py)."""

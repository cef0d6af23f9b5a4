"""Teaching variants of fp8_blockscale_gemm: simpler, slower, standalone on purpose (the production kernel is
the package above)."""

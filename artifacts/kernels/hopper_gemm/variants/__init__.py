"""Teaching variants of hopper_gemm: simpler, slower, standalone on purpose (the production kernel is
the package above)."""

"""Our Hopper GEMM: warp-specialized, persistent wgmma in CuTe DSL (bf16, fp16, tf32, fp8), with the
shared Hopper pieces (sm90_common) the FP8 GEMM also uses.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

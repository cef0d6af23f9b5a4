"""Blackwell (sm_100a) GEMMs in CuTe DSL: a tcgen05/TMEM bf16 GEMM and an NVFP4 block-scaled GEMM.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

"""Block-scaled FP8 GEMM for Hopper (DeepGEMM-style 1x128 / 128x128 scales, normal, contiguous and
masked grouped layouts), in CuTe DSL; shares the Hopper pieces of ..hopper_gemm.sm90_common.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

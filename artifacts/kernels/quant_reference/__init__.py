"""Reference quantizers for the FP8 and block-scaled formats (NumPy, float64 math): element rounding
and bit codes (E4M3, E5M2, E2M1, UE8M0, UE4M3), MXFP8/MXFP4/NVFP4 blocks, the scale-factor byte order
tcgen05 reads, and the FP8 GEMM scaling recipes. Plain math that runs anywhere (CI has no torch); the
probes move the results to the GPU for the GEMMs.

PROVENANCE.yaml lists the files."""

"""wgmma in isolation: one CUDA C++ kernel per configuration (inline PTX), built by nvcc for sm_90a.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

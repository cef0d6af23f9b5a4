"""The shared probe harness (DESIGN section 4): every probe measures through these modules.

- `env`      device and toolchain fingerprint, GPU detection without importing torch
- `gates`    the one tolerance table and the correctness gate (poisoned outputs, NaN never passes)
- `timing`   the one timing protocol (`bench`: short kernels as many launches in one CUDA graph over
             rotated input sets, long ones as a graph replay after an L2 read sweep), clocks recorded
- `peaks`    datasheet peaks and the ceilings measured by probe-calibration
- `shapes`   GEMM shapes of real model layers, drawn by a seed for held-out sets
- `compile`  emitted PTX/SASS scanning, nvcc and nvdisasm helpers (compile-only mode)
- `probe`    the entry point a probe script calls: argument parsing, cases, negative control, output

May import kernelwiki.model only: probe code on a GPU machine imports it.
"""

"""The shared probe harness (DESIGN section 4): every probe measures through these modules.

- `env`      device and toolchain fingerprint, GPU detection without importing torch
- `gates`    the one tolerance table and the correctness gate (poisoned outputs, NaN never passes)
- `timing`   CUDA-event timing with L2 flushed, baselines interleaved, clocks recorded
- `peaks`    datasheet peaks and the ceilings measured by probe-calibration
- `compile`  emitted PTX/SASS scanning, nvcc and nvdisasm helpers (compile-only mode)
- `probe`    the entry point a probe script calls: argument parsing, cases, negative control, output

May import kernelwiki.model only: probe code on a GPU machine imports it.
"""

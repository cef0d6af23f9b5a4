"""Code the wiki serves: our kernels (artifacts.kernels) and, beside them as data, the run records
(artifacts/evidence). The repository root is the import root: `from artifacts.kernels.hopper_gemm import ...`."""

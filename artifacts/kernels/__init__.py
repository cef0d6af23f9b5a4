"""Our own complete kernels, one package per kernel (its PROVENANCE.yaml lists the files and pins any
upstream code it relies on). Inside a package, imports are relative, so a kernel folder copied with the
folders its PROVENANCE names (keeping artifacts/kernels/) runs as it does here:
`python -m artifacts.kernels.tma_copy.tma_copy --compile-only`."""

"""Shared-memory bank conflicts and ldmatrix/stmatrix: smem_banks.cu, its access patterns and references."""

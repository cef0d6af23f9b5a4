"""Kernels that measure the L2 cache: a working-set read sweep and a pointer chase (l2_cache.cu, l2_cache.py)."""

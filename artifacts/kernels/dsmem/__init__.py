"""Distributed shared memory in thread block clusters: dsmem.cu and its reference."""

"""A persistent Triton matmul for Hopper (pointer loads or TMA descriptors); see persistent_matmul.py."""

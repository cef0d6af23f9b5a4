"""A one-thread counter kernel for measuring launch overhead and CUDA graph replay (tick.cu, tick.py)."""

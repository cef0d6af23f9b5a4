"""GEMM-style epilogues through TMA store and TMA reduce-add, against st.global and atomics (tma_store.cu, tma_store.py)."""

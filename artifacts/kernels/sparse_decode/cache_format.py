"""The FP8 KV-cache row of DeepSeek-V3.2 (FlashMLA's "FP8 with scale" format, `V32_FP8Sparse`).

Sources: src-flashmla-readme (656 bytes per token: 512 e4m3, 4 float32 scales, 64 bf16) and
src-flashmla-sparse-decode-code (tests/quant.py: scales rounded up to powers of two). Kept free of
torch and CUTLASS so that the kernels, the reference and the CPU tests share one definition.
"""

D_NOPE = 512                          # latent dims stored in float8 e4m3
D_ROPE = 64                           # RoPE dims stored in bf16
D_QK = D_NOPE + D_ROPE                # 576: query/key dims (MQA form of MLA)
D_V = 512                             # value dims: the first 512 dims of the same row
QUANT_TILE = 128                      # NoPE values per float32 scale
SCALES = D_NOPE // QUANT_TILE         # 4
SCALE_OFFSET = D_NOPE                 # byte offset of the scales in a row
ROPE_OFFSET = SCALE_OFFSET + 4 * SCALES   # byte offset of the RoPE values: 528
ROW_BYTES = ROPE_OFFSET + 2 * D_ROPE  # 656
E4M3_MAX = 448.0

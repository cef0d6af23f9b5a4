"""Sparse MLA decode (DeepSeek V3.2 FP8 656-byte cache rows) for sm_90a and sm_100a, in CuTe DSL, with
the cache format, the row gather and an fp32 reference.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

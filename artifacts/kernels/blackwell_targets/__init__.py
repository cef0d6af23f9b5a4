"""Which Blackwell instructions each target accepts: tcgen05/TMEM (sm_100a) against the warp-level
block-scaled mma.sync (sm_120a), as CUDA C++ with inline PTX that nvcc compiles or refuses.

PROVENANCE.yaml lists the files; targets.py says how to build them."""

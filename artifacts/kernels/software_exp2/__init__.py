"""Software exp2 on the FMA pipe (Cody-Waite range reduction and a degree-3 polynomial) in CuTe DSL.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

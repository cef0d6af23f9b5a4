"""A TMA copy kernel (cp.async.bulk.tensor load and store through shared memory) in CuTe DSL.

PROVENANCE.yaml lists the files; each module's docstring says what it computes, its constraints and
how to run it."""

"""Running probes: probe specs (probe.yaml), probe processes and the runner that writes run records.
The code probes import to measure is kernelwiki.harness, beside this package.

May import kernelwiki.model, kernelwiki.storage and kernelwiki.harness.
"""

"""kernelwiki: a GPU kernel knowledge base whose numbers are cited or measured by probes."""

__version__ = "0.1.0"

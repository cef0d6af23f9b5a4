"""What the tools do, one module per command: validate, refresh, get, query, audit, citations
(audit --sources) and upstream (get --fetch-upstream), with mirrors, the local git mirrors both read.

May import kernelwiki.model, kernelwiki.storage, kernelwiki.harness and kernelwiki.probing.
"""

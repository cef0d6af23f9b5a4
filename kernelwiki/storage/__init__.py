"""The repository on disk: where things are (repo), run records, the page index and its cache, the
word index, and single-page lookup.

May import kernelwiki.model only.
"""

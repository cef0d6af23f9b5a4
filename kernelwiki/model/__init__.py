"""The page model: problems, safe file access, YAML in and out, pages, schemas, vocabulary, claim spans.

Imports nothing else from kernelwiki: every other layer builds on it.
"""

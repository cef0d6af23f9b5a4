"""The docs site: mkdocs-material over wiki/, with evidence cards, claims tables, code from the
artifact files and generated evidence pages. `kernelwiki site build|serve` drives it.

May import every layer below the faces (model, storage, harness, probing, commands).
"""

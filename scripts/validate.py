#!/usr/bin/env python3
"""Validate the wiki: see `python scripts/validate.py --help`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelwiki.faces.cli import main  # noqa: E402

sys.exit(main(["validate", *sys.argv[1:]]))

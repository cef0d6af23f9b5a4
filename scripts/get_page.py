#!/usr/bin/env python3
"""Print one wiki page: `python scripts/get_page.py kernel-deepgemm --include-code`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelwiki.faces.cli import main  # noqa: E402

sys.exit(main(["get", *sys.argv[1:]]))

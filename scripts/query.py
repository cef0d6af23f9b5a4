#!/usr/bin/env python3
"""Search the wiki: `python scripts/query.py UMMA --arch B200`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelwiki.faces.cli import main  # noqa: E402

sys.exit(main(["query", *sys.argv[1:]]))

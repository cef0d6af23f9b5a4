#!/usr/bin/env python3
"""Run probes and write run records: `python scripts/run_probes.py --all` (see --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelwiki.faces.cli import main  # noqa: E402

sys.exit(main(["probe", "run", *sys.argv[1:]]))

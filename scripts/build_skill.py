#!/usr/bin/env python3
"""Write skills/kernelwiki/SKILL.md from AGENTS.md (`--check`: only say whether it is up to date)."""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kernelwiki.faces.skill import AgentsFormat, sync  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the skill is out of date")
args = parser.parse_args()
try:
    message = sync(ROOT, check=args.check)
except AgentsFormat as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(1)
if message:
    print(message, file=sys.stderr)
sys.exit(1 if message and args.check else 0)

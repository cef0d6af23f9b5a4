"""Fixtures: a small throwaway wiki (real schemas, hand-made pages) to break in every way."""

from __future__ import annotations

import io
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from kernelwiki.faces.cli import main
from kernelwiki.storage import record_file

ROOT = Path(__file__).resolve().parents[1]


def load_probe_script(probe_id: str, module: str):
    """Import probes/<probe_id>/<module>.py as a module. A probe is a script in a folder whose name is
    not a Python identifier, so it cannot be imported by name; run as a script, Python puts its folder
    first on sys.path (where its helper modules sit), and so does this, for the import only."""
    import importlib.util
    import sys

    folder = ROOT / "probes" / probe_id
    spec = importlib.util.spec_from_file_location(f"probe_{probe_id.replace('-', '_')}_{module}", folder / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.path[:0] = [str(folder)]   # for this import only; restored below
    # Two probes may each have a helper of the same name (held_out.py): a plain `import held_out` would
    # return whichever probe's helper this worker imported first, so the helpers of every probe folder
    # leave sys.modules before and after the import (the loaded module keeps its own references).
    _forget_probe_helpers(sys.modules)
    try:
        spec.loader.exec_module(loaded)
    finally:
        sys.path[:] = saved
        _forget_probe_helpers(sys.modules)
    return loaded


def _forget_probe_helpers(modules: dict) -> None:
    """Drop from `modules` every module imported by plain name from a file under probes/."""
    probes = ROOT / "probes"
    for name, mod in list(modules.items()):
        file = getattr(mod, "__file__", None)
        if file and "." not in name and Path(file).resolve().is_relative_to(probes):
            del modules[name]
PROBLEM_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): (?P<field>[^:]+): (?P<message>.+)$")

SOURCE_PAGE = """---
id: src-example
title: An example source
type: source
kind: paper
url: https://example.org/paper
retrieved: 2026-11-29
facts:
- The example kernel reaches 100 TFLOP/s.
---
# Example source
"""

HW_PAGE = """---
id: hw-example
title: An example hardware feature
type: hardware
summary: A feature used to test the tools.
aliases:
- skill-example
architectures:
- sm_90a
tags:
- wgmma
sources:
- src-example
claims:
- id: peak
  metric: tflops
  value: 100
  unit: TFLOP/s
  gpu: H200-SXM
  arch: sm_90a
  dtype: bf16
  evidence: source-reported
  source: src-example
  locator: facts[0]
  quote: The example kernel reaches 100 TFLOP/s.
---
# Example hardware

Body text about wgmma and the example feature.
"""


def run_cli(argv: list[str], root: Path) -> tuple[int, str, str]:
    """Run the CLI in-process on the checkout at `root`; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([argv[0], "--root", str(root), *argv[1:]])
    return code, out.getvalue(), err.getvalue()


def record_files(directory: Path) -> list[Path]:
    """The run record files (`.json` and `.json.gz`) in one probe's evidence folder, in name order."""
    return sorted(p for suffix in record_file.SUFFIXES for p in directory.glob(f"*{suffix}"))


def record_text(path: Path) -> str:
    """A record file's JSON text, whichever its form (the one reader every command uses)."""
    return record_file.read_text(path)


def write_record_text(path: Path, text: str) -> None:
    """Write a record file's JSON text in the form its name says (`.json.gz`: compressed)."""
    path.write_bytes(record_file.encode(text) if record_file.is_gzip(path) else text.encode("utf-8"))


class MiniRepo:
    def __init__(self, root: Path):
        self.root = root
        shutil.copytree(ROOT / "schemas", root / "schemas")
        (root / "wiki").mkdir()
        self.write("wiki/sources/example.md", SOURCE_PAGE)
        self.write("wiki/hardware/example.md", HW_PAGE)

    def write(self, rel: str, text: str | bytes) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", newline="")
        return path

    def run(self, *argv: str) -> tuple[int, str, str]:
        """Run the CLI in-process; returns (exit code, stdout, stderr)."""
        return run_cli(list(argv), self.root)

    def problems(self) -> list[dict]:
        """Validate; every stdout line must be a well-formed problem line."""
        code, out, err = self.run("validate")
        assert "Traceback" not in out + err
        found = []
        for line in out.splitlines():
            match = PROBLEM_LINE.match(line)
            assert match, f"malformed problem line: {line!r}"
            found.append(match.groupdict())
        assert (code == 1) == bool(found), (code, out, err)
        return found


@pytest.fixture
def mini(tmp_path) -> MiniRepo:
    return MiniRepo(tmp_path / "repo")


def messages(problems: list[dict]) -> str:
    return "\n".join(f"{p['path']}:{p['line']}: {p['field']}: {p['message']}" for p in problems)

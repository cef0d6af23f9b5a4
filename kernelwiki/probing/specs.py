"""Probe specs (probes/<id>/probe.yaml) as the runner and refresh see them."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernelwiki.model import yamlio
from kernelwiki.harness.env import Gpu
from kernelwiki.storage.repo import Repo
from kernelwiki.model.schema import check as schema_check
from kernelwiki.model.vocab import closest


@dataclass(frozen=True)
class ProbeSpec:
    id: str
    directory: Path
    data: dict

    @property
    def kind(self) -> str:
        return self.data.get("kind", "")

    @property
    def archs(self) -> list[str]:
        return list(self.data.get("archs") or [])

    @property
    def pages(self) -> list[str]:
        return list(self.data.get("pages") or [])

    @property
    def timeout_s(self) -> float:
        return float(self.data.get("timeout_s", 600))

    @property
    def entry(self) -> Path:
        return self.directory / self.data["entry"]

    @property
    def min_gpus(self) -> int:
        return int(self.data.get("min_gpus", 1))

    def case(self, case_id: str) -> dict | None:
        return next((c for c in self.data.get("cases") or [] if c.get("id") == case_id), None)

    def skip_reason(self, mode: str, gpu: Gpu | None, gpu_count: int = 1) -> str | None:
        """Why this machine (with `gpu_count` GPUs for the probe) cannot run it in this mode, or None."""
        needed = self.data.get("compile_requires" if mode == "compile-only" else "requires") or []
        missing = [module for module in needed if not _importable(module)]
        if missing:
            return f"missing Python module {', '.join(missing)}"
        if mode == "compile-only":
            return None   # tools (compute-sanitizer, ncu) run kernels; compiling needs none
        absent = [tool for tool in self.data.get("tools") or [] if shutil.which(tool) is None]
        if absent:
            return f"missing tool {', '.join(absent)} (not on PATH)"
        if gpu is None:
            return "no GPU on this machine"
        if gpu.arch not in self.archs:
            return f"requires {' or '.join(self.archs)}; this GPU is {gpu.arch}"
        if gpu_count < self.min_gpus:
            return f"requires {self.min_gpus} or more GPUs; this machine has {gpu_count}"
        return None


def _importable(module: str) -> bool:
    """find_spec imports the parents of a dotted name; a missing parent means missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class UnknownProbe(LookupError):
    pass


def load_probes(repo: Repo) -> dict[str, ProbeSpec]:
    """Every probe.yaml that passes its schema (validate reports the others), so that the runner
    and refresh never meet a spec of the wrong shape; probe directories that are symbolic links
    are not probes (their code would run from anywhere)."""
    probes = {}
    if not repo.probes.is_dir():
        return probes
    for directory in sorted(p for p in repo.probes.iterdir() if not p.is_symlink() and (p / "probe.yaml").is_file()):
        data, _, problem = yamlio.read_mapping(directory / "probe.yaml")
        if problem or data is None or data.get("id") != directory.name or not isinstance(data.get("entry"), str):
            continue
        if schema_check(repo.schemas, "probe", data, directory.name, lambda p: 1):
            continue
        probes[directory.name] = ProbeSpec(directory.name, directory, data)
    return probes


def select(probes: dict[str, ProbeSpec], *, all_probes: bool, ids: list[str], pages: list[str]) -> list[ProbeSpec]:
    """Probes named by id or backing one of the pages; calibration first, since others quote it."""
    for name in ids:
        if name not in probes:
            near = closest(name, probes)
            raise UnknownProbe(f"no probe {name!r}" + (f"; closest: {', '.join(near)}" if near else ""))
    chosen = [p for p in probes.values()
              if all_probes or p.id in ids or any(page in p.pages for page in pages)]
    if pages and not all_probes and not ids and not chosen:
        raise UnknownProbe(f"no probe backs page(s) {', '.join(pages)}")
    return sorted(chosen, key=lambda p: (p.kind != "calibration", p.id))

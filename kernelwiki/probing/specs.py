"""Probe specs (probes/<id>/probe.yaml) as the runner and refresh see them."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelwiki.model import yamlio
from kernelwiki.harness.env import Gpu
from kernelwiki.storage.repo import Repo
from kernelwiki.model.schema import check as schema_check
from kernelwiki.model.vocab import closest


DEFAULT_TIMEOUT_S = 600.0


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
        """The spec's limit; a value that is not a finite positive number (the schema and validate
        refuse it) falls back to the default, so no probe runs without a deadline."""
        value = self.data.get("timeout_s", DEFAULT_TIMEOUT_S)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            return DEFAULT_TIMEOUT_S
        return float(value)

    @property
    def entry(self) -> Path:
        return self.directory / self.data["entry"]

    @property
    def min_gpus(self) -> int:
        return int(self.data.get("min_gpus", 1))

    @property
    def ceilings(self) -> list[str]:
        """The measured ceilings the probe quotes (probe.yaml `ceilings`), which a calibration run
        earlier in the same invocation must provide."""
        return list(self.data.get("ceilings") or [])

    def case(self, case_id: str) -> dict | None:
        return self._cases().get(case_id)

    def case_ids(self) -> set[str]:
        return set(self._cases())

    def _cases(self) -> dict[str, dict]:
        """Cases by id, built once: refresh asks for a case per record case, which over thousands
        of cases must not scan the list each time."""
        cached = self.__dict__.get("_by_id")
        if cached is None:
            cached = {}
            for c in self.data.get("cases") or []:
                if isinstance(c, dict) and isinstance(c.get("id"), str):
                    cached.setdefault(c["id"], c)
            object.__setattr__(self, "_by_id", cached)
        return cached

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
    """Whether `module` could be imported, found without running any of its code: find_spec on a
    dotted name imports the parents (a package's __init__ could hang or crash the runner itself,
    outside any probe timeout), so each submodule is looked up on its parent's search path."""
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        return False
    try:
        spec = importlib.util.find_spec(parts[0]) if parts[0] not in sys.modules else sys.modules[parts[0]].__spec__
        for part in parts[1:]:
            locations = spec.submodule_search_locations if spec is not None else None
            if not locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
        return spec is not None
    except (ImportError, ValueError, AttributeError):
        return False


class UnknownProbe(LookupError):
    pass


def entry_problem(directory: Path, entry: object) -> str | None:
    """Why `entry` is not a script the runner may execute, or None: it must name a regular file
    inside the probe's own directory, reached through no symbolic link (an absolute path, `..` or
    a link would run code from anywhere on the machine)."""
    if not isinstance(entry, str) or not entry:
        return "must name the script in the probe directory"
    parts = Path(entry).parts
    if Path(entry).is_absolute() or ".." in parts or "\\" in entry:
        return f"{entry!r} leaves the probe directory; name a file inside it"
    path = directory
    for part in parts:
        path = path / part
        if path.is_symlink():
            return f"{entry!r} goes through a symbolic link; the runner executes only files inside the repository"
    if not path.is_file():
        return f"file {entry} not found in the probe directory"
    return None


def link_problem(repo: Repo) -> str | None:
    """Why the probes directory itself cannot be trusted, or None."""
    if repo.probes.is_symlink():
        return "probes/ is a symbolic link; probe code must live inside the repository"
    return None


def load_probes(repo: Repo) -> dict[str, ProbeSpec]:
    """Every probe.yaml that passes its schema (validate reports the others), so that the runner
    and refresh never meet a spec of the wrong shape; probe directories that are symbolic links
    are not probes (their code would run from anywhere)."""
    probes = {}
    if not repo.probes.is_dir() or link_problem(repo):
        return probes
    for directory in sorted(p for p in repo.probes.iterdir() if not p.is_symlink() and (p / "probe.yaml").is_file()):
        data, _, problem = yamlio.read_mapping(directory / "probe.yaml")
        if problem or data is None or data.get("id") != directory.name or entry_problem(directory, data.get("entry")):
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


def with_calibration(chosen: list[ProbeSpec], probes: dict[str, ProbeSpec], mode: str) -> list[ProbeSpec]:
    """`chosen`, with the calibration probes first when a run (not compile-only) includes a probe
    that quotes measured ceilings: those are measured in the same invocation by the same protocol,
    never read from another run's record."""
    if mode != "run" or not any(p.ceilings for p in chosen if p.kind != "calibration"):
        return chosen
    ids = {p.id for p in chosen}
    missing = [p for p in probes.values() if p.kind == "calibration" and p.id not in ids]
    return sorted([*chosen, *missing], key=lambda p: (p.kind != "calibration", p.id))

"""The package is built in layers: a module may import only from its own subpackage or a lower
layer, and no import cycle exists between modules (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kernelwiki"
LAYERS = {"model": 0, "storage": 1, "harness": 1, "probing": 2, "commands": 3, "docsite": 4, "faces": 5}
"""Subpackage -> rank; a module imports only subpackages of lower rank (or its own)."""
TOP = {"__init__", "__main__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every kernelwiki module `path` imports, as dotted names (anywhere in the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kernelwiki"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("kernelwiki"):
                continue
            for alias in node.names:   # `from kernelwiki.model import yamlio` imports a module
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _exists(candidate) else base)
    return {name for name in found if name != own}


def _exists(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] not in TOP else None


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def test_every_subpackage_has_a_layer():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(LAYERS), f"give each subpackage a rank in LAYERS: {subpackages ^ set(LAYERS)}"
    flat = [p.name for p in PACKAGE.glob("*.py") if p.stem not in TOP]
    assert not flat, f"modules outside a layer: {flat}"


def test_lower_layers_never_import_higher_ones():
    wrong = []
    for module, targets in graph().items():
        mine = layer(module)
        for target in targets:
            theirs = layer(target)
            if mine and theirs and theirs != mine and LAYERS[theirs] >= LAYERS[mine]:
                wrong.append(f"{module} ({mine}, rank {LAYERS[mine]}) imports {target} ({theirs}, rank {LAYERS[theirs]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if target not in edges:
                continue
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target):] + [target] if target in trail else [node, target])
            elif target not in state:
                visit(target, trail + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_finds_a_violation(tmp_path):
    """The rule can fail: a model module importing a command is reported."""
    bad = PACKAGE / "model" / "_layer_probe_tmp.py"
    bad.write_text("from kernelwiki.commands import refresh\n", encoding="utf-8")
    try:
        assert any("kernelwiki.model._layer_probe_tmp" == m and "kernelwiki.commands.refresh" in t
                   for m, t in graph().items())
    finally:
        bad.unlink()

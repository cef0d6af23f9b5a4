"""The tuning file of gemm(tune=True) as untrusted input (artifacts/kernels/hopper_gemm/tuning_file.py,
which imports neither torch nor CUTLASS): a FIFO, a link, JSON nested too deeply and a flood of bad
entries cost one warning and a tuning run, never a hang, an exception or a warning per entry."""

from __future__ import annotations

import json
import os
import threading
import warnings

import pytest

from artifacts.kernels.hopper_gemm import tuning_file


def check(entry):
    return entry.get("tile") if isinstance(entry, dict) and isinstance(entry.get("tile"), int) else None


def test_the_module_needs_neither_torch_nor_cutlass():
    import ast

    tree = ast.parse(open(tuning_file.__file__, encoding="utf-8").read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"torch", "cutlass"}, imported


def test_a_fifo_at_the_tuning_file_is_not_waited_on(tmp_path):
    path = tmp_path / "t.json"
    os.mkfifo(path)
    result = {}
    reader = threading.Thread(target=lambda: result.update(read=_quiet_read(path)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading the tuning file blocked on a FIFO"
    assert result["read"] == ({}, ["not a regular file"])


def _quiet_read(path, version=1):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = tuning_file.read(path, version, check)
    return found, [next((w for w in ("not a regular file", "symbolic link", "nests too deeply", "and 199,999 more",
                                     "more than") if w in str(c.message)), str(c.message)) for c in caught]


def test_json_nested_too_deeply_is_one_warning_not_a_recursion_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert _quiet_read(path) == ({}, ["nests too deeply"])


def test_two_hundred_thousand_bad_entries_are_one_warning(tmp_path):
    path = tmp_path / "t.json"
    entries = {f"b{i}": {"tile": "x"} for i in range(200_000)}
    entries["good"] = {"tile": 64}
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    assert _quiet_read(path) == ({"good": 64}, ["and 199,999 more"])


def test_a_linked_tuning_file_is_not_followed_and_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"version": 1, "entries": {"planted": {"tile": 128}}}))
    path = tmp_path / "t.json"
    path.symlink_to(victim)
    assert _quiet_read(path) == ({}, ["symbolic link"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuning_file.write(path, 1, {"k": {"tile": 64}})
    assert not path.is_symlink() and json.loads(victim.read_text())["entries"] == {"planted": {"tile": 128}}
    assert tuning_file.read(path, 1, check) == {"k": 64} and not list(tmp_path.glob("*.tmp"))


def test_a_file_larger_than_the_limit_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_file, "MAX_BYTES", 100)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": {f"k{i}": {"tile": 64} for i in range(20)}}))
    assert _quiet_read(path) == ({}, ["more than"])


def test_autotune_reads_through_the_hardened_reader(tmp_path):
    """gemm(tune=True) reads its file with read_cache: a 100k-deep file once raised RecursionError out of it."""
    autotune = pytest.importorskip("artifacts.kernels.hopper_gemm.autotune")
    path = tmp_path / "t.json"
    path.write_text("{\"version\": 1, \"entries\": " + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.warns(UserWarning, match="nests too deeply"):
        assert autotune.read_cache(path) == {}

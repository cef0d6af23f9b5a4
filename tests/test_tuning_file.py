"""gemm(tune=True)'s tuning file as untrusted input (tuning_file.py, which needs neither torch nor CUTLASS):
a FIFO, a link, JSON too deep and a flood of bad entries cost one warning and a tuning run (issue 38)."""

from __future__ import annotations

import json
import os
import threading
import warnings

import pytest

from artifacts.kernels.hopper_gemm import tuning_file


def check(entry):
    return entry.get("tile") if isinstance(entry, dict) and isinstance(entry.get("tile"), int) else None


def read(path, limit=10):
    """(entries, warnings) of one read in a thread that must end within `limit` seconds (a FIFO once blocked)."""
    out = {}

    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out["entries"], out["warnings"] = tuning_file.read(path, 1, check), [str(w.message) for w in caught]

    reader = threading.Thread(target=run, daemon=True)
    reader.start()
    reader.join(limit)
    assert not reader.is_alive(), "reading the tuning file blocked"
    return out["entries"], out["warnings"]


@pytest.mark.parametrize("plant, entries, warning", [
    (lambda p: os.mkfifo(p), {}, "not a regular file"),
    (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), {}, "nests too deeply"),
    (lambda p: p.write_text(json.dumps({"version": 1, "entries": {**{f"b{i}": {"tile": "x"} for i in range(200_000)},
                                                                  "good": {"tile": 64}}})), {"good": 64}, "and 199,999 more"),
    (lambda p: p.symlink_to(p.parent / "victim.json"), {}, "symbolic link"),
    (lambda p: p.write_bytes(b" " * (tuning_file.MAX_BYTES + 1)), {}, "more than"),
])
def test_a_hostile_tuning_file_is_one_warning(tmp_path, plant, entries, warning):
    (tmp_path / "victim.json").write_text(json.dumps({"version": 1, "entries": {"planted": {"tile": 128}}}))
    plant(tmp_path / "t.json")
    found, said = read(tmp_path / "t.json")
    assert found == entries and len(said) == 1 and warning in said[0], said


def test_a_linked_tuning_file_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    (tmp_path / "t.json").symlink_to(victim)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuning_file.write(tmp_path / "t.json", 1, {"k": {"tile": 64}})
    assert victim.read_text() == "{}" and read(tmp_path / "t.json") == ({"k": 64}, [])
    assert not list(tmp_path.glob(".t.json.*"))


def test_the_module_imports_neither_torch_nor_cutlass_and_autotune_reads_through_it(tmp_path):
    source = open(tuning_file.__file__, encoding="utf-8").read()
    assert "import torch" not in source and "cutlass" not in source.split('"""', 2)[2]
    autotune = pytest.importorskip("artifacts.kernels.hopper_gemm.autotune")
    (tmp_path / "t.json").write_text('{"version": 1, "entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.warns(UserWarning, match="nests too deeply"):   # once a RecursionError out of gemm(tune=True)
        assert autotune.read_cache(tmp_path / "t.json") == {}

"""The threat model (README, "Threat model"): every file under wiki/, artifacts/, probes/, schemas/,
the cache, the environment and the network is untrusted. One test per class of attack: each plants
the hostile input and checks that validate refuses it and no command acts on it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import MiniRepo, messages
from test_runner import FAKE_GPU, _run, add_probe, records


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)


def planted(tmp_path: Path) -> Path:
    """A script outside the repository that leaves a mark when it runs."""
    mark = tmp_path / "ran"
    script = tmp_path / "outside.py"
    script.write_text(f"open({str(mark)!r}, 'w').write('ran')\n")
    return script


# --- probe code from outside the repository ------------------------------------------------------
@pytest.mark.parametrize("how", ["absolute", "dotdot", "linked-entry", "linked-probe-dir", "linked-probes"])
def test_probe_code_from_outside_the_repository_never_runs(mini, gpu, tmp_path, how):
    probe_id = add_probe(mini, "ok", "passing")
    directory = mini.root / "probes" / probe_id
    script = planted(tmp_path)
    spec = directory / "probe.yaml"
    if how == "absolute":
        spec.write_text(spec.read_text().replace("entry: run.py", f"entry: {script}"))
    elif how == "dotdot":
        rel = os.path.relpath(script, directory)
        spec.write_text(spec.read_text().replace("entry: run.py", f"entry: {rel}"))
    elif how == "linked-entry":
        (directory / "run.py").unlink()
        (directory / "run.py").symlink_to(script)
    elif how == "linked-probe-dir":
        moved = tmp_path / "elsewhere"
        shutil.move(directory, moved)
        (moved / "run.py").write_text(script.read_text())
        directory.symlink_to(moved)
    else:
        moved = tmp_path / "probes-elsewhere"
        shutil.move(mini.root / "probes", moved)
        (moved / probe_id / "run.py").write_text(script.read_text())
        (mini.root / "probes").symlink_to(moved)
    code, out, err = mini.run("validate")
    assert code in (1, 2) and "Traceback" not in err
    assert "symbolic link" in out + err or "leaves the probe directory" in out, \
        "validate is silent about probe code from outside the repository"
    code, out, err = _run(mini, "--probe", probe_id)
    assert code in (1, 2) and "Traceback" not in err
    assert not (tmp_path / "ran").exists(), "the runner executed code from outside the repository"


def test_linked_schemas_directory_is_not_a_checkout(mini, tmp_path):
    moved = tmp_path / "schemas-elsewhere"
    shutil.move(mini.root / "schemas", moved)
    (mini.root / "schemas").symlink_to(moved)
    code, out, err = mini.run("validate")
    assert code == 2 and "symbolic link" in err, (code, out, err)

"""The runner against hostile probes and signals: no probe process outlives the runner, one bad
result is that probe's record and the run goes on, and the lock survives cache removal."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, MiniRepo, record_files, record_text
from kernelwiki.storage.repo import Repo
from kernelwiki.probing.runner import runner_lock
from test_runner import FAKE_GPU, _run, add_probe, records

WRITE_OUT = "import json, os, sys, subprocess, time\nOUT = sys.argv[sys.argv.index('--out') + 1]\n"
# A child that leaves the probe's process group and session, then sleeps; its pid goes to a file.
ESCAPE = WRITE_OUT + (
    "child = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(300)'])\n"
    "open(os.path.join(os.path.dirname(__file__), 'pids'), 'w').write(f'{os.getpid()} {child.pid}')\n"
)


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)


def probe(mini: MiniRepo, name: str, code: str) -> str:
    probe_id = add_probe(mini, name, "passing")
    (mini.root / f"probes/{probe_id}/run.py").write_text(code)
    return probe_id


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def pids(mini: MiniRepo, probe_id: str) -> list[int]:
    path = mini.root / f"probes/{probe_id}/pids"
    wait_for(path)
    time.sleep(0.2)
    return [int(p) for p in path.read_text().split()]


def assert_all_dead(found: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(alive(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in found if alive(p)], "probe processes survived the runner"


def runner_process(mini: MiniRepo, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELWIKI_FAKE_GPU=FAKE_GPU)
    return subprocess.Popen([sys.executable, "-m", "kernelwiki", "probe", "run", "--root", str(mini.root), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_runner_kills_the_probe_and_what_it_started(mini, signum):
    hang = probe(mini, "hang", ESCAPE + "time.sleep(300)\n")
    runner = runner_process(mini, "--probe", hang)
    found = pids(mini, hang)
    runner.send_signal(signum)
    out, err = runner.communicate(timeout=30)
    assert runner.returncode == 128 + signum
    assert "Traceback" not in err and f"interrupted by {signal.Signals(signum).name}" in err
    assert_all_dead(found)


def test_timeout_and_exit_leave_nothing_running(mini, gpu):
    hang = probe(mini, "hang", ESCAPE + "time.sleep(300)\n")
    start = time.monotonic()
    code, _, _ = _run(mini, "--probe", hang, "--timeout", "2")
    assert code == 1 and time.monotonic() - start < 20
    assert records(mini, hang)[0]["status"] == "timeout"
    assert_all_dead(pids(mini, hang))
    (mini.root / f"probes/{hang}/pids").unlink()
    quits = probe(mini, "quits", ESCAPE + "os._exit(3)\n")
    assert _run(mini, "--probe", quits)[0] == 1
    assert records(mini, quits)[0]["reason"] == "exited with status 3"
    assert_all_dead(pids(mini, quits))


def test_next_runner_kills_what_a_sigkilled_runner_left(mini, gpu):
    hang = probe(mini, "hang", ESCAPE + "time.sleep(300)\n")
    runner = runner_process(mini, "--probe", hang)
    found = pids(mini, hang)
    runner.kill()
    runner.communicate(timeout=30)
    assert any(alive(p) for p in found)  # SIGKILL cannot be caught: the probe outlives its runner
    ok = add_probe(mini, "ok", "passing")
    code, _, err = _run(mini, "--probe", ok)
    assert code == 0 and "killed 2 probe process(es) left running by an earlier runner" in err
    assert_all_dead(found)


@pytest.mark.parametrize("code, status, reason", [
    (WRITE_OUT + "json.dump([1, 2], open(OUT, 'w'))\n", "failed", "result is a JSON list, not an object"),
    (WRITE_OUT + "open(OUT, 'w').write('{garbage')\n", "failed", "wrote a result that is not JSON"),
    (WRITE_OUT + "json.dump({'cases': 'lots'}, open(OUT, 'w'))\n", "failed", "cases: must be a list"),
    (WRITE_OUT + "import signal\nos.kill(os.getpid(), signal.SIGRTMIN + 6)\ntime.sleep(5)\n", "crashed",
     "killed by signal SIGRTMIN+6"),
    (WRITE_OUT + "print('\\x1b[2J\\x1b]0;owned\\x07hi')\njson.dump({'cases': [{'id': 'c1', 'status': 'passed', "
     "'headline': {'metric': 'tflops', 'value': float('nan')}}]}, open(OUT, 'w'))\n", "failed", "record schema"),
])
def test_one_bad_result_is_that_probes_record_and_the_run_goes_on(mini, gpu, code, status, reason):
    bad = probe(mini, "bad", code)
    good = add_probe(mini, "good", "passing")
    exit_code, out, err = _run(mini, "--probe", bad, "--probe", good)
    assert exit_code == 1 and "Traceback" not in out + err
    [record] = records(mini, bad)
    assert record["status"] == status and reason in record["reason"], record
    assert records(mini, good)[0]["status"] == "passed"
    assert "refreshed wiki/hardware/example.md" in err
    assert "\x1b" not in err and "\x07" not in err
    text = record_text(record_files(mini.root / "artifacts/evidence" / bad)[0])
    assert "NaN" not in text


def test_compile_only_instructions_not_a_mapping(mini):
    bad = probe(mini, "bad", WRITE_OUT + "json.dump({'instructions': ['sm_90a']}, open(OUT, 'w'))\n")
    code, out, err = _run(mini, "--probe", bad, "--compile-only")
    assert code == 1 and "Traceback" not in err
    assert records(mini, bad)[0]["status"] == "failed"


def test_escape_sequences_in_probe_output_are_shown_not_obeyed(mini, gpu):
    noisy = probe(mini, "noisy", WRITE_OUT + "print('\\x1b[2Jcleared\\x07')\n")
    _, _, err = _run(mini, "--probe", noisy, "--no-record")
    assert "\\x1b[2Jcleared\\x07" in err and "\x1b" not in err


def test_records_are_world_readable(mini, gpu):
    ok = add_probe(mini, "ok", "passing")
    old = os.umask(0o022)
    try:
        _run(mini, "--probe", ok)
    finally:
        os.umask(old)
    [path] = record_files(mini.root / "artifacts/evidence" / ok)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_lock_survives_removing_the_cache(mini, gpu):
    ok = add_probe(mini, "ok", "passing")
    with runner_lock(Repo(mini.root)):
        shutil.rmtree(mini.root / ".kernelwiki-cache", ignore_errors=True)
        code, _, err = _run(mini, "--probe", ok)
    assert code == 2 and "another probe runner" in err


@pytest.mark.parametrize("damage", ["file", "read-only"])
def test_unusable_cache_does_not_stop_a_run(mini, gpu, damage):
    ok = add_probe(mini, "ok", "passing")
    cache = mini.root / ".kernelwiki-cache"
    shutil.rmtree(cache, ignore_errors=True)
    if damage == "file":
        cache.write_text("not a directory")
    else:
        cache.mkdir()
        cache.chmod(0o500)
    try:
        code, out, err = _run(mini, "--probe", ok, "--no-record")
    finally:
        if cache.is_dir():
            cache.chmod(0o700)
    assert code == 0 and "Traceback" not in err, err
    for argv in (["validate"], ["get", "hw-example"], ["query", "example"]):
        assert mini.run(*argv)[0] in (0, 1)


def test_evidence_directory_linked_outside_is_not_written(mini, gpu, tmp_path):
    ok = add_probe(mini, "ok", "passing")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (mini.root / "artifacts").mkdir(exist_ok=True)
    os.symlink(outside, mini.root / "artifacts/evidence")
    code, _, err = _run(mini, "--probe", ok)
    assert code == 2 and "artifacts/evidence is a symbolic link" in err  # not a checkout to run in
    assert not list(outside.rglob("*"))


# --- issue 38: --ray reaches a cluster within one deadline ------------------------------------------
@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_a_ray_address_nothing_listens_on_is_one_error_line_at_once(mini, gpu, address):
    """`--ray 127.0.0.1:1` was still in ray.init after 150 s; ray://127.0.0.1:1 ended in a traceback."""
    pytest.importorskip("ray")
    add_probe(mini, "ok", "passing")
    start = time.monotonic()
    code, out, err = _run(mini, "--all", "--ray", address, "--no-record")
    assert code == 2 and err.startswith(f"error: --ray {address}: nothing accepts") and err.count("\n") == 1, err
    assert time.monotonic() - start < 30


class _FakeRay:
    """ray as fleet.connect sees it: an init that hangs (an address that answers but is no Ray's) or
    raises (auto with no cluster)."""

    def __init__(self, error: BaseException | None):
        self.error = error

    def init(self, **kwargs):
        if self.error is None:
            import threading

            threading.Event().wait()
        raise self.error


@pytest.mark.parametrize("error", [None, ConnectionError("Could not find any running Ray instance.\nPlease start one")])
def test_ray_init_has_one_deadline_and_its_error_is_one_line(monkeypatch, error):
    from kernelwiki.probing import fleet

    start = time.monotonic()
    with pytest.raises(fleet.FleetError) as caught:
        fleet.connect(_FakeRay(error), "auto", {}, timeout_s=1)
    assert time.monotonic() - start < 10 and "\n" not in str(caught.value)
    assert ("within 1 s" if error is None else "Could not find any running Ray instance. Please") in str(caught.value)


# --- issue 38: a deep result, a record not written: the same failed run under --gpus ---------------
DEEP_RESULT = WRITE_OUT + ("deep = 1\nfor _ in range(900):\n    deep = [deep]\n"
                           "json.dump({'cases': [{'id': 'c1', 'status': 'passed', 'params': {'x': deep}}]}, open(OUT, 'w'))\n")


@pytest.mark.parametrize("gpus", [[], ["--gpus", "1"]])
def test_a_result_nested_900_deep_is_a_failed_record_not_a_lost_one(mini, monkeypatch, gpus):
    """A RecursionError in round_floats lost the record; under --gpus 1 it was a thread traceback, an
    empty summary and exit 0."""
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "2")
    probe_id = probe(mini, "deep", DEEP_RESULT)
    code, out, err = _run(mini, "--probe", probe_id, "--no-refresh", *gpus)
    assert code == 1 and "Traceback" not in err and "Exception in thread" not in err, err
    [record] = records(mini, probe_id)
    assert record["status"] == "failed" and "nests more than 64 levels" in record["reason"], record
    assert probe_id in out and "failed" in out


def test_a_record_not_written_under_gpus_fails_the_run_as_the_plain_runner_does(mini, monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "2")
    probe_id = add_probe(mini, "ok", "passing")
    (mini.root / "artifacts/evidence").mkdir(parents=True)
    (mini.root / "artifacts/evidence" / probe_id).write_text("a file where the probe's records go")
    for gpus in ([], ["--gpus", "1"]):
        code, out, err = _run(mini, "--probe", probe_id, "--no-refresh", *gpus)
        assert code == 1 and f"{probe_id}: failed (record not written" in err, (gpus, code, err)


def test_a_fault_of_the_runner_in_a_gpu_worker_is_that_probes_failure(mini, monkeypatch):
    from kernelwiki.probing import gpus

    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "2")
    probe_id = add_probe(mini, "ok", "passing")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug of the runner")

    monkeypatch.setattr(gpus, "_run_one", broken)
    code, out, err = _run(mini, "--probe", probe_id, "--no-refresh", "--gpus", "1")
    assert code == 1 and "Exception in thread" not in err and "the runner failed on this probe: RuntimeError" in err, err

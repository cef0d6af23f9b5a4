"""`kernelwiki probe run --gpus`: every GPU of one host at once, on fake GPUs (KERNELWIKI_FAKE_GPU and
KERNELWIKI_FAKE_GPU_COUNT) with fake probes; no GPU needed."""

from __future__ import annotations

import signal

import pytest

from conftest import MiniRepo
from kernelwiki.faces import arguments
from test_hostile_runner import ESCAPE, assert_all_dead, pids, probe, runner_process
from test_runner import FAKE_GPU, _run, add_probe, records

# A passing probe that also notes which GPUs it was given.
NOTES_VISIBLE = ("import os\nopen(os.path.join(os.path.dirname(__file__), 'visible'), 'a')"
                 ".write(os.environ.get('CUDA_VISIBLE_DEVICES', '-') + '\\n')\n")


@pytest.fixture
def gpus(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "3")


def noting_probe(mini: MiniRepo, name: str, *, cases: int = 1, extra: str = "") -> str:
    probe_id = add_probe(mini, name, "passing")
    script = mini.root / f"probes/{probe_id}/run.py"
    script.write_text(NOTES_VISIBLE + script.read_text())
    spec = mini.root / f"probes/{probe_id}/probe.yaml"
    more = "".join(f"- id: c{i}\n  params: {{dtype: bf16, shape: 64x64x64}}\n" for i in range(2, cases + 1))
    spec.write_text(spec.read_text().replace("expected_instructions:", more + "expected_instructions:") + extra)
    return probe_id


def visible(mini: MiniRepo, probe_id: str) -> list[str]:
    return (mini.root / f"probes/{probe_id}/visible").read_text().split()


@pytest.mark.parametrize("value, parsed", [("all", "all"), ("2", 2), ("0,2", [0, 2]), (" 1,0 ", [1, 0]), (None, None)])
def test_gpus_argument_accepts(value, parsed):
    assert arguments.gpus(value) == parsed


@pytest.mark.parametrize("value, message", [("0", "0 GPUs"), ("1,1", "names a GPU twice"), ("gpu0", "is not all"),
                                            ("1,", "is not all"), ("", "is empty"), ("-1", "is not all")])
def test_gpus_argument_refuses(value, message):
    with pytest.raises(arguments.ArgumentError, match=message):
        arguments.gpus(value)


def test_each_probe_runs_on_its_own_gpu_and_its_record_names_it(mini, gpus):
    ids = [noting_probe(mini, f"p{i}") for i in range(4)]
    code, out, err = _run(mini, "--all", "--gpus", "all", "--no-refresh")
    assert code == 0, err
    seen = []
    for probe_id in ids:
        [record] = records(mini, probe_id)
        env = record["environment"]
        assert record["status"] == "passed" and env["host"] and env["gpu_uuid"] == f"GPU-fake-{env['gpu_index']:04d}"
        assert record["run_id"].endswith(f"-gpu{env['gpu_index']}")
        assert visible(mini, probe_id) == [str(env["gpu_index"])]  # the probe saw only its GPU
        seen.append(env["gpu_index"])
    assert set(seen) <= {0, 1, 2} and len(set(seen)) >= 2, seen
    assert len({r["batch"] for probe_id in ids for r in records(mini, probe_id)}) == 1   # one invocation
    assert "[gpu 0] " in err and mini.problems() == []


def test_the_cases_of_one_probe_are_split_over_the_gpus(mini, gpus):
    probe_id = noting_probe(mini, "split", cases=5)
    code, _, err = _run(mini, "--probe", probe_id, "--gpus", "0,2", "--no-refresh")
    assert code == 0, err
    found = records(mini, probe_id)
    by_gpu = {r["environment"]["gpu_index"]: [c["id"] for c in r["cases"]] for r in found}
    assert by_gpu == {0: ["c1", "c3", "c5"], 2: ["c2", "c4"]}
    assert sorted(visible(mini, probe_id)) == ["0", "2"]
    assert mini.problems() == []


def test_calibration_runs_on_every_gpu(mini, gpus):
    calibration = add_probe(mini, "calib", "passing", kind="calibration")
    other = noting_probe(mini, "other")
    code, _, err = _run(mini, "--all", "--gpus", "2", "--no-refresh")
    assert code == 0, err
    assert sorted(r["environment"]["gpu_index"] for r in records(mini, calibration)) == [0, 1]
    assert len(records(mini, other)) == 1


def test_a_probe_of_several_gpus_is_skipped_on_one_and_given_all_of_them_under_gpus(mini, monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    probe_id = noting_probe(mini, "nccl", extra="min_gpus: 2\n")
    code, _, err = _run(mini, "--probe", probe_id)
    assert code == 0 and f"{probe_id}: skipped: requires 2 or more GPUs; this machine has 1" in err
    code, _, err = _run(mini, "--probe", probe_id, "--gpus", "all")
    assert code == 0 and "requires 2 or more GPUs; this machine has 1" in err
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "3")
    code, _, err = _run(mini, "--probe", probe_id, "--gpus", "all", "--no-refresh")
    assert code == 0, err
    [record] = records(mini, probe_id)
    assert record["environment"]["gpu_count"] == 3 and record["environment"]["gpu_index"] is None
    assert visible(mini, probe_id) == ["0,1,2"] and mini.problems() == []


def test_gpus_the_host_lacks_are_refused(mini, gpus):
    probe_id = add_probe(mini, "ok", "passing")
    code, _, err = _run(mini, "--probe", probe_id, "--gpus", "4")
    assert code == 2 and "gpus: 4 GPUs asked for; this machine has 3" in err
    code, _, err = _run(mini, "--probe", probe_id, "--gpus", "0,7")
    assert code == 2 and "gpus: no GPU 7 on this machine (it has 0, 1, 2)" in err
    assert not (mini.root / "artifacts/evidence").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_run_on_several_gpus_kills_every_probe_and_writes_nothing(mini, signum, monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "2")  # runner_process passes os.environ on
    hangs = [probe(mini, f"hang{i}", ESCAPE + "time.sleep(300)\n") for i in range(2)]
    runner = runner_process(mini, "--all", "--gpus", "all")
    found = [pid for probe_id in hangs for pid in pids(mini, probe_id)]
    runner.send_signal(signum)
    out, err = runner.communicate(timeout=30)
    assert runner.returncode == 128 + signum, err
    assert "Traceback" not in err and f"interrupted by {signal.Signals(signum).name}" in err
    assert_all_dead(found)
    assert not [p for probe_id in hangs for p in (mini.root / "artifacts/evidence" / probe_id).glob("*")]

"""`kernelwiki probe run --ray`: probes as Ray tasks on a local cluster of nodes with fake GPUs
(ray.cluster_utils.Cluster, KERNELWIKI_FAKE_GPU); no GPU needed. Skipped without Ray (the `fleet` extra)."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import MiniRepo
from kernelwiki.probing import fleet
from test_runner import FAKE_GPU, HEADER, BODIES, _run, add_probe, records

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

MODEL = "H200"
NODE = {"num_cpus": 1, "num_gpus": 1, "resources": {fleet.gpu_resource(MODEL): 1}}


@pytest.fixture(scope="module")
def cluster():
    """A head without GPUs and two nodes of one fake H200 each."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)   # the nodes start with it
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    for _ in range(2):
        made.add_node(**NODE)
    yield made
    made.shutdown()
    mp.undo()


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)


def scripted_probe(mini: MiniRepo, name: str, before: str) -> str:
    """A passing probe whose script first runs `before`."""
    probe_id = add_probe(mini, name, "passing")
    (mini.root / f"probes/{probe_id}/run.py").write_text(before + HEADER.format(value=110.0) + BODIES["passing"] + "\n")
    return probe_id


def test_cluster_models_come_from_the_node_resources():
    assert fleet.cluster_models({"CPU": 4, "GPU": 3, "kernelwiki-gpu:H200": 2, "kernelwiki-gpu:B200": 1,
                                 "kernelwiki-gpu:H100": 0}) == ["B200", "H200"]


def test_each_probe_runs_as_a_task_on_a_gpu_of_its_model_and_its_record_lands_here(mini, gpu, cluster):
    ids = [add_probe(mini, f"p{i}", "passing") for i in range(2)]
    code, out, err = _run(mini, "--all", "--ray", cluster.address, "--no-refresh")
    assert code == 0, err
    nodes = {n.node_id for n in cluster.worker_nodes}
    for probe_id in ids:
        [record] = records(mini, probe_id)
        env = record["environment"]
        assert record["status"] == "passed" and env["ray_node"] in nodes and env["gpu_index"] == 0
        assert env["gpu_uuid"] == "GPU-fake-0000" and env["host"]
    assert mini.problems() == []
    code, _, err = _run(mini, "--all", "--ray", cluster.address, "--gpu-model", "B200")
    assert code == 2 and "no node of the Ray cluster offers kernelwiki-gpu:B200" in err


def test_two_records_for_one_case_from_two_nodes(mini, gpu, cluster):
    probe_id = scripted_probe(mini, "twice", "import time\ntime.sleep(2)\n")  # both copies run at once
    code, _, err = _run(mini, "--probe", probe_id, "--ray", cluster.address, "--repeat", "2", "--no-refresh")
    assert code == 0, err
    found = records(mini, probe_id)
    assert len(found) == 2 and len({r["run_id"] for r in found}) == 2
    assert len({r["environment"]["ray_node"] for r in found}) == 2, "both copies ran on one node"
    assert found[0]["batch"] == found[1]["batch"]   # runs of the same evidence
    assert all(r["cases"][0]["id"] == "c1" and r["status"] == "passed" for r in found)
    assert mini.problems() == []


def test_a_node_dying_mid_probe_is_retried_on_another(mini, gpu, cluster, tmp_path):
    """The node running the probe is removed while it runs; Ray runs the task again on a new node."""
    marker = tmp_path / "first-attempt"
    hang_once = (f"import os, time\nif not os.path.exists({str(marker)!r}):\n"
                 f"    open({str(marker)!r}, 'w').write('running')\n"
                 "    parent = os.getppid()\n"
                 "    while os.getppid() == parent:\n        time.sleep(0.1)\n    os._exit(1)\n")
    probe_id = scripted_probe(mini, "dies", hang_once)
    dying = {"num_cpus": 1, "num_gpus": 1, "resources": {fleet.gpu_resource("H100"): 1}}
    doomed = cluster.add_node(**dying)
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(run=_run(mini, "--probe", probe_id, "--ray", cluster.address,
                                                                    "--gpu-model", "H100", "--no-refresh")))
    runner.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the probe never started"
        time.sleep(0.1)
    cluster.remove_node(doomed)
    spare = cluster.add_node(**dying)
    runner.join(timeout=120)
    assert not runner.is_alive()
    code, _, err = result["run"]
    assert code == 0, err
    [record] = records(mini, probe_id)   # one record: the retry's, nothing of the first attempt
    assert record["status"] == "passed" and record["environment"]["ray_node"] == spare.node_id
    assert mini.problems() == []
    cluster.remove_node(spare)


def test_a_probe_whose_worker_always_dies_is_recorded_crashed(mini, gpu, cluster):
    probe_id = scripted_probe(mini, "kills", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(1)\n")
    code, _, err = _run(mini, "--probe", probe_id, "--ray", cluster.address, "--no-refresh")
    assert code == 1, err
    [record] = records(mini, probe_id)
    assert record["status"] == "crashed" and "3 attempt(s)" in record["reason"], record
    assert not list((mini.root / "artifacts/evidence" / probe_id).glob(".*"))   # no temporary file left
    assert mini.problems() == []


def test_a_record_that_fails_its_check_never_lands(mini, gpu, tmp_path):
    """A node is untrusted: a record naming another probe, or a run id that is a path, is refused."""
    from kernelwiki.probing.specs import load_probes
    from kernelwiki.storage.repo import Repo

    probe_id = add_probe(mini, "ok", "passing")
    repo = Repo(mini.root)
    spec = load_probes(repo)[probe_id]
    task = fleet.Task(probe_id, MODEL, "run", [], [], None, None)
    lock = threading.Lock()
    bad = fleet._crashed_record(task, 0, RuntimeError("x"))
    for change in ({"probe": "probe-other"}, {"run_id": "../../../escape"}, {"status": "bogus"}):
        record = dict(bad, **change)
        outcome = fleet._land(repo, spec, set(load_probes(repo)), task, {"status": "passed", "record": record}, True, lock)
        assert outcome.status == "failed" and "fails its check" in outcome.reason, outcome
    written = records(mini, probe_id)
    assert [r["status"] for r in written] == ["failed"] * 3
    assert not (mini.root / "escape.json").exists() and mini.problems() == []


def test_a_ray_task_quotes_no_committed_ceilings(mini, gpu, cluster):
    """Each Ray task runs alone on its GPU: a probe quoting ceilings gets them null with that reason,
    not those of the calibration record the tree holds."""
    from test_same_run_ceilings import committed_calibration, quoting_probe

    committed_calibration(mini, 555.0)
    quoting = quoting_probe(mini)
    code, _, err = _run(mini, "--probe", quoting, "--ray", cluster.address, "--no-refresh")
    assert code == 0, err
    [record] = records(mini, quoting)
    ceilings = record["ceilings"]
    assert ceilings["run_id"] is None and ceilings["bf16"] is None and "under --ray" in ceilings["reason"]
    assert "fraction_of_ceiling" not in record["cases"][0]["headline"]

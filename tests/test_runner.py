"""The runner and the harness on the CPU, with fake probes: every way a probe run can end."""

from __future__ import annotations

import json
import time

import pytest

from conftest import MiniRepo, record_files, record_text, write_record_text
from kernelwiki.storage.repo import Repo
from kernelwiki.probing.runner import runner_lock

FAKE_GPU = "NVIDIA H200,sm_90a"

PROBE_YAML = """id: {id}
title: Fake probe {id}
kind: {kind}
pages:
- hw-example
archs:
- {arch}
requires: {requires}
entry: run.py
timeout_s: 30
cases:
- id: c1
  params: {{dtype: bf16, shape: 64x64x64}}
  claim: peak
expected_instructions:
  sm_90a:
  - wgmma.mma_async
  - HGMMA
negative_control: corrupt one element
"""

HEADER = """
from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import Probe

def good(case, ctx):
    return {{"correctness": {{"passed": True, "rel_err": 1e-3, "max_abs_err": 1e-2, "tolerance": 2e-2, "all_written": True}},
            "headline": ctx.headline("tflops", {value}, "TFLOP/s", baseline=("cuBLAS", 100.0))}}

def control_fails(ctx):
    return {{"passed": False, "rel_err": 0.5}}
"""

BODIES = {
    "passing": "Probe(__file__).main(run_case=good, negative_control=control_fails)",
    "crash": "import os\nos.abort()",
    "hang": "import time\ntime.sleep(120)",
    "incorrect": "Probe(__file__).main(run_case=lambda c, x: {'correctness': {'passed': False, 'rel_err': 0.4}}, "
                 "negative_control=control_fails)",
    "control-passes": "Probe(__file__).main(run_case=good, negative_control=lambda x: {'passed': True})",
    "control-blunt": "Probe(__file__).main(run_case=good, negative_control={'subtle': control_fails, "
                     "'blunt': lambda x: {'passed': False, 'rel_err': 4.6, 'tolerance': 0.02}})",
    "impossible": "Probe(__file__).main(run_case=lambda c, x: {**good(c, x), 'headline': x.headline('tflops', 91661.0, "
                  "'TFLOP/s', peak_key='bf16')}, negative_control=control_fails)",
    "raises": "def boom(case, ctx):\n    raise RuntimeError('illegal memory access (simulated)')\n"
              "Probe(__file__).main(run_case=boom, negative_control=control_fails)",
    "bad-schema": "Probe(__file__).main(run_case=lambda c, x: {'correctness': {'passed': True}, 'surprise': 1}, "
                  "negative_control=control_fails)",
    "no-control": "Probe(__file__).main(run_case=good)",
    "unavailable": "Probe(__file__).main(run_case=good, negative_control=control_fails, "
                   "unavailable=lambda: 'flash_mla not importable; source .device/flashmla-dense.sh')",
    "compiles": "Probe(__file__).main(compile=lambda arch: Emitted(arch, ptx='... wgmma.mma_async.sync ...', "
                "sass='HGMMA.64x64x16'))",
    "compiles-partly": "Probe(__file__).main(compile=lambda arch: Emitted(arch, ptx='mma.sync', sass=None))",
}


def add_probe(mini: MiniRepo, name: str, body: str, *, arch: str = "sm_90a", kind: str = "kernel",
              requires: str = "[]", value: float = 110.0) -> str:
    probe_id = f"probe-{name}"
    mini.write(f"probes/{probe_id}/probe.yaml", PROBE_YAML.format(id=probe_id, kind=kind, arch=arch, requires=requires))
    mini.write(f"probes/{probe_id}/run.py", HEADER.format(value=value) + BODIES[body] + "\n")
    page = mini.root / "wiki/hardware/example.md"
    text = page.read_text()
    if "probes:\n" not in text:
        text = text.replace("summary:", "probes:\nsummary:", 1)
    page.write_text(text.replace("probes:\n", f"probes:\n- {probe_id}\n", 1))
    return probe_id


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)


def _run(mini: MiniRepo, *args: str) -> tuple[int, str, str]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from kernelwiki.faces.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["probe", "run", "--root", str(mini.root), *args])
    return code, out.getvalue(), err.getvalue()


def records(mini: MiniRepo, probe_id: str) -> list[dict]:
    return [json.loads(record_text(p)) for p in record_files(mini.root / "artifacts/evidence" / probe_id)]


def test_passing_probe_writes_a_valid_record_and_refreshes_the_page(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing")
    code, out, err = _run(mini, "--probe", probe_id, "--seed", "7")
    assert code == 0, err
    [record] = records(mini, probe_id)
    assert record["status"] == "passed" and record["seed"] == 7 and record["environment"]["gpu"] == "NVIDIA H200"
    assert record["negative_control"]["failed_gate"] is True
    assert record["cases"][0]["headline"]["ratio"] == 1.1
    assert "probe-ok  c1                  passed       tflops  110 TFLOP/s  cuBLAS 100  1.100" in out
    assert "refreshed wiki/hardware/example.md" in err
    assert mini.problems() == []
    page = (mini.root / "wiki/hardware/example.md").read_text()
    assert "evidence_level: measured" in page and "id: measured.ok.c1" in page and "reproduces: peak" in page
    assert "status: verified" in page
    assert mini.run("refresh", "--check")[0] == 0


@pytest.mark.parametrize("body, status, reason", [
    ("crash", "crashed", "killed by signal SIGABRT"),
    ("incorrect", "incorrect", "failed the correctness gate: c1"),
    ("control-passes", "control-passed", "passed the gate, so the gate proves nothing"),
    ("control-blunt", "control-too-blunt", "not shown to be tight: rel: blunt 230x"),
    ("impossible", "failed", "case c1: headline 91661 TFLOP/s is 92.68x the datasheet peak"),
    ("raises", "failed", "illegal memory access (simulated)"),
    ("bad-schema", "failed", "fails the record schema"),
    ("no-control", "failed", "the negative control did not run"),
])
def test_every_failure_is_recorded_and_the_run_goes_on(mini, gpu, body, status, reason):
    bad = add_probe(mini, "bad", body)
    good = add_probe(mini, "good", "passing")
    code, out, err = _run(mini, "--probe", bad, "--probe", good)
    assert code == 1
    [record] = records(mini, bad)
    assert record["status"] == status and reason in record["reason"], record
    assert record["log_tail"] is not None
    assert records(mini, good)[0]["status"] == "passed"  # the run went on
    assert mini.problems() == []  # every record written is schema-valid
    page = (mini.root / "wiki/hardware/example.md").read_text()
    assert "status: regressed" in page


def test_hang_is_killed_at_the_timeout(mini, gpu):
    probe_id = add_probe(mini, "hang", "hang")
    start = time.monotonic()
    code, _, _ = _run(mini, "--probe", probe_id, "--timeout", "2")
    assert code == 1 and time.monotonic() - start < 20
    [record] = records(mini, probe_id)
    assert record["status"] == "timeout" and "no result within 2 s" in record["reason"]


def test_skip_reasons(mini, monkeypatch):
    wrong_arch = add_probe(mini, "blackwell", "passing", arch="sm_100a")
    needs = add_probe(mini, "needs", "passing", requires="[no_such_module_kw]")
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)
    code, out, err = _run(mini, "--all")
    assert code == 0
    assert f"{wrong_arch}: skipped: requires sm_100a; this GPU is sm_90a" in err
    assert f"{needs}: skipped: missing Python module no_such_module_kw" in err
    library = add_probe(mini, "library", "unavailable")
    code, out, err = _run(mini, "--probe", library)
    assert code == 0 and f"{library}: skipped (flash_mla not importable; source .device/flashmla-dense.sh)" in err
    assert not (mini.root / "artifacts/evidence" / library).exists()
    tool = add_probe(mini, "tool", "passing")
    spec = mini.root / f"probes/{tool}/probe.yaml"
    spec.write_text(spec.read_text() + "tools: [no-such-compiler-kw]\n")
    code, out, err = _run(mini, "--probe", tool)
    assert f"{tool}: skipped: missing tool no-such-compiler-kw (not on PATH)" in err
    monkeypatch.delenv("KERNELWIKI_FAKE_GPU")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    code, _, err = _run(mini, "--probe", wrong_arch)
    assert "skipped: no GPU on this machine" in err
    assert not (mini.root / "artifacts/evidence").exists()


def test_compile_only(mini):
    ok = add_probe(mini, "compiles", "compiles")
    partly = add_probe(mini, "partly", "compiles-partly")
    code, out, err = _run(mini, "--all", "--compile-only")
    assert code == 1
    assert records(mini, ok)[0]["status"] == "compiled"
    assert records(mini, ok)[0]["instructions"]["sm_90a"]["found"] == ["wgmma.mma_async", "HGMMA"]
    failed = records(mini, partly)[0]
    assert failed["status"] == "compile-failed" and "missing wgmma.mma_async, HGMMA" in failed["reason"]
    assert "sm_90a  compiled        instructions  2/2 found" in out


def test_no_record_writes_nothing(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing")
    code, _, _ = _run(mini, "--probe", probe_id, "--no-record")
    assert code == 0 and not (mini.root / "artifacts/evidence").exists()


def test_lock_stops_a_second_runner(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing")
    with runner_lock(Repo(mini.root)):
        code, _, err = _run(mini, "--probe", probe_id)
    assert code == 2 and "another probe runner (pid" in err


def test_selection_errors(mini):
    assert _run(mini)[0] == 2
    code, _, err = _run(mini, "--probe", "probe-nope")
    assert code == 2 and "no probe 'probe-nope'" in err
    code, _, err = _run(mini, "--page", "hw-example")
    assert code == 2 and "no probe backs page(s) hw-example" in err


def test_page_selection_runs_its_probes(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing")
    assert _run(mini, "--page", "hw-example")[0] == 0
    assert records(mini, probe_id)


def test_a_drop_of_more_than_ten_percent_regresses(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing", value=110.0)
    _run(mini, "--probe", probe_id)
    (mini.root / f"probes/{probe_id}/run.py").write_text(HEADER.format(value=95.0) + BODIES["passing"] + "\n")
    time.sleep(1.1)  # a new run id
    _run(mini, "--probe", probe_id)
    assert [r["status"] for r in records(mini, probe_id)] == ["passed", "passed"]
    page = (mini.root / "wiki/hardware/example.md").read_text()
    assert "status: regressed" in page and "value: 95.0" in page


def test_toolchain_other_than_the_pins_is_stale(mini, gpu):
    probe_id = add_probe(mini, "ok", "passing")
    _run(mini, "--probe", probe_id)
    path = record_files(mini.root / "artifacts/evidence" / probe_id)[0]
    record = json.loads(record_text(path))
    record["environment"]["torch"] = "2.9.1"
    write_record_text(path, json.dumps(record))
    (mini.root / "pyproject.toml").write_text('[tool.kernelwiki]\npins = { torch = "2.11" }\n')
    assert mini.run("refresh", "--check")[0] == 1
    mini.run("refresh")
    assert "status: stale" in (mini.root / "wiki/hardware/example.md").read_text()


def test_shuffled_timing_order_varies_predecessors_and_is_reproducible():
    from kernelwiki.harness.timing import iteration_order

    names = ["ours", "cuBLAS blockwise", "cuBLAS per-tensor", "cuBLAS bf16"]
    assert [iteration_order(names, i, "interleaved") for i in range(3)] == [names] * 3
    orders = [iteration_order(names, i, "shuffled") for i in range(30)]
    assert orders == [iteration_order(names, i, "shuffled") for i in range(30)]   # seeded by the iteration
    assert all(sorted(o) == sorted(names) for o in orders)
    # over a run, "ours" follows more than one candidate (a rotation would keep its predecessor)
    predecessors = {o[o.index("ours") - 1] for o in orders if o.index("ours") > 0}
    assert len(predecessors) >= 2
    with pytest.raises(ValueError, match="order 'rotated' unknown"):
        iteration_order(names, 0, "rotated")


def test_tool_output_parsing(monkeypatch):
    from kernelwiki.harness import tools

    good = tools.driver_line({"passed": True, "rel_err": 1.5e-3})
    bad = tools.driver_line({"passed": False, "rel_err": 0.9})
    assert tools.driver_result("noise\n" + good + "\n") == {
        "driver_ran": True, "output_ok": True, "gate": {"passed": True, "rel_err": 1.5e-3}}
    assert tools.driver_result("Traceback ...")["driver_ran"] is False
    printed = {"memcheck": good + "\n========= ERROR SUMMARY: 0 errors\n",
               "racecheck": good + "\n========= RACECHECK SUMMARY: 2 hazards displayed\n",
               "broken": bad + "\n========= ERROR SUMMARY: 0 errors\n"}
    monkeypatch.setattr(tools, "run", lambda command, timeout=300: printed[command[2]])
    assert tools.sanitize("memcheck", ["driver.py"])["passed"] is True
    racy = tools.sanitize("racecheck", ["driver.py"])
    assert racy["tool_errors"] == 2 and racy["passed"] is False
    assert tools.sanitize("broken", ["driver.py"])["passed"] is False       # wrong output, clean tool
    monkeypatch.setattr(tools, "run", lambda command, timeout=300:
                        "  sm__throughput.avg.pct_of_peak_sustained_elapsed   %   1,234.5\n")
    values, _ = tools.profile("Gemm", ["sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum"], [])
    assert values == {"sm__throughput.avg.pct_of_peak_sustained_elapsed": 1234.5, "dram__bytes.sum": None}

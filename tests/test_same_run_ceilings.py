"""Ceilings measured in the same invocation by the same protocol (issue 23): a probe that quotes
measured ceilings gets them only from the calibration the runner ran first in that invocation,
named by its run id; never from a committed calibration record of another run. On fake GPUs with
fake probes; no GPU needed."""

from __future__ import annotations

import pytest

from conftest import MiniRepo
from test_runner import FAKE_GPU, HEADER, _run, add_probe, records

CALIBRATION_YAML = """id: probe-calib
title: Fake calibration
kind: calibration
pages:
- hw-example
archs:
- sm_90a
requires: []
entry: run.py
timeout_s: 30
cases:
- id: cal-bf16
  params: {ceiling: bf16, dtype: bf16, shape: 8192x8192x8192}
negative_control: corrupt one element
"""

CALIBRATION = """
def cal(case, ctx):
    ctx.protocol["method"] = "bench"   # what ctx.bench records
    return {{"correctness": {{"passed": True, "rel_err": 1e-3, "tolerance": 2e-2}},
            "headline": ctx.headline("tflops", {ceiling}, "TFLOP/s", peak_key="bf16")}}

Probe(__file__).main(run_case=cal, negative_control=control_fails)
"""

# A probe that quotes the bf16 ceiling (declared in probe.yaml) and notes what it was handed.
QUOTING = """
def quoting(case, ctx):
    ctx.protocol["method"] = "bench"
    return {"correctness": {"passed": True, "rel_err": 1e-3, "tolerance": 2e-2},
            "headline": ctx.headline("tflops", 400.0, "TFLOP/s", ceiling_key="bf16", baseline=("cuBLAS", 380.0))}

Probe(__file__).main(run_case=quoting, negative_control=control_fails)
"""


@pytest.fixture
def gpu(monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", FAKE_GPU)


def calibration(mini: MiniRepo, ceiling: float | None) -> str:
    """The fake calibration probe measuring a bf16 ceiling of `ceiling` TFLOP/s (None: it crashes)."""
    probe_id = "probe-calib"
    if not (mini.root / f"probes/{probe_id}").exists():   # the page lists it once
        add_probe(mini, "calib", "passing", kind="calibration")
    mini.write(f"probes/{probe_id}/probe.yaml", CALIBRATION_YAML)
    body = "import os\nos.abort()\n" if ceiling is None else CALIBRATION.format(ceiling=ceiling)
    mini.write(f"probes/{probe_id}/run.py", HEADER.format(value=0) + body)
    return probe_id


def quoting_probe(mini: MiniRepo, cases: int = 1) -> str:
    probe_id = add_probe(mini, "quoting", "passing")
    spec = mini.root / f"probes/{probe_id}/probe.yaml"
    more = "".join(f"- id: c{i}\n  params: {{dtype: bf16, shape: 64x64x64}}\n" for i in range(2, cases + 1))
    spec.write_text(spec.read_text().replace("expected_instructions:", more + "expected_instructions:")
                    + "ceilings:\n- bf16\n")
    mini.write(f"probes/{probe_id}/run.py", HEADER.format(value=0) + QUOTING)
    return probe_id


def committed_calibration(mini: MiniRepo, ceiling: float) -> dict:
    """A calibration record of an earlier invocation, as the tree holds them."""
    probe_id = calibration(mini, ceiling)
    code, _, err = _run(mini, "--probe", probe_id, "--no-refresh")
    assert code == 0, err
    [record] = records(mini, probe_id)
    assert record["status"] == "passed" and record["cases"][0]["headline"]["value"] == ceiling
    return record


def test_a_probe_run_alone_gets_the_ceilings_of_a_calibration_run_first_in_the_same_invocation(mini, gpu):
    old = committed_calibration(mini, 555.0)
    calibration(mini, 800.0)
    quoting = quoting_probe(mini)
    code, out, err = _run(mini, "--probe", quoting)   # calibration not selected
    assert code == 0, err
    assert err.index("probe-calib: running") < err.index(f"{quoting}: running")
    fresh = [r for r in records(mini, "probe-calib") if r["run_id"] != old["run_id"]]
    assert len(fresh) == 1 and fresh[0]["protocol"]["seed"] is not None
    [record] = records(mini, quoting)
    # the committed record's 555 must not reach it: the ceilings are this invocation's, named by its run id
    assert record["ceilings"]["run_id"] == fresh[0]["run_id"] != old["run_id"]
    assert record["ceilings"]["bf16"] == 800.0 and record["ceilings"]["record"].endswith(fresh[0]["run_id"] + ".json.gz")
    assert record["ceilings"]["protocol"] == fresh[0]["protocol"]["method"] == "bench"
    assert record["cases"][0]["headline"]["fraction_of_ceiling"] == 0.5
    page = (mini.root / "wiki/hardware/example.md").read_text()
    assert "fraction_of_ceiling: 0.5" in page
    assert mini.problems() == [] and mini.run("refresh", "--check")[0] == 0


def test_a_failed_calibration_leaves_the_later_probes_ceilings_null_with_the_reason(mini, gpu):
    committed_calibration(mini, 555.0)
    calibration(mini, None)   # crashes in this invocation
    quoting = quoting_probe(mini)
    code, out, err = _run(mini, "--probe", quoting, "--no-refresh")
    assert code == 1   # the calibration crashed
    [record] = records(mini, quoting)
    assert record["status"] == "passed"
    ceilings = record["ceilings"]
    assert ceilings["run_id"] is None and ceilings["bf16"] is None and 555.0 not in ceilings.values()
    assert "probe-calib crashed in this run" in ceilings["reason"] and "SIGABRT" in ceilings["reason"]
    assert "fraction_of_ceiling" not in record["cases"][0]["headline"]
    code, _, _ = mini.run("refresh")
    assert "fraction_of_ceiling" not in (mini.root / "wiki/hardware/example.md").read_text()


def test_a_case_run_still_calibrates_whole_and_runs_only_its_case(mini, gpu):
    calibration(mini, 800.0)
    quoting = quoting_probe(mini, cases=2)
    code, _, err = _run(mini, "--probe", quoting, "--case", "c2", "--no-refresh")
    assert code == 0, err
    [cal] = records(mini, "probe-calib")
    assert [c["id"] for c in cal["cases"]] == ["cal-bf16"]
    [record] = records(mini, quoting)
    assert [c["id"] for c in record["cases"]] == ["c2"] and record["ceilings"]["run_id"] == cal["run_id"]


def test_no_calibration_when_nothing_quotes_a_ceiling_or_only_compiling(mini, gpu):
    calibration(mini, 800.0)
    plain = add_probe(mini, "plain", "passing")
    code, _, err = _run(mini, "--probe", plain, "--no-refresh")
    assert code == 0, err
    assert "probe-calib" not in err and not records(mini, "probe-calib")
    assert "ceilings" not in records(mini, plain)[0]   # it declares none, so it quotes none
    code, _, err = _run(mini, "--all", "--case", "c1", "--no-refresh")   # selected, but no probe quotes it
    assert "probe-calib: skipped: none of the cases c1" in err and not records(mini, "probe-calib")


def test_each_gpu_quotes_its_own_calibration_of_the_same_invocation(mini, gpu, monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", "2")
    committed_calibration(mini, 555.0)
    calibration(mini, 800.0)
    quoting = quoting_probe(mini, cases=2)
    code, _, err = _run(mini, "--probe", quoting, "--gpus", "all", "--no-refresh")
    assert code == 0, err
    fresh = {r["environment"]["gpu_index"]: r["run_id"] for r in records(mini, "probe-calib") if "batch" in r}
    quoted = records(mini, quoting)
    assert sorted(fresh) == [0, 1] and len(quoted) == 2   # the two cases split over the GPUs
    for record in quoted:
        assert record["ceilings"]["run_id"] == fresh[record["environment"]["gpu_index"]]


def test_validate_refuses_a_ceiling_no_calibration_measures(mini):
    calibration(mini, 800.0)
    quoting = quoting_probe(mini)
    spec = mini.root / f"probes/{quoting}/probe.yaml"
    spec.write_text(spec.read_text().replace("ceilings:\n- bf16\n", "ceilings:\n- copy\n"))
    found = [p for p in mini.problems() if p["field"] == "ceilings[0]"]
    assert len(found) == 1 and "no calibration probe measures a ceiling 'copy'" in found[0]["message"]


def test_every_probe_that_quotes_a_ceiling_declares_it():
    """A probe whose code reads a ceiling (ceiling_key=, ctx.ceilings) that its probe.yaml does not
    declare would run without calibration and quote nothing; one that declares a ceiling it never
    reads costs every run of it a calibration."""
    import re
    from pathlib import Path

    from kernelwiki.model import yamlio

    root = Path(__file__).resolve().parents[1] / "probes"
    use = re.compile(r"""ceiling_key=["']([a-z0-9_-]+)|ctx\.ceilings(?:\.get\(|\[)["']([a-z0-9_-]+)""")
    checked = 0
    for spec_path in sorted(root.glob("*/probe.yaml")):
        spec, _ = yamlio.load(spec_path.read_text(encoding="utf-8"))
        if spec.get("kind") == "calibration":
            continue
        used = {a or b for script in spec_path.parent.rglob("*.py") for a, b in use.findall(script.read_text(encoding="utf-8"))}
        assert set(spec.get("ceilings") or []) == used, spec_path
        checked += bool(used)
    assert checked >= 8


def test_the_calibration_probe_times_by_the_one_protocol():
    """The ceilings are divided into numbers timed by ctx.bench; a calibration timed another way
    (events around one launch, a memset flush) would skew every fraction of it."""
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "probes/probe-calibration/calibrate.py").read_text(encoding="utf-8")
    assert script.count("ctx.bench(") == 2 and "ctx.timer(" not in script and "Event(" not in script


def test_with_calibration_adds_the_calibration_probes_only_to_a_run_that_quotes_ceilings():
    from pathlib import Path

    from kernelwiki.probing.specs import ProbeSpec, with_calibration

    def spec(probe_id: str, **data) -> ProbeSpec:
        return ProbeSpec(probe_id, Path("."), {"id": probe_id, **data})

    probes = {p.id: p for p in (spec("probe-calibration", kind="calibration"), spec("probe-a", kind="kernel", ceilings=["copy"]),
                                spec("probe-b", kind="kernel"))}
    quoting, plain = [probes["probe-a"]], [probes["probe-b"]]
    assert [p.id for p in with_calibration(quoting, probes, "run")] == ["probe-calibration", "probe-a"]
    assert with_calibration(quoting, probes, "compile-only") == quoting   # CI's compile pass runs no GPU work
    assert with_calibration(plain, probes, "run") == plain
    both = with_calibration([probes["probe-calibration"], *quoting], probes, "run")
    assert [p.id for p in both] == ["probe-calibration", "probe-a"]   # never twice


@pytest.mark.parametrize("key", ["[bf16, x]", "{bf16: 1}", "run_id", "record"])
def test_a_ceiling_key_that_is_no_name_is_refused_and_overwrites_nothing(mini, gpu, key):
    """Issue 38: a calibration case whose params.ceiling is a list or a dict raised TypeError; one named
    run_id or record silently overwrote the ceilings' own fields."""
    calibration(mini, 800.0)
    spec = mini.root / "probes/probe-calib/probe.yaml"
    spec.write_text(spec.read_text().replace("{ceiling: bf16,", f"{{ceiling: {key},"))
    quoting = quoting_probe(mini)
    code, out, err = _run(mini, "--probe", quoting, "--no-refresh")
    assert "Traceback" not in err, err
    [calibrated], [record] = records(mini, "probe-calib"), records(mini, quoting)
    assert record["ceilings"]["run_id"] == calibrated["run_id"] and record["ceilings"]["bf16"] is None
    assert str(record["ceilings"]["record"]).endswith(calibrated["run_id"] + ".json.gz")
    found = [p for p in mini.problems() if p["field"] == "cases[0].params.ceiling"]
    assert found and found[0]["path"] == "probes/probe-calib/probe.yaml", found


def test_a_record_that_read_its_ceilings_from_another_run_quotes_no_fraction_of_them():
    """Records before the same-run rule name another run's calibration record (`ceilings.record`, no
    run id): their fraction_of_ceiling compares two runs and reaches no claim, chart or strip."""
    from kernelwiki.storage.records import Record

    head = {"value": 400.0, "fraction_of_ceiling": 0.5}
    other = Record("artifacts/evidence/p/old.json",
                   {"ceilings": {"record": "artifacts/evidence/probe-calibration/20261129T161703Z-h200-run.json",
                                 "bf16": 800.0}})
    same = Record("artifacts/evidence/p/new.json", {"ceilings": {"run_id": "20261201T200321Z-h200-run", "bf16": 800.0}})
    assert other.fraction_of_ceiling(head) is None and same.fraction_of_ceiling(head) == 0.5

"""The compact form of run records (kernelwiki.storage.record_form): what the runner writes is
smaller, readers see each timing entry whole, and a `timing_shared` that cannot be merged back is
a problem line, never a guess."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, messages
from test_timing_bench import FakeDevice, kernel

from kernelwiki.harness import timing
from kernelwiki.probing.runner import _write_record
from kernelwiki.storage.record_file import read_text, record_text
from kernelwiki.storage.record_form import compact, expand, round_floats
from kernelwiki.storage.records import load_records, probe_ids, scan
from kernelwiki.storage.repo import Repo


def _dump(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _bench_case() -> dict:
    device = FakeDevice()
    candidates = {"ours": kernel(device, 0.0123456789), "cuBLAS": kernel(device, 0.0111111111),
                  "quack": kernel(device, 0.0133333333)}
    entries = timing.bench(candidates, lambda i: i, 10 * 2**20, iters=4, warmup=1, device=device)
    return {"id": "c1", "status": "passed", "correctness": {"passed": True, "rel_err": 0.0016614811210625374},
            "timing": entries, "headline": {"metric": "tflops", "value": 234.2444, "ratio": 0.9337}}


def test_bench_entries_share_their_protocol_once_and_expand_back_whole():
    case = _bench_case()
    [written] = compact({"cases": [case]})["cases"]
    shared = written["timing_shared"]
    assert {"method", "input_sets", "set_bytes", "l2_rotation", "floor_ms"} <= set(shared["protocol"])
    assert shared["sm_clock_mhz_before"] == 1980.0
    for entry in written["timing"].values():
        assert set(entry) & set(shared) <= {"protocol"} and "floor_ms" not in entry.get("protocol", {})
    assert len(_dump(written)) < 0.75 * len(_dump(case))
    [read] = expand(json.loads(_dump({"cases": [written]})))["cases"]
    # Field order included: what bench returned, with its floats rounded and nothing else changed.
    assert _dump(read["timing"]) == _dump(round_floats(case["timing"]))
    assert list(read["timing"]["ours"]["protocol"]) == list(case["timing"]["ours"]["protocol"])


def test_only_measured_floats_are_rounded():
    record = {"environment": {"memory_gib": 139.83333333},
              "negative_control": {"correctness": {"rel_err": 0.008978587968068363}, "error_over_gate": 4.324},
              "cases": [_bench_case()]}
    written = compact(record)
    assert written["negative_control"] == {"correctness": {"rel_err": 0.00897859}, "error_over_gate": 4.324}
    assert written["environment"] == record["environment"]   # not measured per case: left as written
    [case] = written["cases"]
    assert case["correctness"]["rel_err"] == 0.00166148
    assert case["headline"] == record["cases"][0]["headline"]   # the page's numbers are the probe's own
    assert case["timing"]["ours"]["median_ms"] == pytest.approx(0.0123456789, rel=5e-6)
    assert record["cases"][0]["timing"]["ours"]["median_ms"] != case["timing"]["ours"]["median_ms"]   # not in place


def test_entries_that_expand_could_not_restore_stay_whole():
    # Not bench's field order: merged back, the fields would come out in bench's order instead.
    timing_ = {"a": {"p10_ms": 1.0, "median_ms": 2.0, "note": "x"}, "b": {"p10_ms": 1.5, "median_ms": 2.5, "note": "x"}}
    [case] = compact({"cases": [{"id": "c", "status": "passed", "timing": timing_}]})["cases"]
    assert "timing_shared" not in case and case["timing"] == timing_
    # A candidate whose protocol is not bench's mapping keeps it; the others still share theirs.
    mixed = {"ours": {"median_ms": 1.0, "sm_clock_mhz_after": 1980.0, "protocol": {"method": "short"}},
             "DeepGEMM": {"median_ms": 2.0, "sm_clock_mhz_after": 1980.0, "protocol": "DeepGEMM's bench"}}
    [case] = compact({"cases": [{"id": "c", "status": "passed", "timing": mixed}]})["cases"]
    assert case["timing_shared"] == {"sm_clock_mhz_after": 1980.0}
    assert expand({"cases": [case]})["cases"][0]["timing"] == mixed


def _probe(mini) -> None:
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "print('hi')\n")


def _record(case: dict) -> dict:
    return {"schema_version": 1, "probe": "probe-x", "run_id": "run1", "mode": "run", "status": "passed",
            "started_at": "2026-11-29T00:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
            "negative_control": {"description": "broken", "failed_gate": True}, "cases": [case]}


def test_the_runner_writes_the_compact_form_and_readers_get_it_whole(mini):
    _probe(mini)
    repo = Repo(mini.root)
    record, case = _record(_bench_case()), _bench_case()
    _write_record(repo, "probe-x", record)
    on_disk = json.loads(read_text(mini.root / "artifacts/evidence/probe-x/run1.json.gz"))
    assert "timing_shared" in on_disk["cases"][0]
    [read] = load_records(repo)["probe-x"]
    assert _dump(read.data["cases"][0]["timing"]) == _dump(round_floats(case["timing"]))
    assert [p for p in mini.problems() if p["path"].startswith("artifacts/")] == []


SHARED = {"sm_clock_mhz_after": 1980.0, "protocol": {"method": "short", "floor_ms": 0.0009}}


@pytest.mark.parametrize("case, field, message", [
    ({"timing_shared": SHARED}, "cases[0].timing_shared", "shared by no timing entry"),
    ({"timing_shared": SHARED, "timing": {"ours": {"median_ms": 1.0, "sm_clock_mhz_after": 1755.0}}},
     "cases[0].timing.ours.sm_clock_mhz_after", "also in cases[0].timing_shared: a field is shared or the entry's own"),
    ({"timing_shared": SHARED, "timing": {"ours": {"median_ms": 1.0, "protocol": {"floor_ms": 0.001}}}},
     "cases[0].timing.ours.protocol.floor_ms", "also in cases[0].timing_shared.protocol"),
    ({"timing_shared": SHARED, "timing": {"ours": {"median_ms": 1.0, "protocol": "DeepGEMM's bench"}}},
     "cases[0].timing.ours.protocol", "is not an object, so it cannot take cases[0].timing_shared.protocol"),
    ({"timing_shared": SHARED, "timing": {"ours": 0.5}}, "cases[0].timing.ours", "is not an object"),
    ({"timing_shared": {"protocol": "short"}, "timing": {"ours": {"median_ms": 1.0}}},
     "cases[0].timing_shared.protocol", "must be a mapping"),   # the schema's word
    ({"timing_shared": {"protocol": {}}, "timing": {"ours": {"median_ms": 1.0, "protocol": "short"}}},
     "cases[0].timing.ours.protocol", "is not an object"),   # issue 38: a TypeError in expand
])
def test_a_timing_shared_that_cannot_be_merged_back_is_a_problem_and_the_record_is_refused(mini, case, field, message):
    _probe(mini)
    record = _record({"id": "c1", "status": "passed", "headline": {"metric": "tflops", "value": 1.0}, **case})
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record))
    found = [p for p in mini.problems() if p["path"] == "artifacts/evidence/probe-x/run1.json"]
    assert [(p["line"], p["field"]) for p in found] == [("1", field)] and message in found[0]["message"], messages(found)
    assert load_records(Repo(mini.root), quiet=True) == {}


def test_an_empty_shared_protocol_and_a_string_one_crash_no_command(mini):
    """Issue 38: `timing_shared.protocol: {}` with a string `protocol` in one entry raised TypeError in
    validate, refresh and probe list; CI could not even name the bad file."""
    _probe(mini)
    record = _record({"id": "c1", "status": "passed", "headline": {"metric": "tflops", "value": 1.0},
                      "timing_shared": {"protocol": {}}, "timing": {"ours": {"median_ms": 1.0, "protocol": "x"}}})
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record))
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from kernelwiki.faces.cli import main

    for argv in (("validate",), ("refresh", "--check"), ("probe", "list")):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([*argv, "--root", str(mini.root)])
        assert "Traceback" not in out.getvalue() + err.getvalue() and code in (0, 1), (argv, code, err.getvalue())
    assert "artifacts/evidence/probe-x/run1.json:1: cases[0].timing.ours.protocol:" in mini.run("validate")[1]


def test_the_committed_records_are_in_the_compact_form():
    """The form readers expand is the one on disk: a record written by an older runner (or by hand)
    would carry every digit and every repeated protocol again."""
    repo = Repo(ROOT)
    for record in scan(repo, probe_ids(repo)):
        text = read_text(record.path)
        assert text == record_text(compact(record.data)), (
            f"{record.rel} is not in the compact form: rewrite it with "
            "kernelwiki.storage.record_file.record_text(kernelwiki.storage.record_form.compact(data))")

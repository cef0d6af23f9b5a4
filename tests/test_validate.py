"""validate: every kind of bad input gives `path:line: field: message` and exit 1, never a traceback."""

from __future__ import annotations

import json

import pytest

from conftest import HW_PAGE, ROOT, messages
from kernelwiki.faces.cli import main


def test_embedded_wiki_is_valid(capsys):
    assert main(["validate", "--root", str(ROOT), "--no-cache"]) == 0, capsys.readouterr().out


def test_mini_repo_is_valid(mini):
    assert mini.problems() == []


@pytest.mark.parametrize(
    "content, line, field, fragment",
    [
        (b"", 1, "-", "empty file"),
        (b"   \n\n", 1, "-", "empty file"),
        (b"# no frontmatter\n", 1, "-", "first line must be '---'"),
        (b"---\nid: hw-x\ntitle: x\n", 1, "-", "never closed"),
        (b"---\nid: [unclosed\n---\n", 3, "-", "YAML"),
        (b"---\n- a\n- b\n---\nbody\n", 2, "-", "got a list"),
        (b"---\n'just text'\n---\n", 2, "-", "got a str"),
        (b"---\n---\nbody\n", 2, "-", "got nothing"),
        (b"---\nid: hw-bad\nid: hw-bad\n---\n", 3, "id", "duplicate key"),
        (b"---\nid: hw-bad\ntitle: \xff\xfe bad\n---\n", 3, "-", "not valid UTF-8"),
        (b"---\n? [a, b]\n: 1\n---\n", 2, "-", "keys must be plain text"),
    ],
)
def test_unreadable_pages(mini, content, line, field, fragment):
    mini.write("wiki/hardware/bad.md", content)
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/bad.md"]
    assert problems, "expected a problem"
    first = problems[0]
    assert (int(first["line"]), first["field"]) == (line, field), messages(problems)
    assert fragment in first["message"]


def test_bom_and_crlf_are_reported_and_fixed(mini):
    text = HW_PAGE.replace("hw-example", "hw-crlf").replace("skill-example", "skill-crlf")
    mini.write("wiki/hardware/crlf.md", b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    found = messages(mini.problems())
    assert "wiki/hardware/crlf.md:1: -: file starts with a UTF-8 byte-order mark" in found
    assert "wiki/hardware/crlf.md:1: -: CRLF (or CR) line endings" in found
    code, _, err = mini.run("validate", "--fix")
    assert code == 0 and "fixed: wiki/hardware/crlf.md" in err
    raw = (mini.root / "wiki/hardware/crlf.md").read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf") and b"\r" not in raw
    assert raw.endswith(b"Body text about wgmma and the example feature.\n")


def test_non_canonical_frontmatter_is_reported_and_fixed(mini):
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("tags:\n- wgmma", "tags: [wgmma]"))
    found = mini.problems()
    assert len(found) == 1 and "canonical form" in found[0]["message"]
    assert found[0]["line"] == "10"
    assert mini.run("validate", "--fix")[0] == 0
    assert "tags:\n- wgmma\n" in page.read_text()
    assert mini.problems() == []


def edit(mini, old: str, new: str, rel: str = "wiki/hardware/example.md") -> list[dict]:
    path = mini.root / rel
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return mini.problems()


@pytest.mark.parametrize(
    "old, new, field, fragment",
    [
        ("type: hardware", "type: hardwar", "type", "'hardware'"),
        ("title: An example hardware feature\n", "", "title", "required field is missing"),
        ("tags:\n- wgmma", "tags: wgmma", "tags", "must be a list, got text"),
        ("tags:\n- wgmma", "tgas:\n- wgmma", "tgas", "did you mean 'tags'"),
        ("tags:\n- wgmma", "tags:\n- wgmmma", "tags[0]", "did you mean 'wgmma'"),
        ("- sm_90a\ntags", "- sm_9a\ntags", "architectures[0]", "unknown architecture"),
        ("  value: 100", "  value: [100]", "claims[0].value", "must be a number or text or true or false"),
        ("  source: src-example", "  source: src-nowhere", "claims[0].source", "no source page with id 'src-nowhere'"),
        ("  evidence: source-reported\n  source: src-example\n", "  evidence: source-reported\n", "claims[0].source", "required field is missing"),
        ("  evidence: source-reported", "  evidence: measured", "claims[0].record", "required field is missing"),
        ("  dtype: bf16", "  dtype: bfloat16", "claims[0].dtype", "unknown dtype"),
        ("sources:\n- src-example\n", "sources:\n- src-example\nrelated:\n- hw-nope\n", "related[0]", "no page with id 'hw-nope'"),
        ("sources:\n- src-example\n", "sources: []\n", "sources", "at least one source"),
        ("id: hw-example", "id: example", "id", "must start with 'hw-'"),
        ("id: hw-example", "id: hw-elsewhere", "id", "belongs at wiki/hardware/elsewhere.md"),
        ("summary:", "evidence_level: measured\nsummary:", "evidence_level", "no claim with evidence measured"),
        ("summary:", "evidence_by_arch:\n  sm_90a: compiled\nsummary:", "evidence_by_arch.sm_90a", "no compiled claim"),
        ("summary:", "artifact_dir: artifacts/kernels/none\nsummary:", "artifact_dir", "does not exist"),
        ("summary:", "artifact_dir: ../../outside\nsummary:", "artifact_dir", "leaves the repository"),
        ("summary:", "probes:\n- probe-nope\nsummary:", "probes[0]", "no probe probes/probe-nope"),
    ],
)
def test_bad_fields(mini, old, new, field, fragment):
    found = edit(mini, old, new)
    hits = [p for p in found if p["field"] == field and fragment in p["message"]]
    assert hits, messages(found)
    assert all(p["path"] == "wiki/hardware/example.md" for p in hits)


def test_problem_lines_point_at_the_field(mini):
    found = edit(mini, "  dtype: bf16", "  dtype: bfloat16")
    assert [(p["line"], p["field"]) for p in found] == [("21", "claims[0].dtype")]


def test_duplicate_ids_name_both_files(mini):
    mini.write("wiki/hardware/copy.md", (mini.root / "wiki/hardware/example.md").read_text())
    found = [p for p in mini.problems() if "duplicate id" in p["message"]]
    assert {p["path"] for p in found} == {"wiki/hardware/example.md", "wiki/hardware/copy.md"}
    assert all(p["line"] == "2" for p in found)


def test_alias_that_is_another_page_id(mini):
    found = edit(mini, "- skill-example", "- src-example")
    assert any("is the id of another page" in p["message"] for p in found), messages(found)


def test_measured_claim_needs_an_existing_record(mini):
    found = edit(mini, "  evidence: source-reported\n  source: src-example",
                 "  evidence: measured\n  record: artifacts/evidence/probe-x/run1.json")
    assert any(p["field"] == "claims[0].record" and "no run record" in p["message"] for p in found), messages(found)


def test_measured_page_through_a_valid_record_passes(mini):
    record = {
        "schema_version": 1, "probe": "probe-x", "run_id": "run1", "mode": "run", "status": "passed",
        "started_at": "2026-11-29T00:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
        "negative_control": {"description": "broken", "failed_gate": True},
        "cases": [{"id": "c1", "status": "passed", "headline": {"metric": "tflops", "value": 101.0}}],
    }
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record))
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "print('hi')\n")
    found = edit(mini, "summary:", "evidence_level: measured\nevidence_by_arch:\n  sm_90a: measured\nprobes:\n- probe-x\nsummary:")
    assert any("no claim with evidence measured" in p["message"] for p in found)
    text = (mini.root / "wiki/hardware/example.md").read_text()
    text = text.replace("---\n# Example", "- id: peak.measured\n  metric: tflops\n  value: 101.0\n  arch: sm_90a\n"
                        "  evidence: measured\n  record: artifacts/evidence/probe-x/run1.json\n  case: c1\n---\n# Example")
    (mini.root / "wiki/hardware/example.md").write_text(text)
    assert mini.problems() == []
    (mini.root / "wiki/hardware/example.md").write_text(text.replace("  case: c1", "  case: c9"))
    assert any("has no case 'c9'" in p["message"] for p in mini.problems())


def test_a_record_whose_ceilings_cite_a_missing_calibration_run(mini):
    """Pruning superseded calibration records once left kept records citing them for their ceilings.
    Only a same-invocation calibration (named by its run id) must stay; an older record whose
    `ceilings.record` alone named another run's shows no fraction of it, so that one may go."""
    calibration = "artifacts/evidence/probe-calibration/cal1.json"
    record = {"schema_version": 1, "probe": "probe-x", "run_id": "run1", "mode": "run", "status": "passed",
              "started_at": "2026-11-29T00:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
              "ceilings": {"record": calibration, "run_id": "cal1", "copy": 4.2}, "cases": []}
    for probe_id in ("probe-x", "probe-calibration"):
        mini.write(f"probes/{probe_id}/probe.yaml", f"id: {probe_id}\ntitle: x\nkind: microbench\npages: []\n"
                   "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
        mini.write(f"probes/{probe_id}/run.py", "print('hi')\n")
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record))
    found = [p for p in mini.problems() if p["path"].startswith("artifacts/")]
    assert messages(found) == (f"artifacts/evidence/probe-x/run1.json:1: ceilings.record: no run record {calibration}: "
                               "the calibration run its ceilings and fractions of the ceiling come from must stay")
    mini.write(calibration, json.dumps(dict(record, probe="probe-calibration", run_id="cal1", ceilings={})))
    assert [p for p in mini.problems() if p["path"].startswith("artifacts/")] == []
    (mini.root / calibration).unlink()
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(dict(record, ceilings={"record": calibration, "copy": 4.2})))
    assert [p for p in mini.problems() if p["path"].startswith("artifacts/")] == []


def test_bad_run_record_and_probe(mini):
    mini.write("artifacts/evidence/probe-y/r1.json", "{not json")
    mini.write("artifacts/evidence/probe-y/r2.json", json.dumps({"probe": "probe-z"}))
    mini.write("probes/probe-y/probe.yaml", "id: probe-q\ntitle: y\nkind: bogus\npages: [hw-nope]\narchs: [sm_90a]\n"
               "entry: missing.py\ncases: [{id: c}]\n")
    text = messages(mini.problems())
    assert "artifacts/evidence/probe-y/r1.json:1: -: not a JSON run record" in text
    assert "artifacts/evidence/probe-y/r2.json:1: probe: must equal the directory name 'probe-y'" in text
    assert "artifacts/evidence/probe-y/r2.json:1: run_id: required field is missing" in text
    assert "probes/probe-y/probe.yaml:1: id: must equal the directory name 'probe-y'" in text
    assert "probes/probe-y/probe.yaml:3: kind: \"bogus\" is not one of" in text
    assert "probes/probe-y/probe.yaml:6: entry: file missing.py not found" in text
    assert "probes/probe-y/probe.yaml:1: pages[0]: no page with id 'hw-nope'" in text


def test_provenance_hashes(mini):
    mini.write("artifacts/kernels/example/kernel.py", "print('kernel')\n")
    good = "7c6e3b2b4fb1c3b5b9d1f0d5e8ab4bd2e3c2ff6c7d16b2f5dbd9e7d0a6f1a2b3"
    import hashlib

    real = hashlib.sha256(b"print('kernel')\n").hexdigest()
    mini.write("artifacts/kernels/example/PROVENANCE.yaml",
               f"artifact: hw-example\norigin: own\nfiles:\n- path: kernel.py\n  sha256: {good}\n  origin: own\n"
               f"- path: gone.py\n  sha256: {real}\n  origin: own\n")
    text = messages(mini.problems())
    assert f"artifacts/kernels/example/PROVENANCE.yaml:5: files[0].sha256: does not match kernel.py (now {real})" in text
    assert "artifacts/kernels/example/PROVENANCE.yaml:7: files[1].path: file gone.py does not exist" in text


def test_pin_that_is_not_the_measured_revision(mini):
    """A bundle's upstream commit differs from the revision its page's probe last measured: flagged
    at the pin; the measured revision (a prefix of it) passes."""
    measured, other = "340d9880f4a418d943d34260d20a79f41f4c0526", "54e22612409371d6364144b69086735beb54e98b"
    record = {"schema_version": 1, "probe": "probe-x", "run_id": "run1", "mode": "run", "status": "passed",
              "started_at": "2026-11-29T00:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
              "protocol": {"example_kernels": {"revision": "example-kernels 340d988 cutlass eefa171"}},
              "cases": [{"id": "c1", "status": "passed"}]}
    mini.write("artifacts/evidence/probe-x/run1.json", json.dumps(record))
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               "archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-x/run.py", "print('hi')\n")
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "probes:\n- probe-x\nsummary:"))
    provenance = ("artifact: hw-example\norigin: upstream\nupstream:\n  repo: https://github.com/example-org/example-kernels\n"
                  "  commit: {}\nfiles:\n- path: include/gemm.cuh\n  sha256: {}\n  origin: upstream\n")
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", provenance.format(other, "f" * 64))
    found = [p for p in mini.problems() if p["field"] == "upstream.commit"]
    assert [p["line"] for p in found] == ["5"], messages(found)
    assert "measured example-org/example-kernels 340d988" in found[0]["message"]
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", provenance.format(measured, "f" * 64))
    assert [p for p in mini.problems() if p["field"] == "upstream.commit"] == []


def test_legacy_frontmatter_of_other_wikis_validates_unchanged(mini):
    """The field set other kernel wikis use (kernaut's KernelWiki) is accepted as it is."""
    legacy = """---
id: kernel-legacy
title: Legacy-format kernel page
type: kernel
architectures:
- sm100
- sm90
tags:
- gemm
- fp8
confidence: source-reported
evidence_level: spec
reproducibility: snippet
kernel_types:
- gemm
languages:
- cuda-cpp
related:
- hw-example
sources:
- src-example
performance_claims:
- gpu: H800
  dtype: fp8
  shape: M=4096, N=4096, K=4096
  metric: TFLOPS
  value: 1000
  utilization: ~50%
  source_id: src-example
artifact_dir: artifacts/kernels/legacy
requires_sm: '>=9.0a'
requires_features:
- wgmma
hardware_features:
- wgmma
techniques:
- warp-specialization
status: draft
measured_on: H200-SXM | sm_90a | cuda 12.9.86 | driver 570.124.06
cuda_version_tested: 12.9.86
driver_version_tested: 570.124.06
toolchain: nvcc 12.9 + ptxas 12.9
upstream_repo: cutlass@f74fea9c
vendor: nvidia
applies_to_ops:
- gemm
single_kernel_useful: true
---
# Legacy
"""
    mini.write("artifacts/kernels/legacy/.keep", "")
    mini.write("wiki/kernels/legacy.md", legacy)
    assert mini.problems() == []
    assert (mini.root / "wiki/kernels/legacy.md").read_text() == legacy
    code, out, _ = mini.run("get", "kernel-legacy", "--claims")
    assert code == 0 and "| performance-claim-0 (TFLOPS) | 1000 |  | H800 |" in out


def test_json_output(mini):
    edit(mini, "- wgmma", "- nope")
    code, out, _ = mini.run("validate", "--format", "json")
    data = json.loads(out)
    assert code == 1 and not data["ok"] and data["problems"][0]["field"] == "tags[0]"


def test_a_package_code_or_readme_source_needs_an_origin(mini):
    """src-kernaut-kernelwiki-pages (a package) had no origin, so audit --sources read none of its quotes."""
    from conftest import SOURCE_PAGE, messages

    for kind in ("package", "code", "readme"):
        mini.write("wiki/sources/example.md", SOURCE_PAGE.replace("kind: paper", f"kind: {kind}"))
        assert f"kind: a {kind} source needs `origin`" in messages(mini.problems()), kind
    mini.write("wiki/sources/example.md", SOURCE_PAGE.replace("kind: paper", "kind: readme\norigin:\n  file: notes.txt"))
    assert "needs `origin`" not in messages(mini.problems())
    mini.write("wiki/sources/example.md", SOURCE_PAGE)   # a paper may have only its URL
    assert "needs `origin`" not in messages(mini.problems())

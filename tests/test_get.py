"""get: lookups by id, alias and path; every output option; refusal of paths outside the repo."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import ROOT


def test_by_id_alias_and_path(mini):
    for name in ("hw-example", "skill-example", "SKILL-EXAMPLE", "HW-Example", "wiki/hardware/example.md",
                 str(mini.root / "wiki/hardware/example.md")):
        code, out, err = mini.run("get", name)
        assert code == 0, (name, err)
        assert out.startswith("---\nid: hw-example\n") and "Body text about wgmma" in out


def test_unknown_id_names_the_closest(mini):
    code, out, err = mini.run("get", "hw-exampel")
    assert code == 1 and out == ""
    assert "no page with id, alias or path 'hw-exampel'; closest: hw-example" in err


def test_unknown_id_with_nothing_close(mini):
    code, _, err = mini.run("get", "zzzzzz")
    assert code == 1 and "no page with id, alias or path 'zzzzzz'" in err


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "wiki/../../outside.md"])
def test_paths_outside_the_repo_are_refused(mini, name):
    code, out, err = mini.run("get", name)
    assert code == 1 and out == "" and "leaves the repository" in err


def test_symlink_out_of_the_repo_is_refused(mini, tmp_path):
    outside = tmp_path / "secret.md"
    outside.write_text("---\nid: hw-secret\n---\n")
    os.symlink(outside, mini.root / "wiki" / "link.md")
    code, out, err = mini.run("get", "wiki/link.md")
    assert code == 1 and "leaves the repository" in err and "secret" not in out


def test_parts(mini):
    _, front, _ = mini.run("get", "hw-example", "--frontmatter-only")
    assert front.startswith("id: hw-example\n") and "Body text" not in front and "---" not in front
    _, body, _ = mini.run("get", "hw-example", "--body-only")
    assert body.startswith("# Example hardware") and "id: hw-example" not in body
    _, claims, _ = mini.run("get", "hw-example", "--claims")
    assert "| peak (tflops) | 100 TFLOP/s |  | H200-SXM | sm_90a | bf16 |  |  | source-reported | src-example |" in claims


def test_mutually_exclusive_parts_exit_2(mini, capsys):
    with pytest.raises(SystemExit) as exc:
        mini.run("get", "hw-example", "--body-only", "--frontmatter-only")
    assert exc.value.code == 2


def test_follow_sources(mini):
    _, out, _ = mini.run("get", "hw-example", "--follow-sources")
    assert "## Sources cited" in out and "### src-example: An example source" in out
    assert "- url: https://example.org/paper" in out and "- fact: The example kernel reaches 100 TFLOP/s." in out


def test_json_format(mini):
    _, out, _ = mini.run("get", "hw-example", "--format", "json", "--follow-sources", "--include-code")
    data = json.loads(out)
    assert data["id"] == "hw-example" and data["frontmatter"]["claims"][0]["value"] == 100
    assert data["sources"][0]["url"] == "https://example.org/paper"
    assert data["artifacts"]["note"] == "this page has no artifact_dir" and data["probes"] == []


def _with_artifacts(mini, upstream_sha: str) -> None:
    kernel = "def kernel():\n    return '```inner fence```'\n"
    mini.write("artifacts/kernels/example/kernel.py", kernel)
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", f"""artifact: hw-example
origin: mixed
upstream:
  package: pyyaml
  version: '6.0'
files:
- path: kernel.py
  sha256: {hashlib.sha256(kernel.encode()).hexdigest()}
  origin: own
- path: yaml/__init__.py
  sha256: {upstream_sha}
  origin: upstream
- path: yaml/not_there.py
  sha256: {"a" * 64}
  origin: upstream
""")
    mini.write("probes/probe-example/probe.yaml", "id: probe-example\ntitle: Example\nkind: microbench\n"
               "pages:\n- hw-example\narchs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n")
    mini.write("probes/probe-example/run.py", "print('probe')\n")
    for run_id, started, value in (("old", "2026-11-01T00:00:00Z", 1.0), ("new", "2026-11-02T00:00:00Z", 2.5)):
        mini.write(f"artifacts/evidence/probe-example/{run_id}.json", json.dumps({
            "schema_version": 1, "probe": "probe-example", "run_id": run_id, "mode": "run", "status": "passed",
            "started_at": started, "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
            "cases": [{"id": "c1", "status": "passed",
                       "headline": {"metric": "tflops", "value": value, "unit": "TFLOP/s", "baseline": "cuBLAS",
                                    "baseline_value": 2.0, "ratio": value / 2.0}}]}))
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "artifact_dir: artifacts/kernels/example\n"
                                             "probes:\n- probe-example\nsummary:"))


def test_include_code(mini):
    init = Path(str(metadata.distribution("pyyaml").locate_file("yaml/__init__.py")))
    _with_artifacts(mini, hashlib.sha256(init.read_bytes()).hexdigest())
    assert mini.problems() == []
    code, out, _ = mini.run("get", "hw-example", "--include-code")
    assert code == 0 and out.startswith("---\nid: hw-example\n")
    assert "## Artifact bundle: artifacts/kernels/example" in out
    assert "````python\ndef kernel():" in out  # fence longer than the backticks inside
    # By default the kernel's own files are sent and the others listed with their sizes.
    assert "- yaml/__init__.py: " in out and " bytes, upstream" in out and "__version__" not in out
    assert "- probes/probe-example/run.py: 15 bytes, probe code" in out and "print('probe')" not in out
    assert "1 case(s): their headlines come with the probe's files" in out
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--files", "*")
    assert code == 0 and not out.startswith("---") and "Body text" not in out   # the code, not the page again
    assert "#### yaml/__init__.py (upstream, pyyaml 6.0" in out and "__version__" in out
    assert "pyyaml" in out and "has no yaml/not_there.py" in out
    assert "### probe-example" in out and "print('probe')" in out
    assert "Latest run record: artifacts/evidence/probe-example/new.json — passed" in out
    assert "| c1 | passed | tflops | 2.5 TFLOP/s | cuBLAS 2 | 1.25 |" in out


def test_include_code_refuses_upstream_with_wrong_hash(mini):
    _with_artifacts(mini, "f" * 64)
    _, out, _ = mini.run("get", "hw-example", "--include-code")
    assert "not the pinned " + "f" * 64 in out and "def __getattr__" not in out


def test_include_code_says_how_to_install_a_missing_package(mini):
    _with_artifacts(mini, "f" * 64)
    prov = mini.root / "artifacts/kernels/example/PROVENANCE.yaml"
    prov.write_text(prov.read_text().replace("package: pyyaml", "package: no-such-package-kw").replace(
        "version: '6.0'", "version: '1.2'"))
    _, out, _ = mini.run("get", "hw-example", "--include-code")
    assert "not installed; get it with: pip install no-such-package-kw==1.2" in out


@pytest.mark.parametrize("script, args, expect", [
    ("get_page.py", ["skill-wgmma", "--frontmatter-only"], "id: hw-wgmma"),
    ("query.py", ["UMMA", "--limit", "1"], "hw-tcgen05-mma"),
    ("validate.py", [], ""),
])
def test_scripts_entry_points(script, args, expect):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True,
                            text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert expect in result.stdout


def test_python_dash_m():
    result = subprocess.run([sys.executable, "-m", "kernelwiki", "get", "fa4", "--claims"], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 0 and "b200-bf16-peak" in result.stdout

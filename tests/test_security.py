"""The threat model (README, "Threat model"): every file under wiki/, artifacts/, probes/, schemas/,
the cache, the environment and the network is untrusted. One test per class of attack: each plants
the hostile input and checks that validate refuses it and no command acts on it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import ROOT, MiniRepo, messages, record_files, record_text, write_record_text
from kernelwiki.model.safe_links import url_scheme
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


# --- provenance reads any file -------------------------------------------------------------------
SECRET = "kernelwiki-secret-line\n"


def secret_file(tmp_path: Path) -> tuple[Path, str]:
    import hashlib

    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    return secret, hashlib.sha256(SECRET.encode()).hexdigest()


def with_artifact(mini: MiniRepo, provenance: str) -> None:
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", provenance)
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "artifact_dir: artifacts/kernels/example\nsummary:", 1))


@pytest.mark.parametrize("how", ["dotdot", "absolute"])
def test_an_upstream_path_never_leaves_its_package(mini, tmp_path, how):
    from importlib.metadata import distribution

    secret, digest = secret_file(tmp_path)
    dist = distribution("PyYAML")
    base = Path(str(dist.locate_file(""))).resolve()
    path = str(secret) if how == "absolute" else os.path.relpath(secret, base)
    with_artifact(mini, f"""artifact: hw-example
origin: upstream
upstream:
  package: PyYAML
  version: '{dist.version}'
files:
- path: {path}
  sha256: {digest}
  origin: upstream
""")
    problems = [p for p in mini.problems() if p["path"].endswith("PROVENANCE.yaml")]
    assert problems and "files[0].path" in problems[0]["field"], messages(problems)
    code, out, err = mini.run("get", "hw-example", "--include-code")
    assert SECRET.strip() not in out + err and "Traceback" not in err


def test_a_claim_locator_never_leaves_its_package(mini, tmp_path):
    from importlib.metadata import distribution

    secret, _ = secret_file(tmp_path)
    dist = distribution("PyYAML")
    rel = os.path.relpath(secret, Path(str(dist.locate_file(""))).resolve())
    source = (mini.root / "wiki/sources/example.md")
    source.write_text(source.read_text().replace("retrieved:", f"origin:\n  package: PyYAML\n  version: '{dist.version}'\nretrieved:", 1))
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("  locator: facts[0]\n  quote: The example kernel reaches 100 TFLOP/s.\n",
                                             f"  locator: '{rel}:1'\n  quote: {SECRET.strip()}\n", 1))
    problems = [p for p in mini.problems() if "locator" in p["field"]]
    assert problems and "leaves" in problems[0]["message"], messages(problems)
    code, out, err = mini.run("audit", "--sources")
    assert "1 matched" not in out + err and "Traceback" not in err, out + err


def test_a_claim_locator_names_a_file_of_the_pinned_distribution_not_any_in_site_packages(mini):
    """Issue 38: a quote cited from nvidia-cutlass-dsl 4.8.1 "matched" in jinja2/__init__.py: any file
    under site-packages counted. The file must be one the distribution's RECORD lists."""
    from importlib.metadata import distribution

    yaml_dist, jinja = distribution("PyYAML"), distribution("Jinja2")
    other = next(f for f in jinja.files if f.as_posix() == "jinja2/__init__.py")
    line = next(t for t in other.read_text().splitlines() if len(t.split()) > 3)
    source = mini.root / "wiki/sources/example.md"
    source.write_text(source.read_text().replace("retrieved:", f"origin:\n  package: PyYAML\n  version: '{yaml_dist.version}'\n"
                                                 "retrieved:", 1))
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("  locator: facts[0]\n  quote: The example kernel reaches 100 TFLOP/s.\n",
                                             f"  locator: jinja2/__init__.py\n  quote: {json.dumps(line)}\n", 1))
    code, out, err = mini.run("audit", "--sources")
    assert code == 1 and "1 matched" not in out + err and "no file 'jinja2/__init__.py' in PyYAML@" in out + err, out + err


@pytest.mark.parametrize("repo", ["../..", "./x", "a/..", "..", "owner/.."])
def test_an_upstream_repo_name_never_climbs_out_of_the_cache(mini, tmp_path, monkeypatch, repo):
    from kernelwiki.commands.upstream import UpstreamError, fetch, repo_name

    assert repo_name(repo) is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(UpstreamError, match="owner/name"):
        fetch(repo, "0" * 40, "a.txt", "0" * 64, mini.root)
    with_artifact(mini, f"""artifact: hw-example
origin: upstream
upstream:
  repo: '{repo}'
  commit: {'0' * 40}
files:
- path: a.txt
  sha256: {'0' * 64}
  origin: upstream
""")
    problems = [p for p in mini.problems() if p["path"].endswith("PROVENANCE.yaml")]
    assert problems and problems[0]["field"] == "upstream.repo", messages(problems)


# --- stored XSS in the site ----------------------------------------------------------------------
def script(field: str) -> str:
    return f"<script>alert('{field}')</script>"


def site_repo(mini: MiniRepo) -> MiniRepo:
    """The mini wiki as a buildable site: our mkdocs.yml, the package linked in for the hooks."""
    shutil.copy(ROOT / "mkdocs.yml", mini.root / "mkdocs.yml")
    (mini.root / "kernelwiki").symlink_to(ROOT / "kernelwiki")
    return mini


def build_site(mini: MiniRepo, out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kernelwiki", "site", "build", "--root", str(mini.root), "--out", str(out)],
                          cwd=mini.root, env=env, capture_output=True, text=True, timeout=300)


def yaml_text(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML string


GIT_SECRET = "url = https://kernelwiki-token-0123@example.invalid/repo.git"
SECRET_TEXT = "kernelwiki-builder-file-secret"
TRACKER = "tracker.example"


def hostile(field: str) -> str:
    """<script>, a javascript: link, a tracking image and an onerror=, were they not escaped."""
    return (f"{script(field)} [{field}](javascript:alert('{field}-link')) ![{field}](http://{TRACKER}/{field}.png) "
            f"<img src=x onerror=alert('{field}-onerror')>")


HOSTILE_BODY = f"""# Example <script>alert('h1')</script> </title><script>alert('h1-title')</script>

Body text. <script>alert('body')</script> <img src=x onerror="alert('body-onerror')">
[b](javascript:alert('body-link')) <a href="javascript:alert('body-a')">a</a> [c](JaVa&#x09;ScRiPt:alert('x'))
![t](http://{TRACKER}/body.png) ![r][img] [r][js] <iframe srcdoc="<script>alert('iframe')</script>"></iframe>

A paragraph.
{{: onclick="alert('attr-list')" }}

[img]: http://{TRACKER}/ref.png
[js]: javascript:alert('ref-link')

--8<-- ".git/config"
--8<-- "artifacts/notes.txt"
--8<--
.git/config
--8<--
"""


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory) -> tuple[MiniRepo, Path, list[str]]:
    """One site built from a planted repository, shared by the tests below: (repo, site, validate's lines)."""
    base = tmp_path_factory.mktemp("hostile")
    mini = site_repo(MiniRepo(base / "repo"))
    (base / "secret.txt").write_text(SECRET_TEXT + "\n")
    (base / "linked").mkdir()
    (base / "linked/inner.py").write_text(SECRET_TEXT + "\n")
    mini.write(".git/config", f"[remote \"origin\"]\n\t{GIT_SECRET}\n")
    mini.write("artifacts/kernels/example/example.py", f"x = 1\n--8<-- \".git/config\"\n```\n</details>\n{hostile('code')}\n")
    (mini.root / "artifacts/notes.txt").symlink_to(base / "secret.txt")
    (mini.root / "artifacts/kernels/example/leak.py").symlink_to(base / "secret.txt")
    (mini.root / "artifacts/kernels/example/linked").symlink_to(base / "linked")
    source = mini.root / "wiki/sources/example.md"
    source.write_text(source.read_text().replace("retrieved:", f"authors:\n- {yaml_text(hostile('authors'))}\n"
                                                 f"published: {yaml_text(hostile('published'))}\n"
                                                 f"pin: {yaml_text(hostile('pin'))}\nretrieved:", 1)
                      .replace("- The example kernel reaches 100 TFLOP/s.", f"- {yaml_text(hostile('facts'))}"))
    probe_id = add_probe(mini, "ok", "passing")
    spec = mini.root / f"probes/{probe_id}/probe.yaml"
    spec.write_text(spec.read_text().replace(f"title: Fake probe {probe_id}", f"title: {yaml_text(hostile('probe-title'))}\n"
                                             f"description: {yaml_text(hostile('probe-description'))}"))
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("title: An example hardware feature", f"title: {yaml_text(hostile('title'))}")
                    .replace("summary: A feature used to test the tools.", f"summary: {yaml_text(hostile('summary'))}")
                    .replace("sources:\n", "related:\n- footgun-example\nsources:\n", 1)
                    .replace("summary:", "artifact_dir: artifacts/kernels/example\nsummary:", 1)
                    .split("\n---\n")[0] + "\n---\n" + HOSTILE_BODY)
    mini.write("wiki/footguns/example.md", "---\nid: footgun-example\n" + "".join(
        f"{key}: {yaml_text(hostile('footgun-' + key))}\n" for key in ("title", "summary", "symptom"))
        + "type: footgun\nartifact_dir: artifacts/../../linked\narchitectures:\n- sm_90a\nrelated:\n- hw-example\n"
        "sources:\n- src-example\n---\n# A footgun\n")   # its code would be a folder outside the repository
    record = {"schema_version": 1, "probe": probe_id, "run_id": "20261129T100000Z-h200-run", "mode": "run",
              "status": "passed", "started_at": "2026-11-29T10:00:00Z", "reason": hostile("reason"),
              "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a", "driver": hostile("environment-value")},
              "instructions": {"sm_90a": {"found": ["`" + script("instruction") + "`"], "missing": []}},
              "cases": [{"id": "c1", "status": "passed", "params": {"dtype": hostile("param")},
                         "headline": {"metric": "tflops", "value": 1.0, "unit": hostile("unit"),
                                      "baseline": hostile("baseline"), "baseline_value": 1.0, "ratio": 1.0}}]}
    mini.write(f"artifacts/evidence/{probe_id}/{record['run_id']}.json", json.dumps(record))
    result = build_site(mini, base / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    return mini, base / "out", messages(mini.problems()).splitlines()


def active(markup: str, whole_page: bool = False) -> list[str]:
    """What a browser would run or fetch in `markup`: script-like elements (the theme's own in a whole
    page), handlers, styles, script URLs, other hosts' images (an independent parser, not the cleaner's)."""
    found = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            self.script = tag == "script"
            if tag in ("iframe", "base", "object", "embed", "math") or not whole_page and tag in ("form", "meta", "style"):
                found.append(tag)
            for name, value in attrs:
                value = value or ""
                if name.startswith("on") or name == "style" and "url(" in value \
                        or name in ("href", "src") and url_scheme(value) not in (None, "http", "https", "mailto") \
                        or name == "src" and (TRACKER in value or value.startswith("//")):
                    found.append(f"<{tag} {name}={value[:60]!r}>")

        def handle_data(self, data):
            if getattr(self, "script", False) and "alert(" in data:
                found.append(f"<script>{data.strip()[:60]}")

    Parser().feed(markup)
    return found


def test_no_field_of_a_page_spec_or_record_becomes_markup_in_the_site(hostile_site):
    """Script, handlers, javascript: links and tracking images in every field and a page body: none active."""
    mini, out, _ = hostile_site
    built = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    assert {"records/probe-ok/20261129T100000Z-h200-run/index.html", "hardware/example/index.html",
            "footguns/example/index.html", "sources/example/index.html"} <= built
    found = {name: active((out / name).read_text(encoding="utf-8"), whole_page=True) for name in built}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    # Shown as text: the reader sees what the field says.
    assert "&#91;summary&#93;(javascript:alert(" in (out / "footguns/example/index.html").read_text(encoding="utf-8")


def test_the_site_publishes_no_file_a_page_or_artifact_names(hostile_site):
    """Include lines naming .git/config and a link to a builder's file, in a page body and in an
    artifact file, publish nothing; a linked artifact file or folder is not shown."""
    mini, out, problems = hostile_site
    import html

    for path in out.rglob("*"):
        assert not path.is_symlink()
        if path.is_file():   # as a reader sees it: highlighted code is split into spans
            shown = html.unescape(re.sub(r"<[^>]*>", "", path.read_bytes().decode("utf-8", "replace")))
            assert GIT_SECRET not in shown and SECRET_TEXT not in shown, path
    page = (out / "hardware/example/index.html").read_text(encoding="utf-8")
    assert "example.py" in page and "leak.py" not in page and "inner.py" not in page
    assert '<p>--8&lt;-- ".git/config"' in page and any("snippet include" in line for line in problems), problems


def test_validate_refuses_raw_html_and_script_links_in_a_page_body(hostile_site):
    mini, _, problems = hostile_site
    body = [line for line in problems if line.startswith("wiki/hardware/example.md:")]
    for fragment in ("raw HTML '<script>'", "raw HTML '<img src=x onerror", "link \"javascript:alert('body-link'",
                     "raw HTML '<a href=", "image 'http://tracker.example/body.png'", "image [img]", "link [js]",
                     "sets 'onclick'", "link \"JaVa&#x09;ScRiPt:", "summary: link \"javascript:", "raw HTML '<iframe"):
        assert any(fragment in line for line in body), (fragment, body)
    heading = (mini.root / "wiki/hardware/example.md").read_text().split("\n").index(HOSTILE_BODY.split("\n")[0]) + 1
    assert any(line.startswith(f"wiki/hardware/example.md:{heading}: -: raw HTML '<script>'") for line in body), body


@pytest.mark.parametrize("how", ["file", "folder", "page", "html", "svg"])
def test_nothing_under_wiki_but_pages_and_clean_images_is_published(mini, tmp_path, how):
    """A link under wiki/ (mkdocs copies its target; a linked folder, a whole tree), an HTML file
    (script on the site's origin) or an SVG holding a script: validate names it, the build refuses."""
    from mkdocs.exceptions import PluginError

    from kernelwiki.docsite.hooks import _refuse_unpublishable_files
    from kernelwiki.storage.repo import Repo

    planted = {"file": "wiki/hardware/notes.txt", "folder": "wiki/etc", "page": "wiki/hardware/other.md",
               "html": "wiki/hardware/evil.html", "svg": "wiki/assets/evil.svg"}[how]
    if how in ("file", "folder", "page"):
        (mini.root / planted).symlink_to({"file": Path("/etc/hostname"), "folder": tmp_path,
                                          "page": mini.root / "wiki/hardware/example.md"}[how])
    else:
        mini.write(planted, f'<svg xmlns="http://www.w3.org/2000/svg">{script(how)}</svg>')
    assert [p for p in mini.problems() if p["path"] == planted], messages(mini.problems())
    with pytest.raises(PluginError, match="cannot be published"):
        _refuse_unpublishable_files(Repo(mini.root))


def test_the_body_checks_are_linear_and_see_a_tag_hiding_behind_a_lt(mini):
    import time

    from kernelwiki.model.safe_links import markup_problems

    assert markup_problems('x <img alt="<" src=x onerror=alert(1)> and a<b, a < b')[0][1].startswith("raw HTML '<img")
    for body in ("<a" * 300_000, "[a" * 300_000, "{" * 300_000, "<a " + "x" * 600_000, "![" * 300_000):
        start = time.perf_counter()
        markup_problems(body)
        assert time.perf_counter() - start < 5, body[:10]
    try:
        (mini.root / "wiki" / os.fsdecode(b"\xff.txt")).symlink_to("/etc/hostname")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    assert "wiki/\\xff.txt" in {p["path"] for p in mini.problems()}


def test_markdown_brackets_in_untrusted_fields_stay_text():
    import markdown

    from kernelwiki.docsite import render

    for value in ("[x](javascript:alert(1))", "![p](http://host/p.png)", "x {: onclick=alert(1) }", "[x][1]\n\n[1]: javascript:x"):
        for escape in (render.text, render.prose, render.cell):
            shown = markdown.markdown(f"- {escape(value)}", extensions=["attr_list"])
            assert not re.search(r"<(a|img)\b|<[^>]*onclick", shown), (value, shown)


@pytest.mark.parametrize("attack", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '<img src="//t/p.png">',
                                    '<a href="jav&#x09;ascript:alert(1)">', "<svg><script>alert(1)</script></svg>",
                                    '<p style="background:url(http://t/p)">', "<div/onload=alert(1)>",
                                    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
                                    '<a href="data:text/html,x">', '<base href="http://t/">', "<!--<script>-->"])
def test_the_html_cleaner_leaves_nothing_active(attack):
    from kernelwiki.docsite.sanitize import clean_html

    assert not active(clean_html(attack)) and "<script" not in clean_html(attack), clean_html(attack)


def test_the_html_cleaner_keeps_the_site_s_own_markup_and_is_linear():
    import time

    from kernelwiki.docsite.sanitize import clean_html

    kept = '<td style="text-align: left;"><a href="../x/#y" title="a&amp;b">x</a><img src="../a.svg#only-dark" alt="c"></td>'
    assert clean_html(kept) == kept
    for attack in ("<" * 200_000, "<script " * 50_000, '<a b="' * 50_000, "<!" * 100_000, "<a" + " b=c" * 100_000):
        start = time.perf_counter()
        clean_html(attack)
        assert time.perf_counter() - start < 5, attack[:20]


def test_case_ids_and_environment_keys_that_are_markup_are_refused_and_escaped(mini):
    """Validate refuses the record (so the site never publishes it), and the record page escapes them anyway."""
    import markdown

    from kernelwiki.commands.refresh import Record
    from kernelwiki.docsite.records import record_page

    probe_id = add_probe(mini, "ok", "passing")
    record = {"schema_version": 1, "probe": probe_id, "run_id": "20261129T100000Z-h200-run", "mode": "run",
              "status": "passed", "started_at": "2026-11-29T10:00:00Z",
              "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a", script("environment-key"): "x"},
              "cases": [{"id": "`" + script("case-id") + "`", "status": "passed", "params": {}}]}
    mini.write(f"artifacts/evidence/{probe_id}/{record['run_id']}.json", json.dumps(record))
    problems = [p for p in mini.problems() if p["path"].startswith("artifacts")]
    assert {p["field"] for p in problems} >= {"cases[0].id", "environment"}, messages(problems)
    page_text = record_page(Record(f"artifacts/evidence/{probe_id}/{record['run_id']}.json", record), {}, [])
    assert "<script>" not in markdown.markdown(page_text.split("---\n", 2)[2], extensions=["tables"])


# --- links inside the cache ----------------------------------------------------------------------
def test_links_inside_the_cache_are_never_followed(mini, gpu, tmp_path):
    from kernelwiki.docsite import charts

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    cache = mini.root / ".kernelwiki-cache"
    cache.mkdir(exist_ok=True)
    (cache / "runner.lock").symlink_to(victim)
    ok = add_probe(mini, "ok", "passing")
    code, _, err = _run(mini, "--probe", ok, "--no-record")
    assert code == 0, err
    assert victim.read_text() == "precious\n" and not (cache / "runner.lock").is_symlink()

    chart = charts.Chart("bars", "t", "x", "ratio", {"": {"g": [("c1", 1.1)]}})
    outside = tmp_path / "outside-charts"
    outside.mkdir()
    (cache / "charts").symlink_to(outside)
    svg = charts.draw(chart, cache / "charts")
    assert svg.startswith("<?xml") and not list(outside.iterdir()), "a chart was written through the linked charts/"
    (cache / "charts").unlink()
    (cache / "charts").mkdir()
    published = tmp_path / "published.txt"
    published.write_text("secret\n")
    (cache / "charts" / chart.name).symlink_to(published)   # would publish the target as the chart
    (cache / "charts" / chart.name.replace(".svg", ".tmp")).symlink_to(victim)  # would overwrite the victim
    svg = charts.draw(chart, cache / "charts")
    assert "secret" not in svg and svg.startswith("<?xml")
    assert victim.read_text() == "precious\n" and published.read_text() == "secret\n"
    (cache / "charts" / chart.name).unlink()   # a planted chart with a script is drawn again, not published
    (cache / "charts" / chart.name).write_text(f'<svg xmlns="http://www.w3.org/2000/svg">{script("chart")}</svg>')
    assert "alert" not in charts.draw(chart, cache / "charts")


# --- a record that could not be written ----------------------------------------------------------
def test_a_record_that_could_not_be_written_fails_the_run(mini, monkeypatch):
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", "NVIDIA H200/SXM,sm_90a")  # a '/' in the name: still one file
    ok = add_probe(mini, "ok", "passing")
    code, out, err = _run(mini, "--probe", ok, "--no-refresh")
    assert code == 0, err
    [record] = records(mini, ok)
    assert "/" not in record["run_id"] and record["status"] == "passed"
    shutil.rmtree(mini.root / "artifacts/evidence" / ok)
    (mini.root / "artifacts/evidence" / ok).write_text("a file where the probe's records go")
    code, out, err = _run(mini, "--probe", ok, "--no-refresh")
    assert code == 1 and "record not written" in err, (code, out, err)
    assert f"{ok}: failed (record not written" in err


# --- site build --out ----------------------------------------------------------------------------
@pytest.mark.parametrize("out", ["artifacts", "schemas", ".", "..", "wiki/hardware", "elsewhere-with-files"])
def test_site_build_never_empties_a_directory_it_does_not_own(mini, tmp_path, out):
    site_repo(mini)
    mini.write("artifacts/evidence/keep.txt", "kept")
    (tmp_path / "elsewhere-with-files").mkdir()
    (tmp_path / "elsewhere-with-files" / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    target = tmp_path / out if out.startswith("elsewhere") else mini.root / out
    result = subprocess.run([sys.executable, "-m", "kernelwiki", "site", "build", "--root", str(mini.root), "--out",
                             str(target)], env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and "error: --out" in result.stderr, result
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


# --- terminal escapes ----------------------------------------------------------------------------
@pytest.mark.parametrize("escape", ["\\e[2J", "\\e]0;owned\\a", "\\rhidden", "\\u202eevil", "\\x9b31m"])
def test_terminal_escapes_in_frontmatter_are_refused_and_never_printed(mini, escape):
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary: A feature used to test the tools.", f'summary: "x{escape}"'))
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/example.md"]
    assert problems and "control character" in problems[0]["message"], messages(problems)
    for argv in (["query", "example"], ["query", "feature", "--json"], ["get", "hw-example"]):
        code, out, err = mini.run(*argv)
        assert not re.search(r"[\x1b\x07\x0d\x9b\u202e]", out + err), (argv, out, err)


def test_terminal_escapes_in_a_page_body_are_reported_and_shown_as_escapes(mini):
    _set(mini, "wiki/hardware/example.md", "Body text about wgmma", "Body \x1b]0;owned\x07 text about wgmma")
    problems = [p for p in mini.problems() if p["path"] == "wiki/hardware/example.md"]
    assert problems and problems[0]["line"] == "29" and "control character U+001B" in problems[0]["message"], messages(problems)
    code, out, err = mini.run("get", "hw-example")
    assert "\x1b" not in out and "\\x1b]0;owned\\x07" in out


def test_an_upstream_servers_words_are_one_printable_line(monkeypatch):
    import urllib.error

    from kernelwiki.commands import upstream

    def refuse(url, timeout):
        raise urllib.error.HTTPError(url, 418, "teapot\x1b]0;owned\x07\r\nline two", {}, None)

    monkeypatch.setattr(upstream.urllib.request, "urlopen", refuse)
    with pytest.raises(upstream.UpstreamError) as caught:
        upstream._download("http://127.0.0.1/x", "x")
    message = str(caught.value)
    assert "\n" not in message and not re.search(r"[\x00-\x1f]", message) and "teapot" in message


# --- hangs ---------------------------------------------------------------------------------------
def test_a_server_that_trickles_bytes_meets_the_overall_deadline(monkeypatch):
    import http.server
    import threading
    import time

    from kernelwiki.commands import upstream

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(upstream, "DEADLINE_S", 2.0)
    start = time.monotonic()
    try:
        with pytest.raises(upstream.UpstreamError, match="not complete within"):
            upstream._download(f"http://127.0.0.1:{server.server_address[1]}/f", "f")
    finally:
        server.shutdown()
    assert time.monotonic() - start < 6


@pytest.mark.parametrize("value", [".nan", ".inf", "1e999", "-1", "100000"])
def test_a_probe_timeout_is_a_finite_number_of_seconds(mini, gpu, value):
    from kernelwiki.probing.specs import DEFAULT_TIMEOUT_S, load_probes
    from kernelwiki.storage.repo import Repo

    ok = add_probe(mini, "ok", "passing")
    spec = mini.root / f"probes/{ok}/probe.yaml"
    spec.write_text(spec.read_text().replace("timeout_s: 30", f"timeout_s: {value}"))
    problems = [p for p in mini.problems() if p["field"] == "timeout_s"]
    assert problems, "validate accepts a probe that is never timed out"
    for probe in load_probes(Repo(mini.root)).values():
        assert 0 < probe.timeout_s <= DEFAULT_TIMEOUT_S


def test_fifos_in_the_cache_block_nothing(mini, gpu, tmp_path):
    from kernelwiki.docsite import charts
    from kernelwiki.probing.runner import RunnerBusy, runner_lock
    from kernelwiki.storage.repo import Repo

    cache = mini.root / ".kernelwiki-cache"
    cache.mkdir(exist_ok=True)
    (cache / "charts").mkdir()
    chart = charts.Chart("bars", "t", "x", "ratio", {"": {"g": [("c1", 1.1)]}})
    os.mkfifo(cache / "charts" / chart.name)
    assert charts.draw(chart, cache / "charts").startswith("<?xml")
    with runner_lock(Repo(mini.root)):
        (cache / "runner.lock").unlink()
        os.mkfifo(cache / "runner.lock")
        with pytest.raises(RunnerBusy):
            with runner_lock(Repo(mini.root)):
                pass


# --- probe processes outliving the runner --------------------------------------------------------
def _alive_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(") ", 1)[1][0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


ESCAPES = """import json, os, subprocess, sys, time
OUT = sys.argv[sys.argv.index('--out') + 1]
TOKEN = {token!r}
# no environment (so no tag), its own session and process group
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', TOKEN], env={{}},
                 start_new_session=True)
# a chain that forks a new pid every 20 ms, each parent exiting at once
subprocess.Popen([sys.executable, '-c', '''
import os, sys, time
while True:
    if os.fork():
        os._exit(0)
    time.sleep(0.02)
''', TOKEN])
time.sleep(1)
"""


def test_no_probe_process_outlives_the_runner(mini, gpu):
    import time
    import uuid

    token = f"kernelwiki-escape-{uuid.uuid4().hex}"
    probe_id = add_probe(mini, "escape", "passing")
    (mini.root / f"probes/{probe_id}/run.py").write_text(ESCAPES.format(token=token))
    try:
        code, out, err = _run(mini, "--probe", probe_id, "--no-record")
        assert "Traceback" not in err
        deadline = time.monotonic() + 3
        while _alive_with(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive_with(token), "probe processes survived the runner"
    finally:
        for _ in range(100):
            for pid in _alive_with(token):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass


# --- tracebacks ----------------------------------------------------------------------------------
def _no_traceback(result: tuple[int, str, str]) -> None:
    code, out, err = result
    assert code in (0, 1, 2) and "Traceback" not in out + err, (code, out, err)


def _set(mini: MiniRepo, rel: str, old: str, new: str) -> None:
    path = mini.root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("how", ["facts-5", "authors-numbers", "baseline-string", "evidence-by-arch-list"])
def test_wrong_typed_fields_never_make_get_raise(mini, how):
    if how == "facts-5":
        _set(mini, "wiki/sources/example.md", "facts:\n- The example kernel reaches 100 TFLOP/s.", "facts: 5")
    elif how == "authors-numbers":
        _set(mini, "wiki/sources/example.md", "retrieved:", "authors: [1, 2]\nretrieved:")
    elif how == "baseline-string":
        _set(mini, "wiki/hardware/example.md", "  source: src-example\n", "  source: src-example\n  ratio: 1.5\n  baseline: cuBLAS\n")
    else:
        _set(mini, "wiki/hardware/example.md", "architectures:", "evidence_by_arch:\n- sm_90a\narchitectures:")
    assert mini.problems()
    for argv in (["get", "hw-example", "--follow-sources"], ["get", "hw-example", "--claims"],
                 ["get", "src-example", "--follow-sources"], ["get", "hw-example", "--format", "json", "--follow-sources"]):
        _no_traceback(mini.run(*argv))


@pytest.mark.parametrize("how", ["evidence-by-arch-list", "cache-is-a-file", "tex-params"])
def test_wrong_typed_input_never_makes_the_site_build_raise(mini, tmp_path, how):
    site_repo(mini)
    if how == "evidence-by-arch-list":
        _set(mini, "wiki/hardware/example.md", "architectures:", "evidence_by_arch:\n- sm_90a\narchitectures:")
    elif how == "cache-is-a-file":
        shutil.rmtree(mini.root / ".kernelwiki-cache", ignore_errors=True)
        (mini.root / ".kernelwiki-cache").write_text("not a directory")
    probe_id = add_probe(mini, "ok", "passing")
    record = {"schema_version": 1, "probe": probe_id, "run_id": "20261129T100000Z-h200-run", "mode": "run",
              "status": "passed", "started_at": "2026-11-29T10:00:00Z", "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a"},
              "cases": [{"id": f"c{i}", "status": "passed", "params": {"set": "s", "seqlen": 2 ** (i % 3 + 6), "mode": f"$\\frac{{a{i // 3}$"},
                         "headline": {"metric": "tflops", "value": 1.0 + i, "unit": "TFLOP/s", "baseline": "$x^$",
                                      "baseline_value": 1.0, "ratio": 1.0 + i}} for i in range(6)]}
    mini.write(f"artifacts/evidence/{probe_id}/{record['run_id']}.json", json.dumps(record))
    result = build_site(mini, tmp_path / "out")
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    if how == "evidence-by-arch-list":  # a page that fails its schema is not published
        assert result.returncode != 0 and "cannot be published" in result.stdout + result.stderr
    else:
        assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("template", ["{oops}", "{", "http://x/{repo.__class__}/{path}", "not a url {path}"])
def test_a_bad_upstream_url_template_is_one_message(mini, monkeypatch, tmp_path, template):
    from kernelwiki.commands.upstream import UpstreamError, fetch

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_URL", template)
    with pytest.raises(UpstreamError):
        fetch("owner/name", "0" * 40, "a.txt", "0" * 64, mini.root)


def test_audit_sources_with_an_origin_without_a_version(mini):
    _set(mini, "wiki/sources/example.md", "retrieved:", "origin:\n  package: PyYAML\nretrieved:")
    _set(mini, "wiki/hardware/example.md", "  source: src-example\n", "  source: src-example\n  locator: a.py:1\n  quote: x\n")
    _no_traceback(mini.run("audit", "--sources"))
    assert mini.problems()


@pytest.mark.parametrize("damage", ["not-yaml", "a-list", "tags-a-number", "archs-missing", "schema-not-json",
                                    "schema-a-fifo", "schema-a-directory"])
def test_broken_schemas_or_vocabulary_are_one_error(mini, damage):
    vocab = mini.root / "schemas/vocabulary.yaml"
    schema = mini.root / "schemas/page.schema.json"
    if damage == "not-yaml":
        vocab.write_text("tags: [unclosed\n")
    elif damage == "a-list":
        vocab.write_text("- a\n- b\n")
    elif damage == "tags-a-number":
        vocab.write_text(re.sub(r"(?ms)^tags:\n.*?(?=^vocabulary_fields:)", "tags: 5\n", vocab.read_text()))
    elif damage == "archs-missing":
        vocab.write_text(re.sub(r"(?m)^architectures:\n(  .*\n)+", "", vocab.read_text()))
    elif damage == "schema-not-json":
        schema.write_text("{not json")
    elif damage == "schema-a-fifo":
        schema.unlink()
        os.mkfifo(schema)
    else:
        schema.unlink()
        schema.mkdir()
    for argv in (["validate"], ["get", "hw-example"], ["query", "example"], ["refresh", "--check"]):
        code, out, err = mini.run(*argv)
        _no_traceback((code, out, err))
        assert code != 0 or argv[0] in ("get", "query"), (argv, code, out, err)


def test_an_unreadable_artifact_or_provenance_file_is_one_line(mini):
    """Issue 24: an artifact file that cannot be read (no permission, a FIFO that would block, a folder
    where a file is listed) was a traceback or a hang; each is now named, and the rest is printed."""
    folder = mini.root / "artifacts/kernels/example"
    mini.write("artifacts/kernels/example/kernel.py", "print('ours')\n")
    mini.write("artifacts/kernels/example/locked.py", "print('locked')\n").chmod(0)
    os.mkfifo(folder / "pipe.py")
    (folder / "dir.py").mkdir()
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", "artifact: hw-example\norigin: own\nfiles:\n" + "".join(
        f"- path: {name}\n  sha256: {'0' * 64}\n  origin: own\n" for name in ("kernel.py", "locked.py", "pipe.py", "dir.py")))
    _set(mini, "wiki/hardware/example.md", "summary:", "artifact_dir: artifacts/kernels/example\nsummary:")
    for argv in (["validate"], ["get", "hw-example", "--include-code"], ["get", "hw-example", "--include-code", "--format",
                 "json"], ["audit"], ["refresh", "--check"]):
        done = subprocess.run([sys.executable, "-m", "kernelwiki", argv[0], "--root", str(mini.root), *argv[1:]],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert done.returncode in (0, 1) and "Traceback" not in done.stdout + done.stderr, (argv, done.stderr[-2000:])
        if argv[0] == "get":
            assert "print('ours')" in done.stdout and "pipe.py" in done.stdout, done.stdout[-2000:]
    validate = subprocess.run([sys.executable, "-m", "kernelwiki", "validate", "--root", str(mini.root)],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "pipe.py" in validate.stdout and "dir.py" in validate.stdout, validate.stdout
    (folder / "locked.py").chmod(0o644)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without permissions")
def test_a_schema_file_without_read_permission_is_one_error(mini):
    (mini.root / "schemas/page.schema.json").chmod(0)
    try:
        for argv in (["validate"], ["get", "hw-example"], ["query", "example"]):
            _no_traceback(mini.run(*argv))
    finally:
        (mini.root / "schemas/page.schema.json").chmod(0o644)


@pytest.mark.parametrize("fake", ["H200", "a,b,c", ",", "NVIDIA H200,sm_90a,extra"])
def test_a_malformed_fake_gpu_or_nvidia_smi_is_no_gpu(monkeypatch, tmp_path, fake):
    from kernelwiki.harness import env

    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", fake)
    assert env.detect_gpu() is None or env.detect_gpu().arch.startswith("sm_")
    monkeypatch.delenv("KERNELWIKI_FAKE_GPU")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 9.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert env.detect_gpu() is None


@pytest.mark.parametrize("fake, count, smi", [("H200", "2", "0, GPU-1, NVIDIA H200"), ("NVIDIA H200,sm_90a", "x", "x, G, H, 9.0, 5"),
                                              ("NVIDIA H200,sm_90a", "20000000", "0, G, H, 9, 5"), ("NVIDIA H200,sm_90a", "-1", "")])
def test_a_malformed_fake_gpu_count_or_gpu_list_is_no_gpu_at_once(mini, monkeypatch, tmp_path, fake, count, smi):
    """Issue 38: FAKE_GPU=H200 with --gpus all was an AssertionError, a count of x a ValueError, 20000000
    over a minute, and an nvidia-smi that printed three fields a ValueError in list_gpus."""
    import time

    from kernelwiki.harness import env

    monkeypatch.setenv("KERNELWIKI_FAKE_GPU", fake)
    monkeypatch.setenv("KERNELWIKI_FAKE_GPU_COUNT", count)
    start = time.monotonic()
    code, out, err = _run(mini, "--all", "--gpus", "all")
    assert code == 2 and err.strip() == "error: gpus: this machine has no GPU" and time.monotonic() - start < 10, err
    monkeypatch.delenv("KERNELWIKI_FAKE_GPU")
    (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\necho '{smi or 'NVIDIA H200, 9.0'}'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert env.list_gpus() == []


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "1" + "0" * 400])
def test_a_number_too_large_for_a_float_is_a_problem_in_a_record(mini, gpu, literal):
    """Issue 38: a record holding 1e999 (read as inf) passed validate, refresh silently dropped the case
    and the site showed "inf"."""
    probe_id = add_probe(mini, "ok", "passing")
    code, _, err = _run(mini, "--probe", probe_id, "--no-refresh")
    assert code == 0, err
    [path] = record_files(mini.root / "artifacts/evidence" / probe_id)
    text = record_text(path)
    value = re.search(r'"headline":\{[^}]*?"value":([0-9.e+-]+)', text)
    write_record_text(path, text[:value.start(1)] + literal + text[value.end(1):])
    rel = path.relative_to(mini.root).as_posix()
    problems = [p for p in mini.problems() if p["path"] == rel]
    assert problems and "too large for a number" in problems[0]["message"] and problems[0]["line"] != "1", problems
    code, out, err = mini.run("refresh")
    assert "Traceback" not in err and rel in err, err
    from kernelwiki.storage.records import load_records
    from kernelwiki.storage.repo import Repo

    assert probe_id not in load_records(Repo(mini.root), quiet=True)


# --- wrong output --------------------------------------------------------------------------------
@pytest.mark.parametrize("alias, fragment", [
    ("wiki/sources/example.md", "looks like a path"), ("hardware/example.md", "looks like a path"),
    ("wgmm\u0430", "mixes Latin letters with CYRILLIC"), ("\u0442\u043c\u0430", "only look like 'tma'"),
    ("wgmm\u03b1", "mixes Latin letters with GREEK"), ("\u03a4\u039c\u0391", "only look like 'TMA'"),
    ("\u0442m\u03b1", "mixes Latin letters with CYRILLIC, GREEK"),
])
def test_an_alias_is_a_name_people_type(mini, alias, fragment):
    _set(mini, "wiki/hardware/example.md", "- skill-example\n", f"- skill-example\n- {alias}\n")
    problems = [p for p in mini.problems() if p["field"] == "aliases[1]"]
    assert problems and fragment in problems[0]["message"], messages(problems)


@pytest.mark.parametrize("name, page_id", [("wiki/hardware/other.md", "hw-other"), ("hardware/other.md", "hw-example")])
def test_a_path_names_the_same_page_over_both_faces(mini, name, page_id):
    """An alias spelling a page file's path (refused by validate, above) once made `get` answer the file
    and MCP the page holding the alias; a path is now that file's page everywhere, and an alias that is
    no file's path stays an alias everywhere."""
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call, read_page
    from kernelwiki.storage.repo import Repo

    page = mini.root / "wiki/hardware/example.md"
    mini.write("wiki/hardware/other.md", page.read_text().replace("hw-example", "hw-other").replace("skill-", "x-"))
    _set(mini, "wiki/hardware/example.md", "- skill-example\n", "- skill-example\n- wiki/hardware/other.md\n"
                                                                "- hardware/other.md\n")
    code, out, err = mini.run("get", name)
    assert code == 0 and out.startswith(f"---\nid: {page_id}\n"), (out[:40], err)
    result = call(Repo(mini.root), "get_page", {"page": name})
    assert result.content[0].text.startswith(f"---\nid: {page_id}\n"), result.content[0].text[:80]
    assert read_page(Repo(mini.root), f"kernelwiki://page/{name}").startswith(f"---\nid: {page_id}\n")


def test_frontmatter_text_is_composed_unicode(mini):
    _set(mini, "wiki/hardware/example.md", "- skill-example\n", "- skill-example\n- cafe\u0301\n")
    problems = [p for p in mini.problems() if p["field"] == "aliases[1]"]
    assert problems and "NFC" in problems[0]["message"], messages(problems)


def _decomposed(text: str) -> str:
    import unicodedata

    out = unicodedata.normalize("NFD", text)
    assert out != text
    return out


def test_decomposed_input_finds_composed_pages_over_both_faces(mini):
    """Pages are composed (validate requires NFC); a name or word typed or sent decomposed finds them:
    NFC at the boundary, for get, query, MCP tool arguments and resource URIs."""
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call, read_page
    from kernelwiki.storage.repo import Repo

    _set(mini, "wiki/hardware/example.md", "- skill-example\n", "- skill-example\n- caf\u00e9-unit\n")
    _set(mini, "wiki/hardware/example.md", "Body text about", "Body text, after Schr\u00f6dinger, about")
    assert mini.problems() == []
    code, out, err = mini.run("get", _decomposed("CAF\u00c9-unit"))
    assert code == 0 and out.startswith("---\nid: hw-example\n"), err
    code, out, err = mini.run("query", _decomposed("schr\u00f6dinger"))
    assert code == 0 and "hw-example" in out and "not covered" not in out, out + err
    result = call(Repo(mini.root), "get_page", {"page": _decomposed("caf\u00e9-unit"), "part": "frontmatter"})
    assert not result.is_error and "id: hw-example" in result.content[0].text, result.content[0].text
    result = call(Repo(mini.root), "query", {"words": _decomposed("Schr\u00f6dinger")})
    assert [hit["id"] for hit in result.structured_content["hits"]] == ["hw-example"]
    assert result.structured_content == call(Repo(mini.root), "query", {"words": "Schr\u00f6dinger"}).structured_content
    assert read_page(Repo(mini.root), "kernelwiki://page/" + _decomposed("caf\u00e9-unit")).startswith("---\nid: hw-example")


def test_a_decomposed_page_is_refused_and_still_found_composed(mini):
    """A page written decomposed is refused by validate, and until it is fixed a composed query finds it."""
    _set(mini, "wiki/hardware/example.md", "- skill-example\n", "- skill-example\n" + _decomposed("- caf\u00e9-unit\n"))
    _set(mini, "wiki/hardware/example.md", "Body text about", _decomposed("Body text, after Schr\u00f6dinger, about"))
    assert any("NFC" in p["message"] for p in mini.problems())
    code, out, err = mini.run("get", "caf\u00e9-unit")
    assert code == 0 and out.startswith("---\nid: hw-example\n"), err
    code, out, err = mini.run("query", "schr\u00f6dinger")
    assert code == 0 and "hw-example" in out and "not covered" not in out, out + err


def test_a_page_file_name_that_is_not_utf8_is_named_and_the_rest_answers(mini):
    """wiki/hardware/\\xff.md: no traceback (its name went raw into the cache and into JSON), one problem
    line naming it with \\x escapes, and every other page still answers, over both faces."""
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call
    from kernelwiki.storage.repo import Repo

    text = (mini.root / "wiki/hardware/example.md").read_text().replace("hw-example", "hw-other")
    try:
        (mini.root / "wiki/hardware" / os.fsdecode(b"\xff.md")).write_text(text)
        (mini.root / "wiki" / os.fsdecode(b"\xfe")).mkdir()
        (mini.root / "wiki" / os.fsdecode(b"\xfe/y.md")).write_text(text)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    line = "wiki/hardware/\\xff.md:1: -: the file name is not UTF-8, so the page is left out of every lookup"
    for argv in (("query", "wgmma"), ("query", "--json", "wgmma")):
        code, out, err = mini.run(*argv)
        assert code == 0 and "Traceback" not in err and line in err and "wiki/\\xfe/y.md:1: -:" in err, (argv, err)
        assert "hw-example" in out, (argv, out)
    assert json.loads(mini.run("query", "--json", "wgmma")[1])["hits"][0]["id"] == "hw-example"
    assert [p for p in mini.problems() if p["path"] == "wiki/hardware/\\xff.md"]
    code, out, err = mini.run("get", "hw-example")
    assert code == 0 and out.startswith("---\nid: hw-example\n")
    code, out, err = mini.run("refresh", "--check")
    assert "Traceback" not in err
    result = call(Repo(mini.root), "query", {"words": "wgmma"})
    assert not result.is_error and line in result.content[0].text
    assert [hit["id"] for hit in result.structured_content["hits"]] == ["hw-example"]
    result = call(Repo(mini.root), "validate", {})
    assert line in result.content[0].text and json.dumps(result.structured_content, ensure_ascii=False).encode()


def test_any_file_name_that_is_not_utf8_makes_a_printable_problem(mini):
    """The same for a record, a probe folder and a provenance file: their problem lines print, as JSON too."""
    try:
        for folder, name, text in ((b"artifacts/evidence/probe-x", b"\xff.json", "{}"), (b"probes/\xfd", b"probe.yaml", "id: x\n"),
                                   (b"artifacts/kernels/\xfc", b"PROVENANCE.yaml", "a: 1\n")):
            (mini.root / os.fsdecode(folder)).mkdir(parents=True)
            (mini.root / os.fsdecode(folder) / os.fsdecode(name)).write_text(text)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    problems = mini.problems()
    assert any(p["path"] == "artifacts/kernels/\\xfc/PROVENANCE.yaml" for p in problems), messages(problems)
    assert any("probe-x" in p["path"] or "probe-x" in p["message"] for p in problems), messages(problems)
    for argv in (("refresh", "--check"), ("audit",), ("query", "wgmma"), ("get", "hw-example")):
        code, out, err = mini.run(*argv)
        assert "Traceback" not in err and code in (0, 1), (argv, code, err)


def test_claim_spans_in_code_blocks_stay_examples_in_the_site():
    from kernelwiki.docsite.render import claim_spans

    body = ("Prose <!-- claim:peak -->100 TFLOP/s<!-- /claim -->.\n\n```markdown\n"
            "<!-- claim:peak -->100 TFLOP/s<!-- /claim -->\n```\n")
    out = claim_spans(body, {"peak"}, "hardware/x.md")
    assert out.count('class="kw-claim-ref"') == 1 and "```markdown\n<!-- claim:peak -->100 TFLOP/s<!-- /claim -->\n```" in out


def test_a_redirect_loop_is_one_line(monkeypatch):
    import http.server
    import threading

    from kernelwiki.commands import upstream

    class Loop(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", self.path)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Loop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(upstream.UpstreamError) as caught:
            upstream._download(f"http://127.0.0.1:{server.server_address[1]}/f", "f")
    finally:
        server.shutdown()
    assert "\n" not in str(caught.value) and "redirect" in str(caught.value)


def test_a_run_id_that_is_yaml_syntax_keeps_its_page_frontmatter():
    import yaml

    from kernelwiki.commands.refresh import Record
    from kernelwiki.docsite.records import record_page

    record = {"probe": "probe-x", "run_id": "x: [y", "mode": "run", "status": "passed", "cases": []}
    page = record_page(Record("artifacts/evidence/probe-x/x: [y.json", record), {}, [])
    assert yaml.safe_load(page.split("---\n")[1])["title"] == "x: [y"


def test_a_dotted_requirement_imports_nothing_in_the_runner(tmp_path, monkeypatch):
    from kernelwiki.probing.specs import _importable

    package = tmp_path / "boobytrapped"
    package.mkdir()
    (package / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\n")
    (package / "cute.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _importable("boobytrapped.cute") and not _importable("boobytrapped.absent")
    assert not (tmp_path / "imported").exists(), "the runner ran a package's __init__ to look for a submodule"


def test_only_our_own_schemas_are_compiled_to_code(mini):
    from kernelwiki.model import fastschema

    schema = mini.root / "schemas/page.schema.json"
    assert fastschema._compiled(str(mini.root / "schemas"), "page") is not None  # a copy of ours: fast path
    schema.write_text(schema.read_text().replace('"Human title."', '"Human title, edited."'))
    fastschema._compiled.cache_clear()
    assert fastschema._compiled(str(mini.root / "schemas"), "page") is None
    assert mini.problems() == []  # still checked, by jsonschema


def test_chart_labels_from_records_are_text_not_tex():
    from kernelwiki.docsite import charts

    chart = charts.Chart("lines", "$x^$", "$\\frac{a$", "ratio",
                         {"$\\frac{p$": {"$\\frac{a$": [(64, 1.0), (128, 1.2), (256, 1.3)], "b": [(64, 1.0), (128, 1.1), (256, 1.2)]}})
    assert "frac" in charts._draw(chart)


# --- goals, versus, the query index, the tuning file, --section: hostile input ------------------------
def _with_goals(mini, goals: str, body: str = "# Example hardware\n\nBody text.\n"):
    text = (mini.root / "wiki/hardware/example.md").read_text()
    head, _, _ = text.partition("---\n# ")
    return mini.write("wiki/hardware/example.md", head + goals + "---\n" + body)


@pytest.mark.parametrize("goals", ["goals: 5\n", "goals: true\n", "goals: some text\n", "goals: {claim: peak}\n"])
def test_goals_that_are_no_list_are_a_problem_not_a_traceback(mini, goals):
    _with_goals(mini, goals)
    assert any(p["field"] == "goals" for p in mini.problems())
    for argv in (("audit",), ("refresh", "--check"), ("get", "hw-example")):
        code, out, err = mini.run(*argv)
        assert code in (0, 1) and "Traceback" not in out + err, (argv, out, err)


def test_many_goals_over_many_sentences_are_audited_in_linear_time(mini):
    """A page under 1 MiB with 4,000 goals on one claim and 12,000 sentences holding its span took
    95 s to audit (every goal against every sentence)."""
    import time

    goals = "goals:\n" + "".join(f"- {{claim: peak, statement: g{i}, at_least: 1}}\n" for i in range(4000))
    body = "# Example\n\n" + " ".join("The goal is met at <!-- claim:peak -->100 TFLOP/s<!-- /claim -->."
                                      for _ in range(12000)) + "\n"
    _with_goals(mini, goals, body)
    started = time.monotonic()
    code, out, err = mini.run("audit")
    assert "Traceback" not in out + err and "goal 'g0'" not in out, out[-500:]
    assert time.monotonic() - started < 40   # 1.5 s here alone; 95 s before, quadratic


def _versus_setup(mini, versus: str, names: list[str], body: str | None = None):
    from test_refresh import RECORD, setup

    page = setup(mini, body=body or "# Example\n\n<!-- kernelwiki:begin versus -->\n<!-- kernelwiki:end versus -->\n")
    mini.write("probes/probe-x/probe.yaml", "id: probe-x\ntitle: x\nkind: microbench\npages:\n- hw-example\n"
               f"archs:\n- sm_90a\nentry: run.py\ncases:\n- id: c1\n  versus: {versus}\n")
    record = json.loads(json.dumps(RECORD))
    case = record["cases"][0]
    case["headline"].update(baseline="cuBLAS", baseline_value=100.0, ratio=1.2)
    case["baselines"] = [{"name": n, "value": 100.0, "ratio": 1.1} for n in names] + \
        [{"name": "cuBLAS", "value": 100.0, "ratio": 1.2}]
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))
    return page


@pytest.mark.parametrize("versus", ['["ours a", "ours a"]', '["ours a", "Ours  A"]', '["<<>>"]'])
def test_versus_names_that_make_one_claim_id_twice_or_none_are_refused(mini, versus):
    """Two names of one case that give the same ID.vs-NAME (or a name without a letter or digit)
    made refresh write a page validate then refused for its duplicate claim ids."""
    _versus_setup(mini, versus, json.loads(versus))
    found = [p for p in mini.problems() if p["path"] == "probes/probe-x/probe.yaml"]
    assert any("versus" in p["field"] for p in found), messages(found)
    assert mini.run("refresh")[0] in (0, 1)
    assert not [p for p in mini.problems() if "duplicate claim id" in p["message"]]


def test_candidate_names_from_a_record_stay_text_in_the_runs_and_versus_tables(mini):
    """A record's baseline names went into the page file's versus table as they were: raw HTML, a
    script link, a line break that starts new Markdown, a `|` that adds a column, an escape."""
    names = ["ours <img src=x onerror=alert(1)>", "ours x\n\n# Injected\n[click](javascript:alert(1))",
             "ours | a | b", "ours \x1b[2Jred"]
    page = _versus_setup(mini, '"x"', names, body="# Example\n\n<!-- kernelwiki:begin versus -->\n"
                         "<!-- kernelwiki:end versus -->\n\n<!-- kernelwiki:begin runs -->\n<!-- kernelwiki:end runs -->\n")
    record = json.loads((mini.root / "artifacts/evidence/probe-x/r1.json").read_text())
    record["cases"][0]["headline"]["baseline"] = "<b onclick=x>cuBLAS</b>\n# H"
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))
    mini.run("refresh")
    text = page.read_text(encoding="utf-8")
    table = text[text.index("begin versus"):text.index("end runs")]
    assert "<img" not in table and "<b " not in table and "](javascript" not in table and "\x1b" not in table
    assert "\n# " not in table and all(line.count(" | ") == 4 for line in table.splitlines() if "probe-x | c1" in line
                                       and "versus" in text[:text.index(line)].rsplit("kernelwiki:", 1)[-1])
    assert not [p for p in mini.problems() if p["path"] == "wiki/hardware/example.md" and p["field"] == "-"]


def _planted_index(mini, mutate):
    """Build the query index, change what it stores (`mutate(index)`), store it again as the cache."""
    from kernelwiki.storage import cache, termindex
    from kernelwiki.storage.repo import Repo

    assert mini.run("query", "example")[0] == 0
    repo = Repo(mini.root)
    index = termindex.rebuild(repo)
    for number in range(index.pages):
        index.record(number)
    mutate(index)
    termindex.save(index, cache.cache_key(repo), termindex.stamps(repo.root))
    return repo


def test_terminal_escapes_planted_in_the_query_index_are_shown_escaped(mini):
    def plant(index):
        for record in index._records[0]:
            record.update(title="\x1b]0;pwned\x07 title\u202e", headline="\x1b[2J headline \x9b31m")
    _planted_index(mini, plant)
    for argv in (("query", "example"), ("query", "example", "--json")):
        code, out, err = mini.run(*argv)
        assert code == 0 and not re.search("[\x1b\x07\u202e\x9b]", out + err), (argv, out)


def test_a_query_index_record_naming_a_file_outside_wiki_is_not_trusted(mini):
    def plant(index):
        info = os.stat("/etc/passwd")
        index._records[0][0].update(rel="/etc/passwd", size=info.st_size, mtime_ns=info.st_mtime_ns,
                                    ctime_ns=info.st_ctime_ns, title="PLANTED")
    _planted_index(mini, plant)
    code, out, err = mini.run("query", "example", "--json")
    assert code == 0 and "/etc/passwd" not in out and "PLANTED" not in out, out


def test_a_body_shard_without_counts_is_a_rebuild_not_a_traceback(mini):
    def plant(index):
        for name, shard in index._shards.items():
            if name[0] in "bB":
                shard.counts = None
    _planted_index(mini, plant)
    code, out, err = mini.run("query", "example")
    assert code == 0 and "hw-example" in out and "Traceback" not in err


def test_a_manifest_claiming_millions_of_pages_is_refused_before_anything_is_allocated(mini):
    """A 1.6 MB manifest saying 51 million pages made a query without words take 70 s and 9 GB."""
    from kernelwiki.storage import cache, termindex

    repo = _planted_index(mini, lambda index: None)
    manifest = mini.root / ".kernelwiki-cache" / cache.QUERY
    document = json.loads(manifest.read_text())
    document["data"].update(pages=256 * 200_000, records=[[0, 0]] * 200_000)
    manifest.write_text(json.dumps(document))
    assert termindex._stored(repo, cache.cache_key(repo)) is None
    code, out, err = mini.run("query", "--limit", "1")
    assert code == 0 and "1 of 2 pages" in err, (out, err)


def test_a_query_data_file_larger_than_a_cache_file_may_be_is_not_read(mini, monkeypatch):
    """The data file is read at the offsets its manifest names, each within the file: a sparse file of
    any size made a read (and an allocation) of that size."""
    from kernelwiki.storage import cache, termindex

    repo = _planted_index(mini, lambda index: None)
    data = mini.root / ".kernelwiki-cache" / termindex.DATA
    manifest = mini.root / ".kernelwiki-cache" / cache.QUERY
    document = json.loads(manifest.read_text())
    huge = 64 << 20
    os.truncate(data, huge)   # sparse: no disk used
    document["data"]["size"] = huge
    document["data"]["shards"] = {name: [where[0], huge - where[0]] for name, where in document["data"]["shards"].items()}
    manifest.write_text(json.dumps(document))
    monkeypatch.setattr(cache, "MAX_BYTES", 1 << 20)
    assert termindex._stored(repo, cache.cache_key(repo)) is None


def test_a_linked_cache_directory_is_never_read_through(mini, tmp_path):
    from kernelwiki.storage import cache

    _planted_index(mini, lambda index: [r.update(title="PLANTED") for r in index._records[0]])
    outside = tmp_path / "outside-cache"
    shutil.move(str(mini.root / ".kernelwiki-cache"), outside)
    (mini.root / ".kernelwiki-cache").symlink_to(outside)
    code, out, err = mini.run("query", "example")
    assert code == 0 and "hw-example" in out and "PLANTED" not in out, out
    from kernelwiki.storage.repo import Repo
    assert cache.read(Repo(mini.root), cache.QUERY, cache.cache_key(Repo(mini.root))) is None


def test_a_section_that_is_not_there_names_the_headings_as_printable_text(mini):
    mini.write("wiki/hardware/example.md", HW_PAGE_WITH_BODY("# Example\n\n## Bad \x1b]0;pwn\x07 heading \u202e\n\ntext\n"))
    for argv in (("get", "hw-example", "--section", "zzz"), ("get", "hw-example", "--section", "zzz", "--format", "json")):
        code, out, err = mini.run(*argv)
        assert code == 1 and "Bad" in err and not re.search("[\x1b\x07\u202e]", out + err), err


def HW_PAGE_WITH_BODY(body: str) -> str:
    from conftest import HW_PAGE

    return HW_PAGE.split("---\n# ")[0] + "---\n" + body


def test_record_strings_reach_the_terminal_escaped_from_probe_show_and_record(mini):
    """validate takes a record whose strings hold bidi overrides and C1 controls (the record checks
    are storage.records'); what prints them escapes them, JSON included."""
    from test_fuzz import run_sub
    from test_refresh import RECORD, setup

    setup(mini)
    record = json.loads(json.dumps(RECORD))
    record["cases"][0]["headline"].update(metric="t\u202eflops\x9b31m", baseline="\x1b[2Jx", baseline_value=1.0, ratio=1.0)
    record["environment"]["torch"] = "2.11\u202e"
    record["cases"].append({**record["cases"][0], "id": "c2"})
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))
    for argv in (("probe", "show", "probe-x"), ("probe", "show", "probe-x", "--json"), ("probe", "record", "probe-x"),
                 ("probe", "record", "probe-x", "--case", "c1"), ("probe", "record", "probe-x", "--json")):
        code, out, err = run_sub(mini.root, *argv)
        assert code == 0 and not re.search("[\x1b\u202e\x9b]", out + err), (argv, out)
    code, out, err = mini.run("get", "hw-example", "--include-code", "--format", "json")
    assert not re.search("[\x1b\u202e\x9b]", out + err)
    json.loads(out)


@pytest.mark.parametrize("field", ["files", "case", "shape"])
def test_a_list_of_patterns_is_bounded(mini, field):
    """20,000 file patterns in one MCP get_page took 33 s (every pattern against every file); a
    1 MiB line holds 100,000."""
    from kernelwiki.faces import arguments

    patterns = [f"*x{i}*y*" for i in range(arguments.MAX_PATTERNS + 1)]
    raw = {"page": "hw-example", "include_code": True, field: patterns}
    with pytest.raises(arguments.ArgumentError, match=rf"{field}: {len(patterns)} patterns; at most {arguments.MAX_PATTERNS}"):
        arguments.get(raw)
    arguments.get({**raw, field: patterns[:-1]})
    flag = {"files": "--files", "case": "--case", "shape": "--shape"}[field]
    code, out, err = mini.run("get", "hw-example", "--include-code" if field == "files" else "--claims",
                              *[x for p in patterns for x in (flag, p)])
    assert code == 2 and f"{len(patterns)} patterns" in err and "Traceback" not in err, err


def test_a_versus_claim_under_another_protocol_states_ours_under_that_protocol(mini):
    """fp8's `versus: DeepGEMM @ 8 GB memset` claim paired ours without the memset (1170 TFLOP/s)
    with the ratio taken under it (1328.77 / 1485.27 = 0.895): the value and the ratio came from
    two protocols. The claim now states "ours @ P"; without such an entry no claim is made, and a
    page holding the old pairing is a validate problem."""
    import yaml

    page = _versus_setup(mini, '"DeepGEMM @ memset"', [])
    record = json.loads((mini.root / "artifacts/evidence/probe-x/r1.json").read_text())
    record["cases"][0]["baselines"] += [{"name": "ours @ memset", "value": 90.0, "ratio": None},
                                        {"name": "DeepGEMM @ memset", "value": 100.0, "ratio": 0.9}]
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))
    mini.run("refresh")
    claims = {c["id"]: c for c in yaml.safe_load(page.read_text(encoding="utf-8").split("---")[1])["claims"]}
    versus = claims["measured.x.c1.vs-deepgemm-memset"]
    assert versus["value"] == 90.0 and versus["ratio"] == 0.9 and versus["conditions"].startswith("ours @ memset against")
    assert not mini.problems()
    text = page.read_text(encoding="utf-8")
    mini.write("wiki/hardware/example.md", text.replace("value: 90.0", "value: 123.4", 1))   # the old pairing
    assert any("under memset" in p["message"] for p in mini.problems()), messages(mini.problems())
    record["cases"][0]["baselines"] = [b for b in record["cases"][0]["baselines"] if b["name"] != "ours @ memset"]
    mini.write("artifacts/evidence/probe-x/r1.json", json.dumps(record))
    mini.write("wiki/hardware/example.md", text)
    mini.run("refresh")
    assert "vs-deepgemm-memset" not in page.read_text(encoding="utf-8").split("---")[1]

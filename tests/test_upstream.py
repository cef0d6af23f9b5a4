"""`get --include-code --fetch-upstream`: pinned upstream files downloaded from a local HTTP server,
hash-checked, cached outside the repository, and never shown when they do not match."""

from __future__ import annotations

import hashlib
import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from kernelwiki.storage.repo import Repo
from kernelwiki.commands.upstream import UpstreamError, cache_dir, fetch, repo_name

COMMIT = "54e22612409371d6364144b69086735beb54e98b"
UPSTREAM_PATH = "include/kernel/gemm.cuh"
GOOD = "// upstream kernel, line 1\n__global__ void gemm() {}\n"
GOOD_SHA = hashlib.sha256(GOOD.encode()).hexdigest()
OURS = "def ours():\n    pass\n"


class Upstream:
    """A local stand-in for raw.githubusercontent.com: serves `files` at /<repo>/<commit>/<path>."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append(self.path)
                body = owner.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write(body if body is not None else b"404: Not Found")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.template = f"http://127.0.0.1:{self.server.server_address[1]}/{{repo}}/{{commit}}/{{path}}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream(monkeypatch, tmp_path):
    server = Upstream()
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_URL", server.template)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield server
    server.close()


def _pinned_page(mini, sha256: str = GOOD_SHA) -> None:
    mini.write("artifacts/kernels/example/kernel.py", OURS)
    mini.write("artifacts/kernels/example/PROVENANCE.yaml", f"""artifact: hw-example
origin: mixed
upstream:
  repo: https://github.com/example-org/example-kernels
  commit: {COMMIT}
files:
- path: kernel.py
  sha256: {hashlib.sha256(OURS.encode()).hexdigest()}
  origin: own
- path: {UPSTREAM_PATH}
  sha256: {sha256}
  origin: upstream
""")
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("summary:", "artifact_dir: artifacts/kernels/example\nsummary:"))


def _url_path() -> str:
    return f"/example-org/example-kernels/{COMMIT}/{UPSTREAM_PATH}"


def test_right_file_is_printed_like_our_own_and_cached(mini, upstream, tmp_path):
    _pinned_page(mini)
    assert mini.problems() == []
    upstream.files[_url_path()] = GOOD.encode()
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 0, err
    assert "(upstream, https://github.com/example-org/example-kernels@54e22612409" in out
    assert "```cuda\n// upstream kernel, line 1\n__global__ void gemm() {}\n```" in out
    cached = tmp_path / "cache/kernelwiki/upstream/example-org/example-kernels" / COMMIT / UPSTREAM_PATH
    assert cached.read_text() == GOOD
    assert not any(p.name == "gemm.cuh" for p in mini.root.rglob("*"))  # nothing lands in the repository
    # Second time from the cache: the server is not asked again.
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--fetch-upstream", "--format", "json")
    item = next(f for f in json.loads(out)["artifacts"]["files"] if f["origin"] == "upstream")
    assert code == 0 and item["text"] == GOOD and item["cached_at"] == str(cached)
    assert upstream.requests == [_url_path()]


def test_tampered_file_is_never_shown(mini, upstream):
    _pinned_page(mini)
    upstream.files[_url_path()] = GOOD.replace("gemm", "evil").encode()
    received = hashlib.sha256(upstream.files[_url_path()]).hexdigest()
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 1
    assert UPSTREAM_PATH in err and f"expected {GOOD_SHA}, received {received}" in err
    assert "evil" not in out and "evil" not in err
    assert "def ours():" in out  # the rest of the page is still printed


def test_tampered_cache_is_downloaded_again(mini, upstream, tmp_path):
    _pinned_page(mini)
    upstream.files[_url_path()] = GOOD.encode()
    cached = tmp_path / "cache/kernelwiki/upstream/example-org/example-kernels" / COMMIT / UPSTREAM_PATH
    cached.parent.mkdir(parents=True)
    cached.write_text("evil")
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 0 and "evil" not in out and "void gemm()" in out and cached.read_text() == GOOD


def test_missing_file_404(mini, upstream):
    _pinned_page(mini)
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 1 and UPSTREAM_PATH in err and "HTTP 404" in err


def test_no_network_connection_refused(mini, monkeypatch, tmp_path):
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_URL", f"http://127.0.0.1:{port}/{{repo}}/{{commit}}/{{path}}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _pinned_page(mini)
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 1 and UPSTREAM_PATH in err and "download failed" in err and "refused" in err.lower()


def test_without_fetch_upstream_nothing_is_downloaded(mini, upstream):
    _pinned_page(mini)
    upstream.files[_url_path()] = GOOD.encode()
    code, out, _ = mini.run("get", "hw-example", "--include-code")
    assert code == 0 and "add --fetch-upstream" in out and "void gemm()" not in out and upstream.requests == []
    code, _, err = mini.run("get", "hw-example", "--fetch-upstream")
    assert code == 2 and "--fetch-upstream works with --include-code" in err


def test_wheel_pin_without_commit_says_how_to_install(mini, upstream):
    _pinned_page(mini)
    prov = mini.root / "artifacts/kernels/example/PROVENANCE.yaml"
    prov.write_text(prov.read_text().replace(f"  commit: {COMMIT}\n", "  package: no-such-wheel-kw\n  version: '1.0'\n"))
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 0 and "pip install no-such-wheel-kw==1.0" in out and "pinned by its wheel" in out
    assert upstream.requests == []


def test_cache_inside_the_repository_is_refused(mini, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(mini.root / ".cache"))
    with pytest.raises(UpstreamError, match="inside the repository"):
        cache_dir(Repo(mini.root).root)


@pytest.mark.parametrize("path", ["../escape.cuh", "/etc/passwd", "a/../../b"])
def test_paths_that_leave_the_upstream_repo_are_refused(path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(UpstreamError, match="must stay inside"):
        fetch("example-org/example-kernels", COMMIT, path, GOOD_SHA, tmp_path / "repo")


def test_repo_name():
    assert repo_name("https://github.com/deepseek-ai/DeepGEMM") == "deepseek-ai/DeepGEMM"
    assert repo_name("deepseek-ai/DeepGEMM.git") == "deepseek-ai/DeepGEMM"
    assert repo_name("https://gitlab.com/a/b") is None



def test_mcp_fetch_upstream(mini, upstream):
    pytest.importorskip("mcp")
    from kernelwiki.faces.mcp_server import call

    _pinned_page(mini)
    upstream.files[_url_path()] = GOOD.encode()
    repo = Repo(mini.root)
    asked = {"page": "hw-example", "include_code": True, "fetch_upstream": True}
    result = call(repo, "get_page", {**asked, "format": "json"})
    item = next(f for f in result.structured_content["artifacts"]["files"] if f["origin"] == "upstream")
    assert not result.is_error and item["text"] == GOOD
    assert "void gemm()" in call(repo, "get_page", asked).content[0].text
    upstream.files[_url_path()] = b"evil"
    result = call(repo, "get_page", {"page": "hw-example", "include_code": True, "fetch_upstream": True})
    assert not result.is_error  # the good copy in the cache still matches its pin
    for cached in Path(str(item["cached_at"])).parent.iterdir():
        cached.write_text("evil too")
    result = call(repo, "get_page", {"page": "hw-example", "include_code": True, "fetch_upstream": True})
    assert result.is_error and result.structured_content is None
    assert f"expected {GOOD_SHA}, received {hashlib.sha256(b'evil').hexdigest()}" in result.content[0].text
    assert "evil" not in result.content[0].text.replace("received", "")


def test_pin_without_repo_or_commit_cannot_be_fetched(mini, upstream):
    _pinned_page(mini)
    prov = mini.root / "artifacts/kernels/example/PROVENANCE.yaml"
    prov.write_text(prov.read_text().replace(f"  commit: {COMMIT}\n", ""))
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 0 and "names no upstream repo and commit" in out and upstream.requests == []


def test_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir(tmp_path / "repo") == (tmp_path / "home/.cache/kernelwiki/upstream").resolve()


def _mirror(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A bare git mirror <dir>/example-org+example-kernels/repo holding one commit of `files`."""
    import subprocess

    work = tmp_path / "work"
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "PATH": __import__("os").environ["PATH"]}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *argv], cwd=work, env=env, check=True, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, env=env, check=True, capture_output=True,
                            text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "example-org+example-kernels" / "repo")],
                   env=env, check=True, capture_output=True)
    return mirrors, commit


def test_fetch_upstream_reads_a_local_git_mirror_without_the_network(mini, upstream, tmp_path, monkeypatch):
    mirrors, commit = _mirror(tmp_path, {UPSTREAM_PATH: GOOD})
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_MIRROR", str(mirrors))
    _pinned_page(mini)
    prov = mini.root / "artifacts/kernels/example/PROVENANCE.yaml"
    prov.write_text(prov.read_text().replace(COMMIT, commit))
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream", "--format", "json")
    item = next(f for f in json.loads(out)["artifacts"]["files"] if f["origin"] == "upstream")
    assert code == 0 and item["text"] == GOOD and item["fetched_from"].endswith(f"@{commit}:{UPSTREAM_PATH}")
    assert "cached_at" not in item and upstream.requests == []  # no download, nothing cached
    # A mirror whose file does not match the pin is refused like a download would be.
    prov.write_text(prov.read_text().replace(GOOD_SHA, "f" * 64))   # (64 zeros would read as the integer 0)
    code, out, err = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 1 and "SHA-256 mismatch" in err and "void gemm" not in out and upstream.requests == []


def test_a_mirror_without_the_commit_falls_back_to_the_url(mini, upstream, tmp_path, monkeypatch):
    mirrors, _ = _mirror(tmp_path, {UPSTREAM_PATH: GOOD})
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_MIRROR", str(mirrors))
    _pinned_page(mini)
    upstream.files[_url_path()] = GOOD.encode()
    code, out, _ = mini.run("get", "hw-example", "--include-code", "--fetch-upstream")
    assert code == 0 and "void gemm()" in out and upstream.requests == [_url_path()]


DEEPGEMM_MIRROR = Path("/work/.mirror")


@pytest.mark.skipif(not (DEEPGEMM_MIRROR / "deepseek-ai+DeepGEMM" / "repo").is_dir(),
                    reason="no local git mirror of DeepGEMM on this machine")
def test_deepgemm_bundle_is_the_measured_revision_and_reads_from_a_mirror(monkeypatch, tmp_path):
    """The pin is the revision the FP8 probe's latest record measured, and every pinned file of it
    comes out of the mirror, hash-checked, without a download."""
    from conftest import ROOT, run_cli
    from kernelwiki.commands.validate import measured_revisions
    from kernelwiki.storage.records import latest, load_records
    from kernelwiki.model import yamlio

    monkeypatch.setenv("KERNELWIKI_UPSTREAM_MIRROR", str(DEEPGEMM_MIRROR))
    monkeypatch.setenv("KERNELWIKI_UPSTREAM_URL", "http://127.0.0.1:9/{repo}/{commit}/{path}")  # never asked
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pin = yamlio.read_mapping(ROOT / "artifacts/kernels/deepgemm/PROVENANCE.yaml")[0]["upstream"]["commit"]
    record = latest(load_records(Repo(ROOT), "probe-fp8-blockscale-gemm", quiet=True)["probe-fp8-blockscale-gemm"],
                    mode="run")
    assert [pin.startswith(rev) for rev in measured_revisions(record.data.get("protocol"), "deepgemm")] == [True]
    code, out, err = run_cli(["get", "kernel-deepgemm", "--include-code", "--fetch-upstream", "--format", "json"], ROOT)
    upstream_files = [f for f in json.loads(out)["artifacts"]["files"] if f["origin"] == "upstream"]
    assert code == 0, err
    assert upstream_files and all(f.get("text") and f["fetched_from"].endswith(f"@{pin}:{f['path']}")
                                  for f in upstream_files)
    assert "fp8_gemm.cuh" in {Path(f["path"]).name for f in upstream_files}

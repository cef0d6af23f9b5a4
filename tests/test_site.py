"""The docs site: built with mkdocs --strict, then checked in a real browser (Debian's chromium,
driven by Playwright) against the built site served on localhost. Screenshots go to
test-artifacts/screenshots/."""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "kernelwiki", "site", "build", "--out", str(out)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_strict_build_has_every_generated_page(site):
    for page in ("index.html", "evidence/index.html", "evidence/probes/index.html", "evidence/coverage/index.html",
                 "evidence/footguns/index.html", "evidence/tags/index.html", "hardware/wgmma/index.html"):
        assert (site / page).is_file(), page
    wgmma = (site / "hardware/wgmma/index.html").read_text()
    assert 'class="kw-card"' in wgmma and "measured here" in wgmma
    assert "<!-- kernelwiki:begin" not in wgmma  # the raw-Markdown block is replaced by the card's table
    tma_text = re.sub(r"<[^>]+>", "", (site / "hardware/tma/index.html").read_text())
    assert "class TmaCopy" in tma_text  # the kernel source, included from the file by the snippet


def test_tags_outside_the_vocabulary_fail_the_build(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("wiki", "schemas"):
        shutil.copytree(ROOT / name, copy / name)
    for name in ("mkdocs.yml", "kernelwiki"):
        (copy / name).symlink_to(ROOT / name)
    page = copy / "wiki/hardware/wgmma.md"
    page.write_text(page.read_text().replace("tags:\n- wgmma\n", "tags:\n- not-in-vocabulary\n", 1))
    result = subprocess.run([sys.executable, "-m", "kernelwiki", "site", "build", "--root", str(copy),
                             "--out", str(tmp_path / "out")], cwd=copy, capture_output=True, text=True)
    assert result.returncode != 0 and "not-in-vocabulary" in result.stdout + result.stderr


def test_every_record_is_published(site):
    for record in (ROOT / "artifacts/evidence").glob("*/*.json"):
        assert (site / "records" / record.parent.name / record.name).is_file()


class _Links(HTMLParser):
    """Every URL an HTML page points at (raw HTML included) and every id it defines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if values.get(key):
                self.ids.add(values[key])
        for key in ("href", "src"):
            if values.get(key) and not (tag == "link" and values.get("rel") in ("canonical", "alternate")):
                self.urls.append(values[key])


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def _resolve(site: Path, page: Path, url: str) -> tuple[Path | None, str]:
    """The file an internal URL of `page` resolves to (None: it leaves the site) and its fragment."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("//"):
        return None, ""
    path, _, fragment = url.partition("#")
    path = path.partition("?")[0]
    if not path:
        return page, fragment
    base = page.parent.relative_to(site).as_posix()
    target = posixpath.normpath(posixpath.join("/" + base, path)).lstrip("/")
    resolved = site / target
    if path.endswith("/") or resolved.is_dir():
        resolved = resolved / "index.html"
    return resolved, fragment


def broken_links(site: Path) -> tuple[int, int, list[str]]:
    """(pages crawled, internal links checked, the broken ones) over every HTML file of the site."""
    pages = sorted(site.rglob("*.html"))
    parsed: dict[Path, _Links] = {}
    checked, broken = 0, []
    for page in pages:
        if page.name == "404.html":  # served for any missing path: its links are root-relative by design
            continue
        for url in parsed.setdefault(page, _parse(page)).urls:
            target, fragment = _resolve(site, page, url)
            if target is None:
                continue
            checked += 1
            where = f"{page.relative_to(site)}: {url}"
            if not target.is_file():
                broken.append(f"{where} (no file {target.relative_to(site) if target.is_relative_to(site) else target})")
            elif fragment and target.suffix == ".html":
                if target not in parsed:
                    parsed[target] = _parse(target)
                if fragment not in parsed[target].ids:
                    broken.append(f"{where} (no id '{fragment}')")
    return len(pages), checked, broken


def test_no_broken_internal_links_or_anchors(site):
    pages, checked, broken = broken_links(site)
    print(f"crawled {pages} pages, {checked} internal links, {len(broken)} broken")
    assert pages > 50 and checked > 1000
    assert not broken, "\n".join(broken[:50])


def test_the_crawler_sees_a_broken_link_in_raw_html(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a/index.html").write_text('<p id="here"><a href="../b/">b</a> <a href="#here">self</a>'
                                           '<div><a href="../a/#nowhere">x</a></div></p>')
    (tmp_path / "b.html").write_text('<a href="a/#here">ok</a><a href="https://example.com/">out</a>')
    (tmp_path / "c.html").write_text("<p>no links</p>")
    pages, checked, broken = broken_links(tmp_path)
    assert pages == 3 and checked == 4
    assert broken == ["a/index.html: ../b/ (no file b/index.html)", "a/index.html: ../a/#nowhere (no id 'nowhere')"]


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        if IN_CI:
            pytest.fail("CI must run the browser tests: /usr/bin/chromium is missing (apt-get install chromium)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)


def test_wgmma_page_shows_evidence_card_and_claims_table(page, server):
    page.goto(f"{server}/hardware/wgmma/")
    card = page.locator(".kw-card").first
    card.wait_for(state="visible")
    assert "Evidence" in card.inner_text() and "sm_90a" in card.inner_text()
    assert page.locator(".kw-card .kw-badge").first.is_visible()
    table = page.locator("table", has_text="measured here").first
    assert table.is_visible()
    text = table.inner_text()
    assert "h200-bf16-dense-peak" in text and "989 TFLOP/s" in text and "TFLOP/s" in text.split("989", 1)[1]
    shot(page, "wgmma-evidence-card")


def test_search_finds_tcgen05(page, server):
    page.goto(f"{server}/")
    page.locator(".md-search__input").first.click()
    page.keyboard.type("tcgen05")
    first = page.locator(".md-search-result__article").first
    first.wait_for(state="visible", timeout=15000)
    assert "matching document" in page.locator(".md-search-result__meta").inner_text()
    assert "tcgen05" in first.inner_text().lower()
    shot(page, "search-tcgen05")


def test_code_tab_shows_the_kernel_source(page, server):
    page.goto(f"{server}/hardware/tma/")
    page.get_by_text("tma_copy.py", exact=True).first.click()
    code = page.locator(".tabbed-block:visible code", has_text="class TmaCopy").first
    code.wait_for(state="visible")
    assert "def can_implement" in code.inner_text()
    code.scroll_into_view_if_needed()
    shot(page, "tma-code-tab")


def test_dashboard_lists_claims(page, server):
    page.goto(f"{server}/evidence/")
    rows = page.locator("table tbody tr")
    rows.first.wait_for(state="visible")
    body = page.locator("table").first.inner_text()
    assert rows.count() > 20
    assert "measured.calibration.cublas-bf16-8192" in body and "cutlass-ex48-tf32" in body
    shot(page, "dashboard")

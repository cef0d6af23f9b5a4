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

from conftest import ROOT, record_files, record_text

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
    from kernelwiki.storage.record_file import read_text, run_id_of

    folders = [p for p in (ROOT / "artifacts/evidence").iterdir() if p.is_dir()]
    published = [(record, site / "records" / folder.name / f"{run_id_of(record.name)}.json")
                 for folder in folders for record in record_files(folder)]
    assert published
    for record, json_file in published:   # the text inflated, where the .json stood
        assert json_file.read_text(encoding="utf-8") == read_text(record)


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


def _pages_with(**match) -> list[dict]:
    """Frontmatter of the wiki's pages whose fields equal `match` (read from the files, as the site does)."""
    from kernelwiki.storage.index import Wiki
    from kernelwiki.storage.repo import Repo

    wiki = Wiki.load(Repo.find(ROOT))
    return [dict(e.meta, rel=e.rel) for e in wiki.by_id().values()
            if all(e.get(k) == v for k, v in match.items())]


def _url(rel: str) -> str:
    return "/" + rel.removeprefix("wiki/").removesuffix(".md") + "/"


KERNEL_PAGES = [_url(p["rel"]) for p in _pages_with(type="kernel")]


def _has_a_measured_probe(url: str) -> bool:
    """Whether a probe of the page has a passing run on a GPU (FA4 is `compiled` for its primary
    arch, sm_100a, yet measured on the H200)."""
    from kernelwiki.storage.records import load_records
    from kernelwiki.storage.repo import Repo

    records = load_records(Repo.find(ROOT))
    meta = next(p for p in _pages_with(type="kernel") if _url(p["rel"]) == url)
    return any(r.data.get("mode") == "run" and r.data.get("status") == "passed"
               for probe in meta.get("probes") or [] for r in records.get(probe, []))


def test_no_empty_claims_heading_and_nav_titles_are_page_headings(site):
    import html

    compared = 0
    for meta in _pages_with():
        text = (site / _url(meta["rel"]).strip("/") / "index.html").read_text(encoding="utf-8")
        if 'id="claims-and-measurements"' in text:
            after = text.split('id="claims-and-measurements"', 1)[1]
            assert 'class="kw-claims"' in after.split("<h2", 1)[0], meta["rel"]
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.S)
        active = re.search(r'md-nav__link--active"[^>]*>\s*<span class="md-ellipsis">\s*(.*?)\s*</span>', text, re.S)
        plain = lambda fragment: html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("¶", "").strip()
        assert h1 and active, meta["rel"]
        assert plain(active.group(1)) == plain(h1.group(1)), meta["rel"]
        compared += 1
    assert compared > 40


def test_wgmma_page_shows_evidence_card_and_claims_table(page, server):
    page.goto(f"{server}/hardware/wgmma/")
    card = page.locator(".kw-card").first
    card.wait_for(state="visible")
    assert "Evidence" in card.inner_text() and "sm_90a" in card.inner_text()
    assert page.locator(".kw-card .kw-badge").first.is_visible()
    fold = page.locator("details.kw-fold", has=page.locator(".kw-claims")).last
    assert not fold.evaluate("d => d.open")  # folded by default
    fold.locator("summary").first.click()
    table = page.locator(".kw-claims table", has_text="h200-bf16-dense-peak").first
    table.wait_for(state="visible")
    text = table.inner_text()
    assert "h200-bf16-dense-peak" in text and "(TFLOP/s)" in text and "989" in text
    assert not re.search(r"\d\.\d{5,}", text)  # 3-4 significant digits, not 795.8248
    assert table.locator(".kw-where").first.is_visible()  # conditions visible in the row
    table.scroll_into_view_if_needed()
    shot(page, "wgmma-claims-table")


def test_search_finds_tcgen05(page, server):
    page.goto(f"{server}/")
    page.locator(".md-search__input").first.click()
    page.keyboard.type("tcgen05")
    first = page.locator(".md-search-result__item").first
    first.wait_for(state="visible", timeout=15000)
    assert "matching document" in page.locator(".md-search-result__meta").inner_text()
    assert "tcgen05" in first.inner_text().lower()
    shot(page, "search-tcgen05")


_WATCH_RESULTS = """() => { if (window.__kwWatch) return; window.__kwLast = performance.now();
    const list = document.querySelector('.md-search-result__list') || document.querySelector('.md-search-result');
    window.__kwWatch = new MutationObserver(() => { window.__kwLast = performance.now(); });
    window.__kwWatch.observe(list, {childList: true, subtree: true, attributes: true, characterData: true}); }"""


def _first_hit(page, words: str) -> str:
    """The path of the first search result for `words`. The box is emptied first and the old results
    must be gone before the query is typed, so a slow search worker (a loaded machine) cannot hand
    back the previous query's results as this one's; then the result list must have changed (a
    first result appeared) and stopped changing for 800 ms (the ranking has settled), waited on as
    conditions in the page, not as a count of sleeps."""
    box = page.locator(".md-search__input").first
    page.evaluate(_WATCH_RESULTS)
    box.press("Control+a")
    box.press("Backspace")   # key events: the search listens to the keyboard, not to fill()
    page.wait_for_function("() => document.querySelectorAll('.md-search-result__item').length === 0",
                           timeout=30000)
    box.fill(words)  # the whole query at once: no search of a prefix of it can answer late
    box.press("End")  # a key event, which the search listens to
    page.wait_for_function("words => document.querySelector('.md-search__input').value === words "
                           "&& document.querySelector('.md-search-result__item .md-search-result__link')",
                           arg=words, timeout=30000)
    page.wait_for_function("() => performance.now() - window.__kwLast > 800", timeout=30000, polling=200)
    href = page.locator(".md-search-result__item").first.locator(".md-search-result__link").first.get_attribute("href")
    return "/" + (href or "").split("://", 1)[-1].split("/", 1)[-1].split("?")[0].split("#")[0]


_WORKER_HITS = """async queries => {
    // The site's own search worker and index, asked directly as the search box asks it (the same
    // setup and query messages, without the typing and the rendering): the first result's location.
    const config = JSON.parse(document.getElementById('__config').textContent);
    const base = new URL(config.base + '/', location.href);
    const index = await (await fetch(new URL('search/search_index.json', base))).json();
    const worker = new Worker(new URL(config.search, location.href));
    const ask = message => new Promise(resolve => { worker.onmessage = e => resolve(e.data); worker.postMessage(message); });
    await ask({type: 0, data: {config: index.config, docs: index.docs,
                               options: {suggest: config.features.includes('search.suggest')}}});
    const out = [];
    for (const q of queries) {
        const reply = await ask({type: 2, data: q});
        const first = reply.data.items[0];
        out.push(first ? '/' + first[0].location.split('#')[0].split('?')[0] : null);
    }
    worker.terminate();
    return out;
}"""


def test_search_finds_every_page_by_each_alias_first(page, server):
    """Every alias of every page, asked of the site's search worker: its page comes first. A few are
    typed into the search box as well, to show that the box and the worker agree."""
    page.goto(f"{server}/")
    expected = [(str(alias), _url(meta["rel"])) for meta in _pages_with() for alias in meta.get("aliases") or []]
    hits = page.evaluate(_WORKER_HITS, [alias for alias, _ in expected])
    missed = [f"{alias} -> {hit} (expected {want})" for (alias, want), hit in zip(expected, hits) if hit != want]
    assert not missed, "\n".join(missed)
    page.locator(".md-search__input").first.click()
    typed = expected[:: max(1, len(expected) // 5)]
    assert [_first_hit(page, alias) for alias, _ in typed] == [want for _, want in typed]


def test_search_finds_the_page_about_a_thing_not_code_using_it(page, server):
    page.goto(f"{server}/")
    page.locator(".md-search__input").first.click()
    assert _first_hit(page, "swizzle") == "/techniques/swizzling/"
    assert _first_hit(page, "UMMA") == "/hardware/tcgen05-mma/"
    assert _first_hit(page, "tcgen05") == "/hardware/tcgen05-mma/"


@pytest.mark.parametrize("url", KERNEL_PAGES)
def test_kernel_page_prose_starts_in_the_first_screen(browser, server, url):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    external: list[str] = []
    errors: list[str] = []
    tab.on("request", lambda r: None if r.url.startswith(server) or r.url.startswith("data:") else external.append(r.url))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.goto(f"{server}{url}")
    first = tab.locator("article.md-content__inner > p").first
    first.wait_for(state="visible")
    box = first.bounding_box()
    assert box and box["y"] + 20 < 900, f"{url}: first paragraph starts at {box}"
    if _has_a_measured_probe(url):  # the headline strip is on the first screen, before any code
        strip = tab.locator(".kw-strip").first.bounding_box()
        assert strip and strip["y"] < 900, f"{url}: headline strip at {strip}"
    assert tab.evaluate("() => [...document.querySelectorAll('details.kw-fold')].every(d => !d.open)")
    name = url.strip("/").replace("/", "-")
    shot(tab, f"{name}-1440")
    charts = tab.locator("img.kw-chart")
    if _has_a_measured_probe(url):
        assert charts.count() >= 1, f"{url}: a measured kernel page without a chart"
        charts.first.scroll_into_view_if_needed()
        tab.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=charts.first.element_handle())
        shot(tab, f"{name}-chart-1440")
    tab.set_viewport_size({"width": 390, "height": 844})
    tab.evaluate("window.scrollTo(0, 0)")
    tab.wait_for_timeout(400)  # the header's title animation after the scroll
    shot(tab, f"{name}-390")
    assert not external, external
    assert not errors, errors
    context.close()


def test_home_has_headline_measurements_linked_to_kernel_charts(page, server):
    page.goto(f"{server}/")
    table = page.locator("table", has_text="baseline").first
    table.wait_for(state="visible")
    assert "H200" in table.inner_text() and "×" in table.inner_text()
    table.locator("a[href*='#measurements']").first.click()
    page.wait_for_url("**#measurements")   # a kernel page, or a technique page whose probe is a kernel probe
    shot(page, "home-headline-link-target")
    page.goto(f"{server}/")
    shot(page, "home-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "home-390")


def test_tabs_reach_the_evidence_pages_and_records_open_as_pages(page, server):
    page.goto(f"{server}/kernels/hopper-gemm/")
    page.locator(".md-tabs").get_by_role("link", name="Evidence").click()
    page.wait_for_url("**/evidence/")
    assert page.locator("h1").first.inner_text().startswith("Evidence dashboard")
    page.goto(f"{server}/kernels/hopper-gemm/")
    page.locator("details.kw-fold > summary", has_text="claims").first.click()
    page.locator(".kw-claims a:visible", has_text="record").first.click()   # the first claims group shown open
    page.wait_for_url("**/records/**")
    assert page.locator("h2", has_text="Environment").count() == 1 and page.locator("h2", has_text="Cases").count() == 1
    assert page.locator("a[href$='.json']").count() >= 1
    shot(page, "record-page")
    page.goto(f"{server}/evidence/probes/")
    # the probes with several runs whose latest passed, read from the records (most probes keep only the
    # runs their pages use, and which those are changes with every measurement): one of them shows the
    # ratio history of its headline case
    entries = {probe: page.evaluate("""id => { let el = document.getElementById(id).nextElementSibling, text = '';
        while (el && el.tagName !== 'H2') { text += el.innerText + '\\n'; el = el.nextElementSibling; } return text; }""", probe)
        for probe in _probes_with_several_passing_runs()}
    assert entries, "no probe has two run records whose latest passed"
    assert any(re.search(r"Backed by \d+ run records", entry) and "Headline" in entry
               and re.search(r"last [2-5] runs: [\d.]+× \(", entry) for entry in entries.values()), entries
    shot(page, "probe-catalogue")


def _probes_with_several_passing_runs() -> list[str]:
    from kernelwiki.storage.records import load_records
    from kernelwiki.storage.repo import Repo

    return [probe for probe, records in load_records(Repo(ROOT), quiet=True).items()
            if len([r for r in records if r.mode == "run"]) >= 2 and [r for r in records if r.mode == "run"][-1].status == "passed"]


def test_cross_links_see_also_cited_by_and_diagrams(page, server):
    page.goto(f"{server}/kernels/hopper-gemm/")
    prose = page.locator("article.md-content__inner > p a[href*='hardware/wgmma']")
    assert prose.count() >= 1  # the id `hw-wgmma` in the prose became a link
    assert page.locator("h2#see-also").count() == 1
    assert page.locator(".tabbed-labels label").first.text_content().strip() == "hopper_gemm.py"  # the kernel, not PROVENANCE
    page.goto(f"{server}/kernels/deepgemm/")
    pinned = page.locator("a[href^='https://github.com/deepseek-ai/DeepGEMM/blob/']")
    assert pinned.count() >= 1 and "/340d9880f4a418d943d34260d20a79f41f4c0526/deep_gemm/include/deep_gemm/fp8_gemm.cuh" in pinned.first.get_attribute("href")
    page.goto(f"{server}/sources/ptx-isa/")
    assert page.locator("h2#cited-by").count() == 1
    for url, name in (("/techniques/warp-specialization/", "warp-specialized-pipeline"),
                      ("/hardware/tmem/", "tmem-lanes-columns"), ("/hardware/tcgen05-mma/", "tcgen05-2cta-mma"),
                      ("/techniques/fine-grained-quantization/", "deepgemm-promotion")):
        page.goto(f"{server}{url}")
        image = page.locator(f"img[src*='{name}.svg']")
        image.scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
        shot(page, f"diagram-{name}")


def test_dark_mode_status_icons_and_abbreviations(page, server):
    page.goto(f"{server}/hardware/tmem/")
    assert page.locator("abbr[title]", has_text="TMEM").count() >= 1
    icons = page.evaluate("""() => Object.fromEntries(['draft', 'verified', 'regressed', 'stale'].map(s => {
        const el = document.createElement('span'); el.className = 'md-status md-status--' + s;
        document.body.appendChild(el); const after = getComputedStyle(el, '::after');
        return [s, (after.maskImage || after.webkitMaskImage) + after.backgroundColor]; }))""")
    assert len(set(icons.values())) == 4, icons
    page.locator("label[for='__palette_1']").first.click()
    page.wait_for_function("() => document.body.getAttribute('data-md-color-scheme') === 'slate'")
    shot(page, "tmem-dark-1440")


def test_code_tab_shows_the_kernel_source(page, server):
    page.goto(f"{server}/hardware/tma/")
    fold = page.locator("details.kw-code").first
    assert not fold.evaluate("d => d.open") and re.search(r"\d+ lines", fold.locator("summary").inner_text())
    fold.locator("summary").click()
    page.get_by_text("tma_copy.py", exact=True).first.click()
    code = page.locator(".tabbed-block:visible code", has_text="class TmaCopy").first
    code.wait_for(state="visible")
    assert "def can_implement" in code.inner_text()
    code.scroll_into_view_if_needed()
    shot(page, "tma-code-tab")


def test_dashboard_lists_claims(page, server):
    page.goto(f"{server}/evidence/")
    counts = page.locator("table").first
    counts.wait_for(state="visible")   # each page's claims counted by level, open
    assert counts.locator("tbody tr").count() > 20 and "hw-wgmma" in counts.inner_text()
    page.locator("details.kw-fold > summary", has_text="every claim").click()   # every claim, behind a fold
    body = page.locator("details.kw-fold table").first.inner_text()
    assert "measured.calibration.cublas-bf16-8192" in body and "cutlass-ex48-tf32" in body
    shot(page, "dashboard")


# --- issue 28: what a reader sees ---------------------------------------------------------------
NOTES_SCREENSHOTS = Path("/work/notes/screenshots")


def _html(site: Path, url: str) -> str:
    return (site / url.strip("/") / "index.html").read_text(encoding="utf-8")


def _plain(fragment: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def test_runs_and_versus_tables_render(site):
    text = _html(site, "/kernels/fp8-blockscale-gemm/")
    assert "kernelwiki:begin" not in text
    assert "ours / candidate per run" in text and "ratio per run, oldest first" in text
    assert re.search(r"<td>contiguous-4x8192-4096x7168</td>", text)


def test_claims_and_code_are_folded_and_the_strip_comes_first(site):
    text = _html(site, "/kernels/hopper-gemm/")
    article = text.split('<article', 1)[1]
    strip_at, code_at = article.index('class="kw-strip"'), article.index('id="code"')
    assert strip_at < article.index('id="claims-and-measurements"') < code_at
    assert re.search(r'<details class="kw-fold"[^>]*>\s*<summary>\d+ claims, \d+ measured', article)
    assert re.search(r'<details class="kw-fold kw-code"[^>]*>\s*<summary>source: \d+ files?, \d+ lines</summary>', article)
    assert "<details open" not in article.split('id="see-also"')[0]
    strip = _plain(article[strip_at:].split("</ul>", 1)[0])
    assert "geomean" in strip and "worst" in strip and "H200" in strip and "record" in strip


def test_home_gives_geomean_and_worst_case_and_labels_variants(site):
    text = _plain(_html(site, "/"))
    assert "geomean" in text and "worst case" in text and "fastest case" not in text
    assert "teaching variant, not the kernel" in text


def test_deepgemm_page_labels_whose_measurement_each_is(site):
    text = _html(site, "/kernels/deepgemm/")
    assert "DeepGEMM itself is not run here" not in text
    row = next(r for r in re.findall(r"<tr>.*?</tr>", text, re.S) if "h800-contiguous-4x8192-4096x7168" in r
               and "kw-who" in r)
    assert re.search(r'kw-who">(DeepGEMM|our kernel)<', row)
    whos = set(re.findall(r'kw-who">([^<]+)<', text))
    assert {"DeepGEMM", "our kernel"} <= whos
    assert "DeepGEMM normal: ratio" not in text


def test_charts_show_quantities_in_light_and_dark_and_fit_a_phone(site):
    svgs = sorted((site / "assets/charts").glob("*.svg"))
    dark = [s for s in svgs if s.name.endswith("-dark.svg")]
    assert dark and len(dark) * 2 == len(svgs)
    for svg in svgs:
        text = svg.read_text()
        width = float(re.search(r'<svg[^>]*width="([\d.]+)pt"', text).group(1))
        assert width < 520, f"{svg.name}: {width} pt wide"  # one panel, readable scaled to a phone
        colours = {c.lower() for c in re.findall(r"fill: ?(#[0-9a-fA-F]{6})", text)}
        assert not colours & {"#808080"}, svg.name  # the grey below AA contrast is gone
    fp8 = _html(site, "/kernels/fp8-blockscale-gemm/")
    assert "TFLOP/s: ours vs" in fp8 and "#only-dark" in fp8
    # one chart per quantity: TFLOP/s for compute-bound cases, GB/s for memory-bound (decode) ones, µs for
    # times, each with the datasheet and the measured ceilings drawn; no exponent in any label
    shown = " ".join(s.read_text() for s in svgs)
    assert "datasheet peak: 989" in shown and "measured ceiling (cuBLAS bf16 8192³)" in shown
    assert "datasheet memory bandwidth: 4,800" in shown and "measured copy ceiling" in shown
    assert not re.search(r">[\d.]+e[+-]\d+<", shown)
    hopper = _html(site, "/kernels/hopper-gemm/")
    assert len(set(re.findall(r'alt="(TFLOP/s: ours vs[^"]*)"', hopper))) == 1
    assert len(set(re.findall(r'alt="(GB/s: ours vs[^"]*)"', hopper))) == 1
    assert "µs: ours vs" in _html(site, "/techniques/launch-overhead-and-graphs/") and "µs per call" in shown


def test_evidence_card_names_its_headline_record_and_own_date(site):
    text = _html(site, "/kernels/hopper-gemm/")
    card = text.split('class="kw-card"', 1)[1].split("</table>", 1)[0]
    assert "Headline" in card and "records/" in card and "this page" in card
    for meta in _pages_with(status="verified"):
        card = _html(site, _url(meta["rel"])).split('class="kw-card"', 1)[1].split("</table>", 1)[0]
        if "not measured yet" in card:
            assert "kw-status-verified\"" not in card, meta["rel"]


def test_record_pages_print_seeds_units_and_other_runs(site):
    import json

    # a probe with several runs kept (most probes keep only the runs their pages use)
    from kernelwiki.storage.record_file import run_id_of

    newest = max(p for p in record_files(ROOT / "artifacts/evidence/probe-calibration") if "-run" in p.name)
    seed = json.loads(record_text(newest))["seed"]
    text = _plain((site / "records/probe-calibration" / run_id_of(newest.name) / "index.html").read_text())
    assert seed > 1e6 and str(seed) in text and f"{seed:.3g}" not in text   # the seed in full, never 1.35e+09
    assert re.search(r"copy\s*\|?\s*4\.28\d*\s*TB/s", text.replace("|", " ")) or "TB/s" in text
    assert "Other runs of this probe" in text


def test_cross_references_read_as_titles(site):
    text = _html(site, "/kernels/hopper-gemm/")
    links = re.findall(r'<a href="[^"]*hardware/wgmma/">(.*?)</a>', text)
    assert links and not any(link == "<code>hw-wgmma</code>" for link in links)
    assert any("wgmma" in _plain(link).lower() and "hw-" not in link for link in links)


KERNEL_ENGINEER_QUERIES = {
    "wgmma": "/hardware/wgmma/",
    "split-K": "/techniques/decode-gemm/",   # the page about split-K, stream-K and swap-AB
    "tcgen05": "/hardware/tcgen05-mma/",
    "swizzle": "/techniques/swizzling/",
    "mbarrier": "/hardware/mbarrier/",
    "TMA": "/hardware/tma/",
    "DeepGEMM": "/kernels/deepgemm/",
    "FlashAttention": "/kernels/flash-attention-4/",   # not the page of FlashMLA's sparse decode ("flash*")
    "flash attention": "/kernels/flash-attention-4/",
    "fa4": "/kernels/flash-attention-4/",
    "M=1": "/techniques/cuda-cores-vs-tensor-cores/",   # not a page with an alias word starting with m
    "all-reduce": "/kernels/one-host-communication/",   # not TMA reduce
    "fence.proxy.async.shared::cta": "/hardware/tma-store/",   # the worker keeps the name before :: whole
    "how to time a kernel": "/techniques/launch-overhead-and-graphs/",   # `a*` matches many alias words
    "how to benchmark a kernel": "/techniques/benchmarking-protocol/",
    "profiling a kernel": "/techniques/profiling-recipes/",
}


def test_kernel_engineer_queries_find_the_right_page_first(page, server):
    page.goto(f"{server}/")
    page.locator(".md-search__input").first.click()
    missed = {q: hit for q, want in KERNEL_ENGINEER_QUERIES.items() if (hit := _first_hit(page, q)) != want}
    assert not missed, missed


def test_screenshots_of_home_and_kernel_pages_for_the_notes(browser, server):
    if not NOTES_SCREENSHOTS.parent.is_dir():
        pytest.skip("no /work/notes here")
    NOTES_SCREENSHOTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    heights = {}
    for url in ["/", *KERNEL_PAGES]:
        name = url.strip("/").replace("/", "-") or "home"
        for width, height in ((1440, 900), (390, 844)):
            tab.set_viewport_size({"width": width, "height": height})
            tab.goto(f"{server}{url}")
            tab.locator("article h1").first.wait_for(state="visible")
            tab.screenshot(path=str(NOTES_SCREENSHOTS / f"{name}-{width}.png"))
            if width == 1440:
                heights[url] = tab.evaluate("document.documentElement.scrollHeight")
    print("page heights at 1440:", heights)
    (NOTES_SCREENSHOTS / "heights.txt").write_text("\n".join(f"{u} {h}" for u, h in heights.items()) + "\n")
    context.close()


class _Aggregates(HTMLParser):
    """Every 'geomean' in the site's generated parts (cards, strips, the home table) and the kw-agg
    element, if any, that holds it."""

    GENERATED = ("kw-card", "kw-strip", "kw-home-table")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, set[str], str | None]] = []
        self.found: list[tuple[bool, str | None, str]] = []   # (inside generated, kw-agg baseline, text)
        self.agg_text: dict[int, list[str]] = {}

    def handle_starttag(self, tag: str, attrs) -> None:
        values = dict(attrs)
        classes = set((values.get("class") or "").split())
        self.stack.append((tag, classes, values.get("data-baseline") if "kw-agg" in classes else None))
        if "kw-agg" in classes:
            self.agg_text[len(self.stack)] = []

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            depth = len(self.stack)
            popped = self.stack.pop()
            if depth in self.agg_text:
                words = " ".join(self.agg_text.pop(depth))
                self.found.append((True, popped[2], words))
            if popped[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for depth in self.agg_text:
            self.agg_text[depth].append(data)
        if "geomean" not in data.lower():
            return
        generated = any(c in self.GENERATED for _, classes, _ in self.stack for c in classes)
        inside = any(baseline is not None for _, _, baseline in self.stack)
        if generated and not inside:
            self.found.append((False, None, data))


def test_no_aggregate_on_any_page_card_strip_or_home_row_mixes_baselines(site):
    """Walks every built page: each geomean in a card, strip or home row sits in a kw-agg element
    that names one baseline, and says 'vs' that baseline and no other; the old mixed form
    ('geomean 1.76x FlashMLA, torch') is found and refused by the same walk."""
    def problems(html_text: str) -> list[str]:
        parser = _Aggregates()
        parser.feed(html_text)
        out = []
        for inside, baseline, words in parser.found:
            if not inside:
                out.append(f"a geomean outside a one-baseline aggregate: {words.strip()[:120]!r}")
            elif not baseline or f"vs {baseline}" not in " ".join(words.split()):
                out.append(f"an aggregate that does not say which one baseline it is over: {words.strip()[:120]!r}")
        return out

    planted = ('<div class="kw-strip"><ul><li><b>probe-sparse-decode-sm90</b>: geomean <b>1.76×</b> FlashMLA, torch '
               'over 12 cases</li></ul></div>')
    assert problems(planted), "the walk must refuse the old mixed strip"
    seen = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if "kw-agg" in text:
            seen += 1
        found = problems(text)
        assert not found, (str(page.relative_to(site)), found[:3])
    assert seen >= 5   # the home page and the kernel pages hold aggregates

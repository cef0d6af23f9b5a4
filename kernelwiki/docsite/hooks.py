"""mkdocs hooks (see mkdocs.yml): evidence cards, claims tables, code tabs and generated pages.

Nothing here is pasted into the pages on disk: the card, the tables and the tabs are added to the
Markdown as mkdocs reads it, from the frontmatter, the probe specs and the run records.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote

from mkdocs.plugins import CombinedEvent, event_priority
from mkdocs.structure.files import File, Files

from kernelwiki.storage.index import Wiki
from kernelwiki.probing.specs import load_probes
from kernelwiki.storage.record_file import RecordFileError, read_text
from kernelwiki.storage.records import load_records
from kernelwiki.storage.repo import Repo
from kernelwiki.commands.upstream import repo_name
from kernelwiki.model import yamlio
from kernelwiki.model.claims import page_claims
from kernelwiki.model.fences import map_prose
from kernelwiki.model.pages import MAX_PAGE_BYTES
from kernelwiki.docsite import charts, generated, links, render, sanitize, searchrank, strip, summary
from kernelwiki.docsite import records as records_page

GENERATED_BLOCK = re.compile(r"(^## Claims and measurements\n\s*)?"
                             r"<!-- kernelwiki:begin ([a-z0-9-]+) -->(.*?)<!-- kernelwiki:end \2 -->\n?", re.S | re.M)
SHOWN_BLOCKS = {"runs", "versus"}
"""Generated blocks the site shows where they stand (Markdown tables the prose refers to); the
claims block is replaced by the site's own claims table."""
SECTIONS = ["hardware", "kernels", "techniques", "footguns", "languages", "sources"]
EVIDENCE_PAGES = {"evidence/index.md": "Dashboard", "evidence/probes.md": "Probe catalogue",
                  "evidence/coverage.md": "Architecture coverage", "evidence/footguns.md": "Footguns",
                  "evidence/symptoms.md": "Symptoms",
                  "evidence/tags.md": "Tags"}
_state: dict = {}


def _lex_once() -> None:
    """Pygments lexes each code file once per build, not once per page that shows it (a probe's code
    stands on every page it backs; lexing was half of rendering the pages): pymdownx's highlight is
    given tokens lexed before, and formats them as it would have."""
    import pymdownx.highlight as highlight

    if getattr(highlight.highlight, "kernelwiki_lexes_once", False):
        return
    tokens: dict[tuple, list] = {}
    formatted = highlight.highlight

    def lexed_once(code, lexer, formatter, outfile=None):
        key = (type(lexer), repr(sorted(lexer.options.items(), key=str)), code)
        if key not in tokens:
            tokens[key] = list(lexer.get_tokens(code))
        if outfile is None:
            import io

            out = io.StringIO()
            formatter.format(iter(tokens[key]), out)
            return out.getvalue()
        formatter.format(iter(tokens[key]), outfile)
        return None

    lexed_once.kernelwiki_lexes_once = True
    lexed_once.__wrapped__ = formatted
    highlight.highlight = lexed_once


@event_priority(100)  # before the tags plugin reads tags_allowed
def on_config(config):
    repo = Repo.find(Path(config.config_file_path).resolve().parent)
    _refuse_unpublishable_files(repo)
    _lex_once()
    wiki = Wiki.load(repo)
    _refuse_unreadable_pages(wiki)
    ids = wiki.by_id()
    entries = sorted(ids.values(), key=lambda e: (SECTIONS.index(generated.page_uri(e).split("/")[0])
                                                 if generated.page_uri(e).split("/")[0] in SECTIONS else 99,
                                                 str(e.get("title")).lower()))
    page_uris = {i: generated.page_uri(e) for i, e in ids.items()}
    cited_by: dict[str, list[str]] = {}
    for entry in entries:
        cites = {s for s in entry.get("sources") or [] if isinstance(s, str)}
        cites |= {c.get("source") for c in page_claims(entry.meta or {}) if isinstance(c.get("source"), str)}
        for source in sorted(cites):
            if source != entry.id:
                cited_by.setdefault(source, []).append(entry.id)
    _state.update(repo=repo, wiki=wiki, ids=ids, entries=entries, probes=load_probes(repo),
                  records=load_records(repo), page_uris=page_uris, cited_by=cited_by,
                  )
    for name, plugin in config.plugins.items():
        if name.endswith("tags"):
            from material.plugins.tags.structure.tag import Tag

            plugin.config.tags_allowed = {Tag(tag) for tag in wiki.vocab.tags}
    _state["abbreviations"] = (Path(__file__).parent / "abbreviations.md").read_text(encoding="utf-8")
    config.extra_css.append("assets/kernelwiki.css")
    titles = {i: heading(repo.root / e.rel) or str(e.get("title")) for i, e in ids.items()}
    _state["titles"] = titles
    _state["linker"] = links.Linker(page_uris, {i: [str(a) for a in e.get("aliases") or []] for i, e in ids.items()},
                                    titles)
    nav: list = [{"Home": "index.md"}]
    for section in SECTIONS:
        pages = [{html.escape(titles[e.id]): generated.page_uri(e)} for e in entries
                 if generated.page_uri(e).startswith(section + "/")]
        if pages:
            nav.append({generated.SECTION_TITLES[section]: _grouped(pages)})
    nav.append({"Evidence": [{title: uri} for uri, title in EVIDENCE_PAGES.items()]})
    config.nav = nav
    return config


def _refuse_unpublishable_files(repo: Repo) -> None:
    """Nothing under wiki/ is published but pages and checked images: mkdocs copies every file it
    finds there and walks into linked folders, so a link would publish any file of the builder."""
    from mkdocs.exceptions import PluginError

    from kernelwiki.model.safe_links import wiki_file_problems

    problems = wiki_file_problems(repo.wiki)
    if problems:
        raise PluginError(f"{len(problems)} file(s) under wiki/ cannot be published; first: wiki/{problems[0][0]}: "
                          f"{problems[0][1]} (run `kernelwiki validate`)")


def _refuse_unreadable_pages(wiki: Wiki) -> None:
    """The site is built only from pages whose frontmatter reads and passes its schema: the renderers
    rely on the shapes the schema guarantees (a list where it says list), and mkdocs would parse a
    page we refused with its own YAML reader (no limits on aliases or size)."""
    from mkdocs.exceptions import PluginError

    from kernelwiki.model.schema import check as schema_check

    problems = []
    for rel, entry in sorted(wiki.entries.items()):
        if entry.meta is None:
            problems += entry.read_problems or [f"{rel}: frontmatter cannot be read"]
        else:
            problems += schema_check(wiki.repo.schemas, "page", entry.meta, rel, lambda path: 1)[:1]
    if problems:
        raise PluginError(f"{len(problems)} page(s) cannot be published; first: {problems[0]} "
                          "(run `kernelwiki validate`)")


def _grouped(pages: list[dict], size: int = 50) -> list[dict]:
    """A long section as groups of `size` pages: with navigation.prune, a page then renders only its
    own group's items, so the build stays linear in the number of pages instead of quadratic."""
    if len(pages) <= size + size // 5:
        return pages
    groups = []
    for start in range(0, len(pages), size):
        chunk = pages[start:start + size]
        first, last = next(iter(chunk[0])), next(iter(chunk[-1]))
        groups.append({f"{first[:20]} … {last[:20]}": chunk})
    return groups


def on_files(files: Files, config) -> Files:
    entries, probes, records, ids = _state["entries"], _state["probes"], _state["records"], _state["ids"]
    archs = _state["wiki"].vocab.data["architectures"]["canonical"]
    pages = {
        "index.md": generated.home(entries, records, probes, ids, _state["titles"]),
        "evidence/index.md": generated.dashboard(entries),
        "evidence/probes.md": generated.probe_catalogue(probes, records, ids),
        "evidence/coverage.md": generated.coverage(entries, archs),
        "evidence/footguns.md": generated.footgun_index(entries),
        "evidence/symptoms.md": generated.symptom_index(entries),
        "evidence/tags.md": generated.tags_index(),
        "assets/kernelwiki.css": generated.STYLE,
    }
    by_path = {r.path: r for probe_records in records.values() for r in probe_records}
    citing: dict[str, list[tuple[str, dict]]] = {}
    for entry in entries:
        for claim in page_claims(entry.meta or {}):
            if claim.get("evidence") == "measured" and isinstance(claim.get("record"), str):
                citing.setdefault(claim["record"], []).append((entry.id, claim))
    for probe_id, probe_records in records.items():
        backs = probes[probe_id].pages if probe_id in probes else []
        for record in probe_records:
            pages[render.record_uri(record.path)] = records_page.record_page(record, _state["page_uris"], backs,
                                                                             probe_records, by_path,
                                                                             citing.get(record.path, []))
            files.append(File.generated(config, render.record_json_uri(record.path),
                                        content=_record_json(_state["repo"], record.path)))
    _state["charts"] = {page_id: charts.page_charts(page_id, probes, records) for page_id in ids}
    drawn = charts.draw_all([c for page_charts in _state["charts"].values() for c in page_charts],
                            _state["repo"].cache / "charts")
    pages.update({f"assets/charts/{name}": svg for name, svg in drawn.items()})
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


def _record_json(repo: Repo, rel: str) -> str:
    """A record's JSON text as the site publishes it, read as every reader reads it (bounded, never
    through a link): the text load_records parsed, unless the file changed since."""
    from mkdocs.exceptions import PluginError

    try:
        return read_text(repo.root / rel)
    except RecordFileError as err:
        raise PluginError(f"{rel}: {err} (run `kernelwiki validate`)") from None


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Every page with its abbreviations (tooltips) appended; a wiki page with its card, tables,
    charts, cross-links and code."""
    return _page_markdown(markdown, page) + "\n" + _state["abbreviations"]


def on_page_content(content: str, page, config, files) -> str:
    """The page's HTML rebuilt from an allow-list (docsite.sanitize): whatever a page, spec or
    record holds, no script, handler, script URL or other host's image reaches the site."""
    return sanitize.clean_html(content)


def _page_markdown(markdown: str, page) -> str:
    meta, uri = page.meta, page.file.src_uri
    if uri in ("index.md", *EVIDENCE_PAGES) or not meta.get("id"):
        return markdown
    markdown = map_prose(markdown, lambda prose: GENERATED_BLOCK.sub(_generated_block, prose))
    # mkdocs prefers the frontmatter title over the nav's; the nav shows the page's own heading.
    # The theme puts it into <title> unescaped.
    meta["title"] = html.escape(str(_state["titles"].get(meta["id"], meta.get("title"))))
    title, body = _split_title(markdown)
    claims = page_claims(meta)
    body = render.claim_spans(body, {str(c.get("id")) for c in claims}, uri)
    body = _state["linker"].link(body, uri, meta["id"])
    if meta.get("type") == "source":
        return f"{title}{render.source_card(meta)}\n{body.rstrip()}\n{_page_list('Cited by', _state['cited_by'].get(meta['id']), uri)}"
    tables = render.claims_tables(meta, uri, _state["page_uris"])
    # Targets of the alias entries of the search index: the top of the page.
    anchors = "".join(f'<span id="{alias_anchor(i, a)}"></span>' for i, a in enumerate(meta.get("aliases") or []))
    card = render.evidence_card(meta, uri).replace('markdown="0">\n', f'markdown="0">{anchors}\n', 1)
    first, rest = _first_paragraph(body)
    # A kernel page sums up its kernel probes' runs; another page (hw-wgmma, also backed by the GEMM
    # probe) shows its own measured claims.
    runs = summary.kernel_runs(_state["probes"], _state["records"], meta["id"]) if meta.get("type") == "kernel" else []
    headline = strip.kernel_strip(runs, uri) if runs else strip.claims_strip(claims, uri, meta.get("headline"))
    parts = [title, card, "\n", first, "\n" + headline + "\n" if headline else "", rest.rstrip() + "\n"]
    figures = _state["charts"].get(meta["id"]) or []
    if figures:
        parts.append("\n## Measurements\n\nFrom the latest run records, drawn when the site is built: one chart "
                     "per quantity, ours and the baseline timed in the same run, with the datasheet and the "
                     "measured ceilings.\n\n")
        images = [f"![{render.text(c.title)}]({render.rel_link(uri, 'assets/charts/' + c.name)}#only-light)"
                  f"{{ .kw-chart loading=lazy }}"
                  f"![{render.text(c.title)}]({render.rel_link(uri, 'assets/charts/' + c.dark_name)}#only-dark)"
                  f"{{ .kw-chart loading=lazy }}\n\n" for c in figures]
        parts += [image for image, c in zip(images, figures) if not c.folded]
        parts += [f'<details class="kw-fold" markdown="1">\n<summary>{render.text(c.title)}</summary>\n\n{image}'
                  "</details>\n\n" for image, c in zip(images, figures) if c.folded]
    if tables:
        parts.append(f"\n## Claims and measurements\n\n{tables}")
    parts.append(_page_list("See also", meta.get("related"), uri))
    parts += [_code_section(meta), _probe_section(meta)]
    return "".join(parts)


FOLDED_ROWS = 8
"""A generated table longer than this stands behind a fold (its summary says what it holds): a page's
first screens are for the prose and the charts, and no page is taller than 15,000 px at 1440 px."""


def _generated_block(match: re.Match) -> str:
    """The claims block (and the heading it stood under) goes: the site shows its own claims table.
    The runs and versus tables stay where the prose refers to them, without their markers, a long
    one folded."""
    if match.group(2) not in SHOWN_BLOCKS:
        return ""
    table = match.group(3).strip("\n")
    rows = sum(1 for line in table.split("\n") if line.startswith("|")) - 2
    if rows > FOLDED_ROWS:
        what = {"runs": "ratio to the baseline in every passing run", "versus": "ours against each candidate"}
        table = (f'<details class="kw-fold" markdown="1">\n<summary>{rows} cases: {what[match.group(2)]}</summary>\n\n'
                 f"{table}\n\n</details>")
    return (match.group(1) or "") + table + "\n"


def _first_paragraph(body: str) -> tuple[str, str]:
    """The body's first paragraph of prose (the definition sentence) and the rest."""
    lines = body.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(("<", "!", "#"))), None)
    if start is None:
        return "", body
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[:end]) + "\n", "\n".join(lines[end:])


def _page_list(heading_text: str, page_ids: list | None, uri: str) -> str:
    """A section listing pages by their heading, with each page's summary."""
    ids, uris = _state["ids"], _state["page_uris"]
    shown = [p for p in page_ids or [] if isinstance(p, str) and p in uris]
    links = [f"[{render.text(_state['titles'][p])}]({render.rel_link(uri, uris[p])})" for p in shown]
    items = [f"- {link}" + (f" — {render.prose(ids[p].get('summary'))}"
                            if ids[p].get("summary") and ids[p].get("type") != "source" else "")
             for p, link in zip(shown, links)]
    if len(items) > FOLDED_ROWS:   # the titles open, the summaries behind a fold
        return (f"\n\n## {heading_text}\n\n" + " · ".join(links)
                + f'\n\n<details class="kw-fold" markdown="1">\n<summary>what each of these {len(items)} pages is '
                f"about</summary>\n\n" + "\n".join(items) + "\n\n</details>\n")
    return f"\n\n## {heading_text}\n\n" + "\n".join(items) + "\n" if items else ""


def _split_title(markdown: str) -> tuple[str, str]:
    if markdown.startswith("# "):
        first, _, rest = markdown.partition("\n")
        return first + "\n\n", rest
    return "", markdown


def heading(path: Path) -> str | None:
    """The page's own H1 (Markdown marks removed), which the navigation shows as its title: the first
    `# ` line after the frontmatter, read line by line (a kernel page's frontmatter of claims can run
    past 64 KiB) up to the page size limit."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            read, in_front = 0, None
            for line in handle:
                read += len(line)
                if read > MAX_PAGE_BYTES:
                    return None
                if in_front is None:
                    in_front = line.rstrip() == "---"
                    if in_front:
                        continue
                elif in_front:
                    in_front = line.rstrip() != "---"
                    continue
                if line.startswith("# "):
                    return line[2:].rstrip("\r\n").replace("`", "").strip() or None
    except OSError:
        return None
    return None


def _own_files_order(directory: Path):
    """Order of the code tabs: the kernel (the file named like its directory) first, other code next,
    teaching variants after it, PROVENANCE and other YAML last."""
    stem = directory.name.replace("-", "_")
    return lambda p: (p.suffix == ".yaml", "variants" in p.relative_to(directory).parts, p.stem != stem,
                      p.relative_to(directory).as_posix())


def _code_section(meta: dict) -> str:
    directory = meta.get("artifact_dir")
    root = _state["repo"].root
    # Never a folder outside (an absolute path, `..`) nor through a link: rglob would walk it and publish it.
    if not sanitize.below(root, directory) or not (root / directory).is_dir():
        return ""
    own = sorted((p for p in (root / directory).rglob("*")
                  if "__pycache__" not in p.parts and p.suffix in render.CODE_LANGUAGES),
                 key=_own_files_order(root / directory))
    shown = [(p.relative_to(root / directory).as_posix(), p.relative_to(root).as_posix()) for p in own]
    out = [f"\n\n## Code\n\nFrom {render.code(directory)} in this repository.\n"]
    out.append(render.code_tabs(_shown(shown)))
    provenance = root / directory / "PROVENANCE.yaml"
    if provenance.is_file():
        data, _ = yamlio.load(provenance.read_text(encoding="utf-8"))
        upstream = [f for f in (data or {}).get("files") or [] if isinstance(f, dict) and f.get("origin") == "upstream"]
        if upstream:
            pin = (data or {}).get("upstream") or {}
            out.append(f"\nPinned upstream files ({render.text(pin.get('package') or pin.get('repo'))} "
                       f"{render.text(pin.get('version') or str(pin.get('commit') or '')[:12])}; shown by "
                       f"`get_page.py --include-code` from the installed package, never copied here):\n")
            out += [f"- {_upstream_link(pin, f)} — sha256 {render.code(str(f.get('sha256'))[:16] + '…')}"
                    + (f" — {render.prose(f['role'])}" if f.get("role") else "") for f in upstream]
    return "\n".join(out) + "\n"


def _upstream_link(pin: dict, file: dict) -> str:
    """The file at the pinned commit on GitHub (a link; nothing is requested at build time)."""
    repo, commit, path = str(pin.get("repo") or ""), pin.get("commit"), str(file.get("path"))
    name = repo_name(repo) if repo.startswith("https://github.com/") else None
    if name and isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return f'<a href="https://github.com/{name}/blob/{commit}/{quote(path)}">{render.code(path)}</a>'
    return render.code(path)


def _probe_section(meta: dict) -> str:
    probes = [_state["probes"][p] for p in meta.get("probes") or [] if p in _state["probes"]]
    if not probes:
        return ""
    root = _state["repo"].root
    out = ["\n\n## Probes\n"]
    for spec in probes:
        files = [(spec.entry.name, spec.entry.relative_to(root).as_posix()),
                 ("probe.yaml", (spec.directory / "probe.yaml").relative_to(root).as_posix())]
        out.append(f"### {spec.id}\n\n{render.prose(spec.data.get('description', spec.data.get('title', '')))}\n")
        out.append(render.code_tabs(_shown(files), "probe"))
    return "\n".join(out) + "\n"


def _shown(files: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(tab label, path, text) of each file that can be shown: a link, a FIFO, a file too large or
    not UTF-8 is left out (validate reports links and unreadable artifact files)."""
    root = _state["repo"].root
    shown = [(label, path, sanitize.shown_file(root, path)) for label, path in files]
    return [(label, path, text) for label, path, text in shown if text is not None]


_CODE_AND_TABLES = re.compile(r'<details class="kw-fold[^"]*"[^>]*>.*?</details>'
                              r'|<div class="(?:kw-card|kw-claims|[^"]*\bhighlight)"[^>]*>.*?</div>', re.S)


@event_priority(50)  # before the search plugin indexes the page
def _search_sees_prose(context, page, config, nav):
    """The search index gets the prose: no code (a search for a feature finds the page about it, not
    every kernel that uses it), no evidence card, no claims table."""
    _state["content"] = page.content
    if page.content:
        page.content = _CODE_AND_TABLES.sub("", page.content)
    return context


@event_priority(-50)  # after the search plugin: the page itself renders everything
def _search_knows_aliases(context, page, config, nav):
    """One search entry per alias, on the alias field that mkdocs.yml boosts above all others: a
    search for an alias finds its page first, also where another page has a longer alias that
    starts with it (`tensor-memory` vs `tensor-memory-accelerator`); on_post_build sets the
    entries' boosts."""
    if _state.get("content") is not None:
        page.content = _state.pop("content")
    search = next((p for name, p in config.plugins.items() if name.endswith("search")), None)
    if search is not None:
        for index, alias in enumerate(page.meta.get("aliases") or []):
            search.search_index.entries.append({"location": f"{page.url}#{alias_anchor(index, alias)}",
                                                "title": page.title, "text": "", "aliases": str(alias)})
    return context


@event_priority(100)  # before the search plugin writes its index
def on_post_build(config):
    """Each alias entry's boost from the whole index (searchrank): an alias typed in full beats
    another page's alias that shares a prefix of one of its words."""
    search = next((p for name, p in config.plugins.items() if name.endswith("search")), None)
    if search is not None:
        searchrank.alias_boosts(search.search_index.entries, search.config.separator, search.config.fields,
                                searchrank.worker_stop_words())


def alias_anchor(index: int, alias: object) -> str:
    """A unique anchor per alias of a page (deep-gemm and deep_gemm must not share one)."""
    return f"alias-{index}-" + re.sub(r"[^a-z0-9]+", "-", str(alias).lower()).strip("-")


on_page_context = CombinedEvent(_search_sees_prose, _search_knows_aliases)

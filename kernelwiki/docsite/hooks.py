"""mkdocs hooks (see mkdocs.yml): evidence cards, claims tables, code tabs and generated pages.

Nothing here is pasted into the pages on disk: the card, the tables and the tabs are added to the
Markdown as mkdocs reads it, from the frontmatter, the probe specs and the run records.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from kernelwiki.index import Wiki
from kernelwiki.probes import load_probes
from kernelwiki.refresh import load_records
from kernelwiki.repo import Repo
from kernelwiki.docsite import generated, render

GENERATED_BLOCK = re.compile(r"<!-- kernelwiki:begin ([a-z0-9-]+) -->.*?<!-- kernelwiki:end \1 -->\n?", re.S)
SECTIONS = ["hardware", "kernels", "techniques", "footguns", "languages", "sources"]
EVIDENCE_PAGES = {"evidence/index.md": "Dashboard", "evidence/probes.md": "Probe catalogue",
                  "evidence/coverage.md": "Architecture coverage", "evidence/footguns.md": "Footguns",
                  "evidence/tags.md": "Tags"}
_state: dict = {}


@event_priority(100)  # before the tags plugin reads tags_allowed
def on_config(config):
    repo = Repo.find(Path(config.config_file_path).resolve().parent)
    wiki = Wiki.load(repo)
    ids = wiki.by_id()
    entries = sorted(ids.values(), key=lambda e: (SECTIONS.index(generated.page_uri(e).split("/")[0])
                                                 if generated.page_uri(e).split("/")[0] in SECTIONS else 99,
                                                 str(e.get("title")).lower()))
    _state.update(repo=repo, wiki=wiki, ids=ids, entries=entries, probes=load_probes(repo),
                  records=load_records(repo), page_uris={i: generated.page_uri(e) for i, e in ids.items()})
    for name, plugin in config.plugins.items():
        if name.endswith("tags"):
            from material.plugins.tags.structure.tag import Tag

            plugin.config.tags_allowed = {Tag(tag) for tag in wiki.vocab.tags}
    config.mdx_configs.setdefault("pymdownx.snippets", {})["base_path"] = [str(repo.root)]
    config.extra_css.append("assets/kernelwiki.css")
    nav: list = [{"Home": "index.md"}]
    for section in SECTIONS:
        pages = [{str(e.get("title")): generated.page_uri(e)} for e in entries
                 if generated.page_uri(e).startswith(section + "/")]
        if pages:
            nav.append({generated.SECTION_TITLES[section]: pages})
    nav.append({"Evidence": [{title: uri} for uri, title in EVIDENCE_PAGES.items()]})
    config.nav = nav
    return config


def on_files(files: Files, config) -> Files:
    entries, probes, records, ids = _state["entries"], _state["probes"], _state["records"], _state["ids"]
    archs = _state["wiki"].vocab.data["architectures"]["canonical"]
    pages = {
        "index.md": generated.home(entries, records),
        "evidence/index.md": generated.dashboard(entries),
        "evidence/probes.md": generated.probe_catalogue(probes, records, ids),
        "evidence/coverage.md": generated.coverage(entries, archs),
        "evidence/footguns.md": generated.footgun_index(entries),
        "evidence/tags.md": generated.tags_index(),
        "assets/kernelwiki.css": generated.STYLE,
    }
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    for probe_records in records.values():
        for record in probe_records:
            uri = "records/" + record.path.removeprefix("artifacts/evidence/")
            files.append(File.generated(config, uri, abs_src_path=str(_state["repo"].root / record.path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    meta, uri = page.meta, page.file.src_uri
    if uri in ("index.md", *EVIDENCE_PAGES) or not meta.get("id"):
        return markdown
    # The generated blocks serve readers of the raw Markdown; the site shows its own tables.
    markdown = GENERATED_BLOCK.sub("", markdown)
    if meta.get("type") == "source":
        head = render.source_card(meta)
    else:
        head = render.evidence_card(meta, uri)
        table = render.claims_table(meta, uri, _state["page_uris"])
        if table:
            head += "\n" + table
    title, body = _split_title(markdown)
    return f"{title}{head}\n{body}{_code_section(meta)}{_probe_section(meta)}"


def _split_title(markdown: str) -> tuple[str, str]:
    if markdown.startswith("# "):
        first, _, rest = markdown.partition("\n")
        return first + "\n\n", rest
    return "", markdown


def _code_section(meta: dict) -> str:
    directory = meta.get("artifact_dir")
    root = _state["repo"].root
    if not isinstance(directory, str) or not (root / directory).is_dir():
        return ""
    own = sorted(p for p in (root / directory).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".cu", ".cuh", ".yaml", ".sh"))
    out = [f"\n\n## Code\n\nFrom `{directory}` in this repository.\n"]
    out.append(render.code_tabs([(p.relative_to(root / directory).as_posix(), p.relative_to(root).as_posix())
                                 for p in own]))
    provenance = root / directory / "PROVENANCE.yaml"
    if provenance.is_file():
        from kernelwiki import yamlio

        data, _ = yamlio.load(provenance.read_text(encoding="utf-8"))
        upstream = [f for f in (data or {}).get("files") or [] if f.get("origin") == "upstream"]
        if upstream:
            pin = (data or {}).get("upstream") or {}
            where = pin.get("repo") or pin.get("package")
            out.append(f"\nPinned upstream files ({where} {pin.get('version') or pin.get('commit') or ''}; "
                       f"shown by `get_page.py --include-code` from the installed package, never copied here):\n")
            out += [f"- `{f['path']}` — sha256 `{f['sha256'][:16]}…`" for f in upstream]
    return "\n".join(out) + "\n"


def _probe_section(meta: dict) -> str:
    probes = [_state["probes"][p] for p in meta.get("probes") or [] if p in _state["probes"]]
    if not probes:
        return ""
    root = _state["repo"].root
    out = ["\n\n## Probes\n"]
    for spec in probes:
        files = [("probe.yaml", (spec.directory / "probe.yaml").relative_to(root).as_posix()),
                 (spec.entry.name, spec.entry.relative_to(root).as_posix())]
        out.append(f"### {spec.id}\n\n{spec.data.get('description', spec.data.get('title', ''))}\n")
        out.append(render.code_tabs(files))
    return "\n".join(out) + "\n"

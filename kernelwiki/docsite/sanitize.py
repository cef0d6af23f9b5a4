"""What the site publishes from untrusted text, made safe whatever validate said.

`clean_html` rebuilds every page's HTML from an allow-list of tags and attributes, each value escaped
again: a link keeps its href only where model.safe_links allows it, an image only if it is a file of
the site, and script, style and other active elements go with their content. `shown_file` reads a
file a page shows as code (the site has no include mechanism) without following a link on its path.
"""

from __future__ import annotations

import functools
import html
import os
import re
import stat
from pathlib import Path

from kernelwiki.model.files import UnsafeFile, read_regular, stays_below
from kernelwiki.model.safe_links import image_allowed, link_allowed

MAX_SHOWN = 1 << 20
TAGS = frozenset("""a abbr b blockquote br caption code col colgroup dd del details div dl dt em figcaption figure
h1 h2 h3 h4 h5 h6 hr i img input ins kbd label li mark ol p pre s small span strong sub summary sup table tbody td
tfoot th thead tr u ul wbr""".split())
VOID = frozenset({"br", "col", "hr", "img", "input", "wbr"})
DROPPED_WITH_CONTENT = frozenset({"script", "style", "template", "iframe", "object", "embed", "noscript", "svg",
                                  "math", "xmp", "noembed", "noframes", "textarea", "title", "select", "frameset",
                                  "plaintext"})
GLOBAL_ATTRIBUTES = frozenset({"class", "id", "title", "lang", "dir", "role", "data-search-exclude"})
ATTRIBUTES = {
    "a": {"href", "name", "rel"},
    "img": {"src", "alt", "loading", "width", "height"},
    "td": {"colspan", "rowspan", "align", "style"}, "th": {"colspan", "rowspan", "align", "style"},
    "input": {"type", "name", "checked", "disabled"}, "div": {"data-tabs"},
    "label": {"for", "tabindex"}, "details": {"open"}, "ol": {"start"}, "abbr": set(), "col": {"span"},
    "span": {"data-baseline"},   # kw-agg: the one baseline an aggregate is over
}
INPUT_TYPES = frozenset({"radio", "checkbox"})
_STYLE = re.compile(r"text-align:\s*(left|right|center);?")
_ARIA = re.compile(r"aria-[a-z]+")
_RAW_TEXT = re.compile(r"<(%s)\b[^<>]*>.*?(?:</\1(?:[\s/][^<>]*)?>|\Z)" % "|".join(sorted(DROPPED_WITH_CONTENT)),
                       re.S | re.I)
_TOKEN = re.compile(r"""<!--.*?(?:-->|\Z)|<[!?][^<>]*>?"""
                    r"""|<(/?)([a-zA-Z][a-zA-Z0-9]*)((?:\s+[^\s"'<>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?)*)\s*/?>"""
                    r"""|<""", re.S)
_ATTRIBUTE = re.compile(r"""([^\s"'<>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")


def _token(match: re.Match) -> str:
    if match.group(2) is None:   # a comment or declaration goes; a '<' that starts no tag is text
        return "&lt;" if match.group() == "<" else ""
    return _tag(match.group())


@functools.lru_cache(maxsize=1 << 16)
def _tag(source: str) -> str:
    """One tag rebuilt from the allow-lists, or ''."""
    match = _TOKEN.fullmatch(source)
    closing, tag = match.group(1), match.group(2).lower()
    if tag not in TAGS:
        return ""
    if closing:
        return "" if tag in VOID else f"</{tag}>"
    attrs: dict[str, str] = {}
    for name, value in _ATTRIBUTE.findall(match.group(3)):
        attrs.setdefault(name.lower(), html.unescape(value[1:-1] if value[:1] in "\"'" and value else value))
    kept = _attributes(tag, list(attrs.items()))
    if kept is None:   # an image from another host (a tracker) or of a script URL: its alt text stays
        return html.escape(attrs.get("alt", ""), quote=False)
    return f"<{tag}{kept}>"


def _attributes(tag: str, attrs: list[tuple[str, str]]) -> str | None:
    """The attributes kept, as HTML; None when the element goes (an image not of the site)."""
    allowed = ATTRIBUTES.get(tag, set())
    out = []
    for name, value in attrs:
        if not (name in GLOBAL_ATTRIBUTES or name in allowed or _ARIA.fullmatch(name)):
            continue
        if name == "href" and not link_allowed(value):
            continue
        if name == "src" and not image_allowed(value):
            return None
        if name == "style" and not _STYLE.fullmatch(value.strip()):
            continue
        if name == "type" and value.lower() not in INPUT_TYPES:
            return None
        out.append(f' {name}="{html.escape(value)}"')
    if tag == "img" and not any(name == "src" for name, _ in attrs):
        return None
    return "".join(out)


def clean_html(fragment: str) -> str:
    """`fragment` rebuilt: it has no '<' that does not start a tag built here (any other is text)."""
    return _TOKEN.sub(_token, _RAW_TEXT.sub("", fragment))


def below(root: Path, rel: object) -> bool:
    """Whether `rel` names something under `root` with no symbolic link on its way (no absolute path, no `..`)."""
    if not stays_below(rel):
        return False
    path = root
    for part in Path(str(rel)).parts:
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def shown_file(root: Path, rel: str) -> str | None:
    """The text of `root/rel`, or None unless `below` it is a regular UTF-8 file of at most MAX_SHOWN bytes."""
    if not below(root, rel):
        return None
    try:
        return read_regular(root / rel, MAX_SHOWN).decode("utf-8")
    except (UnsafeFile, UnicodeDecodeError):
        return None


def code_block(text: str, language: str, indent: str = "") -> str:
    """`text` fenced with more backticks than any run it holds: no line of it can close the block."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    body = "".join(indent + line if line.strip() else "\n" for line in text.splitlines(keepends=True))
    if body and not body.endswith("\n"):
        body += "\n"
    return f"{indent}{fence}{language}\n{body}{indent}{fence}\n"

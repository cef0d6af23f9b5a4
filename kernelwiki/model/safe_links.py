"""What the public site may turn into a link, an image or markup, and what validate refuses in a page.

The site is built from pull requests and served to readers, so text from a page is untrusted. A
link may go to a page of the site (a relative URL or an anchor), to an http(s) URL or to mailto; an
image only to a file of the site (a relative URL: an image from another host is a tracker). A page
body is Markdown: raw HTML is refused except a few tags without attributes, and so are attribute
lists that set an event handler, a style or a URL. The same rules hold in docsite.sanitize, which
cleans the HTML the site publishes whatever validate said.
"""

from __future__ import annotations

import html
import os
import re
import stat
from pathlib import Path

from kernelwiki.model.fences import code_mask
from kernelwiki.model.files import UnsafeFile, read_regular

LINK_SCHEMES = frozenset({"http", "https", "mailto"})
SAFE_TAGS = frozenset({"br", "sub", "sup", "kbd", "b", "i", "em", "strong", "code", "small", "details", "summary"})
"""Raw HTML tags a page body may hold, without attributes."""
SAFE_ATTRIBUTES = frozenset({"title", "alt", "loading", "width", "height", "lang", "target", "rel", "colspan", "rowspan"})
"""Attribute-list keys (`{: key=value }`) a page body may set, besides `.class` and `#id`."""
PUBLISHED_KINDS = frozenset({".md", ".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""The files under wiki/ the site publishes: pages and images (an SVG only once svg_problems passes it)."""
MAX_SVG_BYTES = 1 << 20

_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")


def url_scheme(url: str) -> str | None:
    """The scheme a browser reads in `url` (entities decoded, whitespace and control characters
    dropped as the URL parser drops them), lowercased; None for a relative URL."""
    cleaned = _IGNORED.sub("", html.unescape(url))
    match = _SCHEME.match(cleaned)
    return match.group(1).lower() if match else None


def _network_path(url: str) -> bool:
    """`//host/x` (and `\\\\host`, `/\\host`: browsers read a backslash as a slash): another host."""
    cleaned = _IGNORED.sub("", html.unescape(url))
    return cleaned[:2].replace("\\", "/") == "//"


def link_allowed(url: str) -> bool:
    """A relative URL, an anchor, or an http(s) or mailto URL."""
    scheme = url_scheme(url)
    return scheme is None or scheme in LINK_SCHEMES


def image_allowed(url: str) -> bool:
    """A relative URL (a file of the site); never another host, never a data: or script URL."""
    return url_scheme(url) is None and not _network_path(url)


_LINK = re.compile(r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\(\s*(<[^>\n]*>|[^\s)]*)")
_REF_USE = re.compile(r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\](?:\[([^\[\]\n]*)\])?")
_REF_DEF = re.compile(r"^ {0,3}\[([^\]\n]+)\]:\s*(<[^>\n]*>|\S+)", re.M)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)([^>]*)>|<!(?!--)|<\?")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_ATTR_LIST = re.compile(r"\{:?([^{}\n]*)\}")
_ATTR_WORD = re.compile(r"""([^\s=]+)(?:=("[^"]*"|'[^']*'|\S*))?""")
SNIPPET_LINE = re.compile(r"^[ \t]*;*-+8<-+(?:[ \t]|$)")
"""A pymdownx.snippets include line (`--8<-- "file"`, or the marker of a block of them)."""


def link_problems(text: str) -> list[tuple[int, str]]:
    """(offset, why) for each Markdown link or image in `text` that may not be published: a
    javascript: link, an image from another host, a reference definition to either."""
    found = []
    for match in _LINK.finditer(text):
        bang, url = match.group(1), match.group(3).strip("<>")
        if bang and not image_allowed(url):
            found.append((match.start(), f"image {url[:60]!r}: an image must be a file of this wiki (a relative "
                                         "URL), never another host's"))
        elif not bang and not link_allowed(url):
            found.append((match.start(), f"link {url[:60]!r}: a link is relative or http(s)/mailto; "
                                         f"{url_scheme(url)}: is never published"))
    images = {(ref or alt).strip().lower() for bang, alt, ref in _REF_USE.findall(text) if bang}
    for match in _REF_DEF.finditer(text):
        label, url = match.group(1).strip().lower(), match.group(2).strip("<>")
        if label in images and not image_allowed(url):
            found.append((match.start(), f"image [{label[:40]}]: {url[:60]!r}: an image must be a file of this "
                                         "wiki (a relative URL)"))
        elif not link_allowed(url):
            found.append((match.start(), f"link [{label[:40]}]: {url[:60]!r}: a link is relative or http(s)/mailto"))
    return found


def markup_problems(body: str) -> list[tuple[int, str]]:
    """(0-based line, message) for everything in a page body the site must not publish as written:
    raw HTML beyond SAFE_TAGS (a <script>, an onerror=), attribute lists setting handlers, styles or
    URLs, links and images that link_problems refuses, and snippet include lines. Fenced code,
    inline code and HTML comments (claim spans, generated-block markers) are left alone."""
    lines = body.split("\n")
    mask = code_mask(lines)
    prose = "\n".join("" if code else line for line, code in zip(lines, mask))
    # Comments and code spans become spaces (newlines kept), so offsets still give the line.
    blank = lambda m: re.sub(r"[^\n]", " ", m.group())  # noqa: E731
    prose = _CODE_SPAN.sub(blank, _COMMENT.sub(blank, prose))
    found: list[tuple[int, str]] = []

    def line_of(offset: int) -> int:
        return prose.count("\n", 0, offset)

    for match in _TAG.finditer(prose):
        name = (match.group(2) or "").lower()
        if match.group(1) or name in SAFE_TAGS and not (match.group(3) or "").strip(" /"):
            continue   # an end tag does nothing without its start tag
        found.append((line_of(match.start()), f"raw HTML {match.group()[:60]!r}: the site is public, so a page body "
                                               "is Markdown; raw HTML is refused but for tags such as <br> and <sub> "
                                               "without attributes; show markup in code"))
    for match in _ATTR_LIST.finditer(prose):
        for key, value in _ATTR_WORD.findall(match.group(1)):
            if key.startswith((".", "#")) or (key.lower() in SAFE_ATTRIBUTES and value):
                continue
            if value or key.lower().startswith("on"):
                found.append((line_of(match.start()), f"attribute list sets {key[:30]!r}: only .class, #id and "
                                                      f"{', '.join(sorted(SAFE_ATTRIBUTES))} may be set"))
    found += [(line_of(offset), message) for offset, message in link_problems(prose)]
    for index, line in enumerate(prose.split("\n")):
        if SNIPPET_LINE.match(line):
            found.append((index, "a snippet include line: the site includes no file a page names (it would "
                                 "publish any file of the builder); show code from artifacts/ through artifact_dir"))
    return sorted(set(found))


_SVG_BAD_ELEMENTS = frozenset({"script", "foreignobject", "iframe", "object", "embed", "set", "animate",
                               "animatemotion", "animatetransform", "handler", "listener", "image", "feimage"})
_CSS_URL = re.compile(r"url\s*\(\s*['\"]?\s*(?!#)|@import|expression\s*\(|javascript:", re.I)


def svg_problems(data: bytes) -> list[str]:
    """Why an SVG under wiki/ may not be published: a reader who opens it runs what it holds, so no
    script, event handler, foreign object, animation, external reference or entity declaration."""
    import xml.etree.ElementTree as ET

    if len(data) > MAX_SVG_BYTES:
        return [f"is {len(data):,} bytes; an SVG is at most {MAX_SVG_BYTES:,}"]
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        return ["declares a DOCTYPE or entities; an SVG of the wiki declares none"]
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        return [f"is not well-formed XML: {err}"]
    problems = []
    for element in root.iter():
        tag = str(element.tag).rpartition("}")[2].lower()
        if tag in _SVG_BAD_ELEMENTS:
            problems.append(f"holds <{tag}>, which can run script or load another host's file")
        if tag == "style" and _CSS_URL.search("".join(element.itertext())):
            problems.append("a <style> loads a URL or runs script")
        for name, value in element.attrib.items():
            key = name.rpartition("}")[2].lower()
            if key.startswith("on"):
                problems.append(f"<{tag}> has the event handler {key}")
            elif key in ("href", "src") and not value.strip().startswith("#"):
                problems.append(f"<{tag}> {key}={value[:60]!r} reaches outside the drawing (only #fragment)")
            elif _CSS_URL.search(value):
                problems.append(f"<{tag}> {key}= loads a URL or runs script")
    return sorted(set(problems))


def wiki_file_problems(wiki_dir: Path) -> list[tuple[str, str]]:
    """(path relative to wiki_dir, message) for every file under wiki/ the site must not publish: any
    symbolic link (mkdocs would copy its target: a builder's file; a linked folder, a whole tree), a
    file that is not a page or an image, an SVG that svg_problems refuses, anything not a regular
    file. Walked without following links; names starting with '.' are not published by mkdocs but
    are checked for links too."""
    found: list[tuple[str, str]] = []
    for folder, dirs, names in os.walk(wiki_dir, followlinks=False):
        base = Path(folder)
        for name in sorted(dirs + names):
            path = base / name
            rel = path.relative_to(wiki_dir).as_posix()
            try:
                mode = os.lstat(path).st_mode
            except OSError as err:
                found.append((rel, f"cannot be read: {err.strerror or err}"))
                continue
            if stat.S_ISLNK(mode):
                found.append((rel, "is a symbolic link; the site would publish what it points to (any file of the "
                                   "machine that builds it), so nothing under wiki/ may be a link"))
            elif stat.S_ISDIR(mode) or name.startswith(".") or any(p.startswith(".") for p in Path(rel).parts):
                continue
            elif not stat.S_ISREG(mode):
                found.append((rel, "is not a regular file"))
            elif path.suffix.lower() not in PUBLISHED_KINDS:
                found.append((rel, f"the site publishes only pages and images under wiki/ "
                                   f"({', '.join(sorted(PUBLISHED_KINDS))}), not {path.suffix or 'a file without a suffix'}"))
            elif path.suffix.lower() == ".svg":
                try:
                    found += [(rel, f"SVG {message}") for message in svg_problems(read_regular(path, MAX_SVG_BYTES + 1))]
                except UnsafeFile as err:
                    found.append((rel, str(err)))
    return found

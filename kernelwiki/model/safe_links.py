"""What the public site may make a link, an image or markup (validate; docsite.sanitize enforces it too).

A link goes to a relative URL, an http(s) or a mailto URL; an image only to a file of the site (another
host's image is a tracker). A page body is Markdown: raw HTML is refused but for SAFE_TAGS without
attributes, and so are attribute lists that set anything but SAFE_ATTRIBUTES.
"""

from __future__ import annotations

import html
import os
import re
import stat
from pathlib import Path

from kernelwiki.model.fences import code_mask
from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.problems import utf8_text

LINK_SCHEMES = frozenset({"http", "https", "mailto"})
SAFE_TAGS = frozenset("br sub sup kbd b i em strong code small details summary".split())
SAFE_ATTRIBUTES = frozenset("title alt loading width height lang target rel colspan rowspan".split())
PUBLISHED = frozenset({".md", ".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""What the site publishes from wiki/: pages and images."""
MAX_SVG = 1 << 20
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")   # what a browser drops from a URL before reading its scheme


def url_scheme(url: str) -> str | None:
    """The scheme a browser reads in `url` (entities decoded, whitespace and controls dropped), lowercased."""
    match = re.match(r"([a-zA-Z][a-zA-Z0-9+.\-]*):", _IGNORED.sub("", html.unescape(url)))
    return match.group(1).lower() if match else None


def link_allowed(url: str) -> bool:
    return url_scheme(url) in (None, *LINK_SCHEMES)


def image_allowed(url: str) -> bool:
    """A relative URL: no scheme, and not `//host` (nor `\\\\host`: a backslash reads as a slash)."""
    return url_scheme(url) is None and _IGNORED.sub("", html.unescape(url))[:2].replace("\\", "/") != "//"


_LINK = re.compile(r"(!?)\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(\s*(<[^>\n]*>|[^\s)]*)")
_REF_USE = re.compile(r"(!?)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\](?:\[([^\[\]\n]*)\])?")
_REF_DEF = re.compile(r"^ {0,3}\[([^\]\n]+)\]:\s*(<[^>\n]*>|\S+)", re.M)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)([^<>]*)(>?)|<!(?!--)|<\?")   # [^<>]: linear
_ATTR_LIST = re.compile(r"\{:?([^{}\n]*)\}")
_ATTR_WORD = re.compile(r"""([^\s=]+)(?:=("[^"]*"|'[^']*'|\S*))?""")
_HIDDEN = re.compile(r"<!--.*?-->|(`+)(?!`).*?(?<!`)\1(?!`)", re.S)   # comments and code spans
SNIPPET_LINE = re.compile(r"^[ \t]*;*-+8<-+(?:[ \t]|$)")


def link_problems(text: str) -> list[tuple[int, str]]:
    """(offset, why) for each Markdown link or image in `text` that may not be published."""
    found = []
    for match in _LINK.finditer(text):
        url = match.group(2).strip("<>")
        if match.group(1) and not image_allowed(url):
            found.append((match.start(), f"image {url[:60]!r}: an image is a file of this wiki, not another host's"))
        elif not match.group(1) and not link_allowed(url):
            found.append((match.start(), f"link {url[:60]!r}: a link is relative, http(s) or mailto"))
    images = {(ref or alt).strip().lower() for bang, alt, ref in _REF_USE.findall(text) if bang}
    for match in _REF_DEF.finditer(text):
        label, url = match.group(1).strip().lower(), match.group(2).strip("<>")
        if not (image_allowed(url) if label in images else link_allowed(url)):
            found.append((match.start(), f"{'image' if label in images else 'link'} [{label[:40]}]: {url[:60]!r} "
                                         "may not be published"))
    return found


def markup_problems(body: str) -> list[tuple[int, str]]:
    """(0-based line, why) for what a page body may not publish: raw HTML beyond SAFE_TAGS, attribute
    lists setting handlers, styles or URLs, links and images link_problems refuses, snippet include
    lines. Fenced and inline code and HTML comments (claim spans) are left alone."""
    lines = body.split("\n")
    prose = "\n".join("" if code else line for line, code in zip(lines, code_mask(lines)))
    prose = _HIDDEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), prose)   # offsets keep their line
    found = []
    for match in _TAG.finditer(prose):
        if match.group(2) and (match.group(1) or not match.group(4) and "=" not in match.group(3)):
            continue   # an end tag does nothing alone; `a<b` with no '>' or attribute is text
        if (match.group(2) or "").lower() in SAFE_TAGS and not match.group(3).strip(" /"):
            continue
        found.append((match.start(), f"raw HTML {match.group()[:60]!r}: a page body is Markdown (the site is public); "
                                     "only tags such as <br> and <sub> without attributes; show markup in code"))
    for match in _ATTR_LIST.finditer(prose):
        for key, value in _ATTR_WORD.findall(match.group(1)):
            if not key.startswith((".", "#")) and (value and key.lower() not in SAFE_ATTRIBUTES or key.lower().startswith("on")):
                found.append((match.start(), f"attribute list sets {key[:30]!r}: only .class, #id and "
                                             f"{', '.join(sorted(SAFE_ATTRIBUTES))}"))
    found += link_problems(prose)
    found += [(m.start(), "a snippet include line: the site includes no file a page names (it would publish any "
                          "file of the builder)") for m in re.finditer(r"(?m)^.*$", prose) if SNIPPET_LINE.match(m.group())]
    return sorted({(prose.count("\n", 0, offset), message) for offset, message in found})


_SVG_ACTIVE = frozenset("script foreignobject iframe object embed set animate animatemotion animatetransform "
                        "handler listener image feimage".split())
_CSS_URL = re.compile(r"url\s*\(\s*['\"]?\s*(?!#)|@import|expression\s*\(|javascript:", re.I)


def svg_problems(data: bytes) -> list[str]:
    """Why an SVG may not be published (opened alone it runs what it holds): script, handlers,
    foreign objects, animation, references outside the drawing, entity declarations."""
    import xml.etree.ElementTree as ET

    if re.search(rb"<!ENTITY|<!DOCTYPE[^>]*\[", data, re.I):
        return ["declares entities"]
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        return [f"is not well-formed XML: {err}"]
    problems = set()
    for element in root.iter():
        tag = str(element.tag).rpartition("}")[2].lower()
        if tag in _SVG_ACTIVE or tag == "style" and _CSS_URL.search("".join(element.itertext())):
            problems.add(f"holds <{tag}>, which can run script or load another host's file")
        for name, value in element.attrib.items():
            key = name.rpartition("}")[2].lower()
            if key.startswith("on") or key in ("href", "src") and not value.strip().startswith("#") or _CSS_URL.search(value):
                problems.add(f"<{tag}> {key}={value[:60]!r} runs script or reaches outside the drawing")
    return sorted(problems)


def wiki_file_problems(wiki_dir: Path) -> list[tuple[str, str]]:
    """(path under wiki/, why) for each file the site must not publish: any symbolic link (mkdocs would
    copy its target, or walk a linked folder), what is not a regular file, a page or an image, an SVG
    svg_problems refuses. Names starting with '.' mkdocs leaves out; they are checked for links only."""
    found = []
    for folder, dirs, names in os.walk(wiki_dir):
        for name in sorted(dirs + names):
            path = Path(folder, name)
            rel = utf8_text(path.relative_to(wiki_dir).as_posix())   # a name not UTF-8 in \x escapes
            try:
                mode = os.lstat(path).st_mode
            except OSError as err:
                found.append((rel, f"cannot be read: {err.strerror or err}"))
                continue
            if stat.S_ISLNK(mode):
                found.append((rel, "is a symbolic link: the site would publish what it points to (any file of the "
                                   "machine that builds it)"))
            elif stat.S_ISDIR(mode) or path.suffix == ".md" or any(part.startswith(".") for part in Path(rel).parts):
                continue   # a page is checked as a page (a FIFO or folder named .md too)
            elif not stat.S_ISREG(mode):
                found.append((rel, "is not a regular file"))
            elif path.suffix.lower() not in PUBLISHED:
                found.append((rel, f"the site publishes only pages and images ({', '.join(sorted(PUBLISHED))})"))
            elif path.suffix.lower() == ".svg":
                try:
                    found += [(rel, f"SVG {why}") for why in svg_problems(read_regular(path, MAX_SVG))]
                except UnsafeFile as err:
                    found.append((rel, str(err)))
    return found

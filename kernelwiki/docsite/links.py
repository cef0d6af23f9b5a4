"""Cross-links: page ids and aliases written in the prose become links when the site is built.

The .md files keep the bare id (so `get` output and raw Markdown stay readable); only the site links
it. What becomes a link:

- inline code that is exactly a page id or alias (`hw-wgmma`, `setmaxnreg`), every time;
- a bare page id in running text, every time;
- a bare alias in running text, the first time on a page, when it cannot be an ordinary word (it
  holds a digit, '.', '_' or '-', and is not a tile shape such as 128x128).

Never inside fenced code, headings, existing links, raw HTML or URLs, and never to the page itself.
Words are found with one token pattern and looked up in a dict, so the cost does not grow with the
number of pages.
"""

from __future__ import annotations

import re

from kernelwiki.docsite.render import rel_link
from kernelwiki.model.fences import code_mask

_PROTECTED = re.compile(r"(<a\b[^>]*>.*?</a>|!?\[[^\]]*\]\([^)]*\)|!?\[[^\]]*\]\[[^\]]*\]|<[^>\n]+>"
                        r"|(?<!`)`[^`\n]+`(?!`)|``[^\n]*?``|https?://\S+|\{[^}\n]*\})")
_TOKEN = re.compile(r"(?<![\w.\-/#])[A-Za-z0-9][\w.\-]*\w(?![\w\-/]|\.\w)")
_SHAPE = re.compile(r"^\d+x\d+(x\d+)?$")


class Linker:
    def __init__(self, page_uris: dict[str, str], aliases: dict[str, list[str]]):
        """page_uris: page id -> docs URI; aliases: page id -> its aliases."""
        self.page_uris = page_uris
        owners: dict[str, set[str]] = {}
        for page_id, names in aliases.items():
            for name in names:
                owners.setdefault(str(name), set()).add(page_id)
        # An alias two pages claim links nowhere; an alias that is another page's id never overrides it.
        self.aliases = {name: next(iter(ids)) for name, ids in owners.items()
                        if len(ids) == 1 and name not in page_uris}

    def target(self, word: str) -> str | None:
        return word if word in self.page_uris else self.aliases.get(word)

    def link(self, markdown: str, src_uri: str, own_id: str | None) -> str:
        out, seen = [], set()
        lines = markdown.split("\n")
        for line, code in zip(lines, code_mask(lines)):
            if code or line.lstrip().startswith(("#", "<", "    ")) or "--8<--" in line:
                out.append(line)
            else:
                out.append(self._line(line, src_uri, own_id, seen))
        return "\n".join(out)

    def _line(self, line: str, src_uri: str, own_id: str | None, seen: set[str]) -> str:
        parts = _PROTECTED.split(line)
        for i, part in enumerate(parts):
            if not part:
                continue
            if i % 2:  # a protected piece: only inline code naming a page changes
                if part.startswith("`") and not part.startswith("``"):
                    page = self.target(part[1:-1])
                    if page and page != own_id:
                        parts[i] = f"[{part}]({rel_link(src_uri, self.page_uris[page])})"
                continue
            parts[i] = _TOKEN.sub(lambda m: self._word(m.group(0), src_uri, own_id, seen), part)
        return "".join(parts)

    def _word(self, word: str, src_uri: str, own_id: str | None, seen: set[str]) -> str:
        if word in self.page_uris:
            page = word
        elif word in self.aliases and word not in seen and re.search(r"[\d._\-]", word) and not _SHAPE.match(word):
            page = self.aliases[word]
            seen.add(word)
        else:
            return word
        if page == own_id:
            return word
        return f"[{word}]({rel_link(src_uri, self.page_uris[page])})"

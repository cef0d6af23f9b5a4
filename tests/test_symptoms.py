"""The `symptoms` field: schema shape, query finds a page by a symptom, and the generated symptom
index groups pages by symptom with every frontmatter string escaped."""

from __future__ import annotations

import json

from conftest import ROOT
from kernelwiki.commands.query import Filters, search
from kernelwiki.docsite import generated
from kernelwiki.model import pages
from kernelwiki.storage import index
from kernelwiki.storage.index import Wiki
from kernelwiki.storage.repo import Repo


def _page(symptoms: list[str], body: str = "nothing about it here\n") -> pages.Page:
    meta = "\n".join(["---", "id: technique-x", "title: X", "type: technique", "symptoms:",
                      *[f"- {json.dumps(s)}" for s in symptoms], "---", ""])
    return pages.parse_page((meta + body).encode(), "wiki/techniques/x.md")


def test_search_text_holds_the_symptoms():
    assert "hangs after grid sync" in index._search_text(_page(["hangs after grid sync"]))
    assert "hangs after grid sync" not in index._search_text(_page([]))


def test_schema_allows_a_list_of_short_unique_strings_only():
    schema = json.loads((ROOT / "schemas" / "page.schema.json").read_text())["properties"]["symptoms"]
    assert schema["type"] == "array" and schema["uniqueItems"] is True
    assert schema["items"]["maxLength"] <= 100 and schema["items"]["type"] == "string"


def test_query_finds_a_footgun_by_its_symptom():
    wiki = Wiki.load(Repo(ROOT), use_cache=False)
    hits = [h.entry.id for h in search(wiki, ["faster", "on", "zeros", "than", "on", "real", "data"], Filters())]
    assert "footgun-low-entropy-inputs" in hits


class _Entry:
    def __init__(self, rel: str, meta: dict):
        self.rel, self.id, self._meta = rel, meta.get("id"), meta

    def get(self, key, default=None):
        return self._meta.get(key, default)


def test_symptom_index_groups_pages_and_escapes_html():
    entries = [_Entry("wiki/footguns/a.md", {"id": "footgun-a", "title": "A <b>", "type": "footgun",
                                             "symptoms": ["hangs", "<script>x</script> | y"]}),
               _Entry("wiki/techniques/b.md", {"id": "technique-b", "title": "B", "type": "technique",
                                               "symptoms": ["hangs", 7]}),
               _Entry("wiki/techniques/c.md", {"id": "technique-c", "title": "C", "type": "technique",
                                               "symptoms": "hangs"})]
    page = generated.symptom_index(entries)
    hangs = next(line for line in page.splitlines() if line.startswith("| hangs |"))
    assert "../footguns/a.md" in hangs and "../techniques/b.md" in hangs and "c.md" not in hangs
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt; &#124; y" in page
    assert "A &lt;b&gt;" in page and "| 7 |" not in page

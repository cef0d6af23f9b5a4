"""The index cache: reused when files are unchanged, refreshed when they change, survives damage."""

from __future__ import annotations

import os

from kernelwiki.storage import cache
from kernelwiki.storage.index import Wiki
from kernelwiki.storage.repo import Repo


def test_cache_is_reused_and_refreshed(mini):
    repo = Repo(mini.root)
    first = Wiki.load(repo)
    assert len(first.fresh) == 2 and (repo.cache / cache.INDEX).is_file()
    second = Wiki.load(repo)
    assert second.fresh == {} and second.by_id()["hw-example"].get("title") == "An example hardware feature"
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("An example hardware feature", "Renamed feature"))
    third = Wiki.load(repo)
    assert list(third.fresh) == ["wiki/hardware/example.md"]
    assert third.by_id()["hw-example"].get("title") == "Renamed feature"


def test_deleted_page_leaves_the_index(mini):
    repo = Repo(mini.root)
    Wiki.load(repo)
    os.remove(mini.root / "wiki/hardware/example.md")
    assert "hw-example" not in Wiki.load(repo).by_id()


def test_damaged_cache_is_ignored(mini):
    repo = Repo(mini.root)
    Wiki.load(repo)
    (repo.cache / cache.INDEX).write_bytes(b"\x80broken")
    assert "hw-example" in Wiki.load(repo).by_id()


def test_validation_results_are_cached_and_invalidated(mini):
    assert mini.problems() == []
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text().replace("- wgmma", "- nope"))
    assert [p["field"] for p in mini.problems()] == ["tags[0]"]
    assert [p["field"] for p in mini.problems()] == ["tags[0]"]  # from the cache, same answer


def test_read_only_checkout_works_without_cache(mini):
    repo = Repo(mini.root)
    (mini.root / ".kernelwiki-cache").write_text("a file where the cache directory should be")
    assert "hw-example" in Wiki.load(repo).by_id()


def test_frontmatter_file_of_another_save_is_not_trusted(tmp_path):
    import json

    from conftest import MiniRepo

    mini = MiniRepo(tmp_path / "repo")
    repo = Repo(mini.root)
    Wiki.load(repo)
    path = mini.root / ".kernelwiki-cache" / cache.META
    document = json.loads(path.read_text(encoding="utf-8"))
    document["data"] = {rel: ["0" * 64, json.dumps({"id": "hw-wrong"})] for rel in document["data"]}
    path.write_text(json.dumps(document), encoding="utf-8")
    entry = Wiki.load(repo).by_id()["hw-example"]
    assert entry.meta["id"] == "hw-example" and entry.meta["claims"][0]["value"] == 100

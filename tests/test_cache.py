"""The cache is untrusted input (issue 24, "Pickled caches run code"): JSON that can only build plain
values, checked for shape before use; a planted, corrupt, truncated, wrong-typed or foreign file is
ignored and rebuilt, never a traceback, never trusted for another key."""

from __future__ import annotations

import base64
import json
import os
import pickle
from array import array

import pytest

from kernelwiki.storage import cache
from kernelwiki.storage.cache import cache_key
from kernelwiki.storage.index import Wiki
from kernelwiki.storage.repo import Repo

FILES = (cache.INDEX, cache.META, cache.NAMES, cache.QUERY)


class Planted:
    """A pickle that runs code when it is loaded: what the old names.pickle attack wrote."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _warm(mini) -> Repo:
    """A checkout whose every cache file exists (validate, a query and an alias lookup ran)."""
    assert mini.run("validate")[0] == 0
    assert mini.run("query", "example")[0] == 0
    repo = Repo(mini.root)
    assert all((repo.cache / name).is_file() for name in FILES)
    return repo


def _answers(mini) -> tuple:
    """What the commands that read the cache say (exit code and stdout), for comparison."""
    return tuple(mini.run(*argv)[:2] for argv in (("get", "skill-example", "--claims"), ("get", "hw-example"),
                                                   ("query", "example"), ("query", "example", "--tag", "wgmma"),
                                                   ("validate",)))


@pytest.mark.parametrize("name", ["names.pickle", "index.pickle", *FILES])
def test_a_planted_pickle_runs_nothing(mini, name):
    repo = _warm(mini)
    marker = mini.root / "pwned"
    (repo.cache / name).write_bytes(pickle.dumps({"key": cache_key(repo), "aliases": Planted(str(marker))}))
    expected = _answers(mini) if name.endswith(".pickle") else None
    for argv in (("get", "skill-example"), ("get", "hw-example"), ("query", "example"), ("validate",)):
        code, out, err = mini.run(*argv)
        assert code == 0 and "Traceback" not in err, (argv, err)
    assert not marker.exists()
    if expected is not None:
        assert _answers(mini) == expected


DAMAGE = {
    "not json": b"\x80\x04broken",
    "truncated": None,
    "empty": b"",
    "a list": b"[]",
    "no data": json.dumps({"format": cache.FORMAT, "version": cache.VERSION, "key": "K"}).encode(),
    "data of the wrong type": json.dumps({"format": cache.FORMAT, "version": cache.VERSION, "key": "K",
                                          "data": 5}).encode(),
    "deeply nested": b"[" * 100000 + b"]" * 100000,
    "another format": json.dumps({"format": "other", "version": cache.VERSION, "key": "K", "data": {}}).encode(),
    "another version": json.dumps({"format": cache.FORMAT, "version": 999, "key": "K", "data": {}}).encode(),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=DAMAGE.keys())
@pytest.mark.parametrize("name", FILES)
def test_a_damaged_cache_file_is_ignored_and_rebuilt(mini, name, damage):
    repo = _warm(mini)
    expected = _answers(mini)
    path = repo.cache / name
    raw = DAMAGE[damage]
    if raw is None:
        raw = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(raw.replace(b'"K"', json.dumps(cache_key(repo)).encode()))
    assert _answers(mini) == expected
    if name == cache.META:   # read only when needed; written again at the index's next save
        page = mini.root / "wiki/hardware/example.md"
        page.write_text(page.read_text(encoding="utf-8") + "\nMore prose.\n", encoding="utf-8")
        assert mini.run("query", "example")[0] == 0
    document = json.loads(path.read_text(encoding="utf-8"))   # written again, whole
    assert document["format"] == cache.FORMAT and document["key"] == cache_key(repo)


def _rewrite(repo: Repo, name: str, change) -> None:
    path = repo.cache / name
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document["data"])
    path.write_text(json.dumps(document), encoding="utf-8")


SHAPES = {
    "entry not a list": lambda d: d["entries"].update({"wiki/hardware/example.md": {"mtime": 1}}),
    "entry too short": lambda d: d["entries"]["wiki/hardware/example.md"].pop(),
    "size a string": lambda d: d["entries"]["wiki/hardware/example.md"].__setitem__(1, "12"),
    "head of the wrong shape": lambda d: d["entries"]["wiki/hardware/example.md"].__setitem__(4, {"id": 5}),
    "problem of the wrong shape": lambda d: d["entries"]["wiki/hardware/example.md"].__setitem__(6, [["x"]]),
    "checks of the wrong shape": lambda d: d["entries"]["wiki/hardware/example.md"].__setitem__(7, {"x": 1}),
    "an extra field": lambda d: d["entries"]["wiki/hardware/example.md"].append(0),
    "names_runs not a boolean": lambda d: d["entries"]["wiki/hardware/example.md"].__setitem__(8, 1),
    "vocabulary of the wrong shape": lambda d: d.__setitem__("vocabulary", {"tags": "wgmma"}),
}


@pytest.mark.parametrize("change", SHAPES.values(), ids=SHAPES.keys())
def test_an_index_entry_of_the_wrong_shape_is_read_again(mini, change):
    repo = _warm(mini)
    expected = _answers(mini)
    _rewrite(repo, cache.INDEX, change)
    wiki = Wiki.load(repo)
    assert "wiki/hardware/example.md" in wiki.fresh      # parsed from the page, not taken from the cache
    assert _answers(mini) == expected


def test_hostile_values_in_the_other_files_are_not_used(mini):
    repo = _warm(mini)
    expected = _answers(mini)
    outside = mini.root.parent / "outside.md"
    outside.write_text(mini.root.joinpath("wiki/hardware/example.md").read_text(), encoding="utf-8")
    _rewrite(repo, cache.NAMES, lambda d: d.update({"skill-example": "wiki/../../outside.md", "x": 5}))
    _rewrite(repo, cache.META, lambda d: d.update({rel: [v[0], "{not json"] for rel, v in d.items()}))
    _rewrite(repo, cache.QUERY, lambda d: d["shards"].update({k: [10 ** 9, 5] for k in d["shards"]}))
    assert _answers(mini) == expected
    _rewrite(repo, cache.QUERY, lambda d: d["stamps"].update({b"wiki/../..".hex(): [0, 0], "not hex": 1}))
    assert _answers(mini) == expected
    data = repo.cache / "query.dat"   # the token line kept, every shard after it garbage
    first = data.read_bytes().split(b"\n", 1)[0]
    data.write_bytes(first + b"\n" + b"[" * (data.stat().st_size - len(first) - 1))
    assert _answers(mini) == expected   # each shard read is refused and the index built again
    entry = Wiki.load(repo).by_id()["hw-example"]
    assert entry.meta["id"] == "hw-example"


def test_a_cache_for_another_key_is_not_trusted(mini):
    """A cache written by other code or for other schemas, however well formed, is not read."""
    repo = _warm(mini)
    for name in FILES:
        path = repo.cache / name
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**document, "key": "0.0:other:other"}), encoding="utf-8")
    wiki = Wiki.load(repo)
    assert set(wiki.fresh) == set(wiki.entries)   # every page read again
    assert cache.read(repo, cache.INDEX, "0.0:other:other") is None


def test_a_cache_file_that_is_a_link_or_fifo_is_not_read(mini):
    repo = _warm(mini)
    expected = _answers(mini)
    secret = mini.root.parent / "secret.json"
    secret.write_text((repo.cache / cache.NAMES).read_text(encoding="utf-8"), encoding="utf-8")
    (repo.cache / cache.NAMES).unlink()
    (repo.cache / cache.NAMES).symlink_to(secret)
    assert cache.read(repo, cache.NAMES, cache_key(repo)) is None
    (repo.cache / cache.META).unlink()
    os.mkfifo(repo.cache / cache.META)
    assert cache.read(repo, cache.META, cache_key(repo)) is None
    assert _answers(mini) == expected


def test_frontmatter_json_cannot_hold_is_read_from_the_page(mini):
    """A !!binary value would come back from JSON as something else: such a frontmatter is not
    cached but read again from the page file."""
    page = mini.root / "wiki/hardware/example.md"
    page.write_text(page.read_text(encoding="utf-8").replace("aliases:", "extra: !!binary aGVsbG8=\naliases:"),
                    encoding="utf-8")
    repo = Repo(mini.root)
    Wiki.load(repo)
    stored = cache.read(repo, cache.META, cache_key(repo))["wiki/hardware/example.md"]
    assert stored[1] is None
    assert Wiki.load(repo).by_id()["hw-example"].meta["extra"] == b"hello"


def test_the_word_index_round_trips_and_refuses_what_it_did_not_write(mini):
    from kernelwiki.storage import termindex

    wiki = Wiki.load(Repo(mini.root))
    built = termindex.build(wiki)
    pages = built.pages
    for name, shard in built._shards.items():
        plain = json.loads(json.dumps(shard.to_plain()))
        again = termindex.Shard.from_plain(plain, pages)
        assert again is not None and again.keys == shard.keys and again.pages == shard.pages
        numbers = array("I", [pages])   # a page number past the last page
        for bad in ({**plain, "keys": plain["keys"][::-1] + ["x"]}, {**plain, "keys": [5] * len(plain["keys"])},
                    {**plain, "bounds": [-1, *plain["bounds"][1:]]}, {**plain, "bounds": [0, "1"]},
                    {**plain, "pages": "not base64!"}, {**plain, "pages": plain["pages"][:-4]},
                    {"keys": ["bx"], "bounds": [0, 1], "pages": base64.b64encode(numbers.tobytes()).decode(),
                     "counts": None}, [], None):
            assert termindex.Shard.from_plain(bad, pages) is None
    assert built.counts("example")
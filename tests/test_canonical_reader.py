"""yamlio.read_canonical: frontmatter in dump's canonical form read line by line (a cold validate of
100,000 pages spent most of its time in the YAML parser and in dumping each page again to compare).
Whatever it accepts it reads exactly as the YAML reader does, and dump writes the same text back;
anything else (another layout, quotes dump would not write, comments, flow style) it leaves to the
YAML reader."""

from __future__ import annotations

import glob

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from kernelwiki.model import yamlio
from kernelwiki.model.pages import parse_page

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["", "yes", "no", "null", "~", "true", "1", "0x1f", "1.5", "1e3", "-", "- x", "a: b", "a:b", "x #y", "C#", "'q'",
     "it's", "---", "...", " lead", "trail ", ":x", "?", "[a]", "{b}", "é ü", "a\tb", "2026-12-01", "<<", "=", "@x"])
KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True) | st.sampled_from(["yes", "null", "1", "on", "a.b", "a-b"])
SCALARS = TEXT | st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans() | st.none()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=12)
DOCS = st.dictionaries(KEYS, VALUES, min_size=1, max_size=6)


def _agrees(text: str) -> bool:
    """read_canonical refuses the text, or reads what load reads, with the same lines, and dump gives it back."""
    fast = yamlio.read_canonical(text)
    if fast is None:
        return True
    data, lines = fast
    try:
        expected, expected_lines = yamlio.load(text)
    except yamlio.YamlProblem:
        return False
    return data == expected and type(data) is type(expected) and lines == expected_lines and yamlio.dump(data) == text \
        and repr(data) == repr(expected)   # 1 and 1.0 and True compare equal; their reprs do not


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCS)
def test_what_dump_writes_is_read_back(doc):
    try:
        text = yamlio.dump(doc)
    except Exception:   # a value dump cannot write (yaml refuses it): nothing to read
        return
    assert _agrees(text)
    if all(isinstance(k, str) for k in doc):
        try:
            parsed = yamlio.load(text)[0]
        except yamlio.YamlProblem:   # a control character: refused by the reader, and not read here either
            assert yamlio.read_canonical(text) is None
            return
        fast = yamlio.read_canonical(text)
        # the plain shapes of a page (no NaN or infinity, which validate refuses): read without the parser
        if fast is None and _simple(parsed):
            assert False, text


def _simple(value) -> bool:
    if isinstance(value, dict):
        return all(yamlio._KEY.fullmatch(k) and yamlio._plain_tag(k) == yamlio._STR_TAG and _simple(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_simple(v) for v in value)
    if isinstance(value, float):
        return value == value and abs(value) != float("inf")
    if isinstance(value, str):
        return not yamlio.CONTROL.search(value) and bool(yamlio._TEXT.fullmatch(value)) and "\n" not in value
    return True


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCS, st.data())
def test_text_changed_anywhere_is_refused_or_read_as_the_yaml_reader_reads_it(doc, data):
    try:
        text = yamlio.dump(doc)
    except Exception:
        return
    at = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.sampled_from([" ", "  ", "-", "- ", ":", ": ", "#", " #", "'", '"', "\n", "\n ", "[", "{", "x",
                                        "&a ", "*a", "!!str ", "\t", "0", "."]))
    cut = data.draw(st.integers(0, 3))
    assert _agrees(text[:at] + insert + text[at + cut:])


def test_every_page_of_the_wiki_reads_alike_either_way():
    read = 0
    for path in sorted(glob.glob(str(ROOT / "wiki/*/*.md"))):
        page = parse_page(open(path, "rb").read(), path)
        assert _agrees(page.frontmatter_text), path
        read += yamlio.read_canonical(page.frontmatter_text) is not None
    assert read > 80

"""Property-based fuzzing of page frontmatter: whatever a page holds - random YAML values, keys and
nesting, broken syntax, other encodings, odd fences - every command exits 0 or 1, validate speaks
only in `path:line: field: message` lines, and nothing raises.

CI runs a fixed, derandomized budget (KERNELWIKI_FUZZ_EXAMPLES, default 150). A longer run, and
one that explores other examples (any seed):

    KERNELWIKI_FUZZ_EXAMPLES=10000 python -m pytest -q tests/test_fuzz.py
    KERNELWIKI_FUZZ_EXAMPLES=2000 KERNELWIKI_FUZZ_SEED=7 python -m pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from conftest import HW_PAGE, PROBLEM_LINE, MiniRepo
from kernelwiki.faces.cli import main
from kernelwiki.model.fastschema import passes
from kernelwiki.model.pages import read_page
from kernelwiki.model.schema import _validators

EXAMPLES = int(os.environ.get("KERNELWIKI_FUZZ_EXAMPLES", "150"))
SEED = os.environ.get("KERNELWIKI_FUZZ_SEED")
FIELDS = ["id", "title", "type", "summary", "aliases", "architectures", "tags", "sources", "claims", "related",
          "probes", "evidence_level", "evidence_by_arch", "status", "artifact_dir", "measured_on", "value"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.sampled_from(["hw-example", "src-example", "sm_90a", "measured", "1e999", "~", "yes"]),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(max_size=12), st.integers(), st.booleans(), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20)


def dumped(data) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return "x: 1\n"


# Mutations of a valid page: replace fields, add fields, or splice raw text into it.
valid_meta = yaml.safe_load(HW_PAGE.split("---\n")[1])
mutated = st.builds(lambda changes: dumped({**valid_meta, **changes}), st.dictionaries(st.sampled_from(FIELDS), values, max_size=4))
random_yaml = values.map(dumped)
raw_lines = st.lists(st.one_of(
    st.text(max_size=40),
    st.sampled_from(["&a [1, 2]", "*a", "b: *a", "key: &x {a: 1}", "- - - -", "? [a]", ": b", "!!python/object:os.system {}",
                     "{[", "'unclosed", "a: |", "\t tab", "!!binary aGk=", "<<: *a", "k: .nan", "k: -.inf",
                     "k: 0x" + "f" * 200, "claims: [{value: .inf}]", "%YAML 1.1", "--- ", "...", "#comment"])),
    max_size=8).map("\n".join)
frontmatter = st.one_of(mutated, random_yaml, raw_lines, st.tuples(mutated, raw_lines).map("".join))
fences = st.tuples(st.sampled_from(["---", "--- ", "---\t", "----", "", "---\r"]),
                   st.sampled_from(["---", "--- ", "", "...", "---\r", "---x"]))
encodings = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1", "crlf"])


def encode(text: str, encoding: str) -> bytes:
    if encoding == "crlf":
        return text.replace("\n", "\r\n").encode("utf-8", "surrogatepass")
    return text.encode(encoding, errors="replace" if encoding == "latin-1" else "surrogatepass")


def run(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([argv[0], "--root", str(root), *argv[1:]])
    return code, out.getvalue(), err.getvalue()


_REPO: dict[str, MiniRepo] = {}


def repo() -> MiniRepo:
    """One repository for all examples (a fresh one per example would dominate the time)."""
    if "repo" not in _REPO:
        base = Path(tempfile.mkdtemp(prefix="kernelwiki-fuzz-"))
        _REPO["repo"] = MiniRepo(base / "repo")
    return _REPO["repo"]


def teardown_module() -> None:
    if "repo" in _REPO:
        shutil.rmtree(_REPO.pop("repo").root.parent, ignore_errors=True)


@seed(int(SEED or 0))
@settings(max_examples=EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(frontmatter=frontmatter, fences=fences, encoding=encodings, body=st.text(max_size=60))
def test_any_frontmatter_gets_clean_answers(frontmatter: str, fences: tuple[str, str], encoding: str, body: str):
    mini = repo()
    page = mini.write("wiki/hardware/fuzz.md", encode(f"{fences[0]}\n{frontmatter}\n{fences[1]}\n{body}\n", encoding))
    for argv in (("validate",), ("get", "wiki/hardware/fuzz.md"), ("get", "hw-example", "--format", "json"),
                 ("query", "example", "--json"), ("refresh", "--check"), ("audit",), ("validate", "--fix")):
        code, out, err = run(mini.root, *argv)
        assert code in (0, 1), (argv, code, out, err)
        if argv == ("validate",):
            for line in out.splitlines():
                assert PROBLEM_LINE.match(line), f"malformed problem line: {line!r}"
            assert (code == 1) == bool(out.strip())
        if argv[-1] == "json":
            assert "NaN" not in out and "Infinity" not in out
    meta = read_page(page, "fuzz.md").meta
    if meta is not None:  # the fast schema check agrees with jsonschema
        slow = _validators(str(mini.root / "schemas"))["page"].is_valid(meta)
        assert passes(mini.root / "schemas", "page", meta) == slow
    page.unlink()


@settings(max_examples=EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.dictionaries(st.text(max_size=12), values, max_size=6), extra=raw_lines)
def test_yamlio_reads_and_writes_like_pyyaml(data: dict, extra: str):
    """yamlio builds values and the canonical text itself (for speed); both must equal PyYAML's."""
    from kernelwiki.model import yamlio

    for text in (dumped(data), extra):
        try:
            ours, _ = yamlio.load(text)
        except yamlio.YamlProblem:
            continue  # refused (aliases, non-finite numbers, ...): nothing to compare
        assert ours == yaml.load(text, Loader=yamlio.Loader)
        if isinstance(ours, dict):
            expected = yaml.dump(ours, Dumper=yamlio.Dumper, sort_keys=False, allow_unicode=True,
                                 default_flow_style=False, width=yamlio.UNWRAPPED)
            assert yamlio.dump(ours) == expected

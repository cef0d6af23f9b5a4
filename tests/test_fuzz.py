"""Property-based fuzzing of what a contribution brings: page frontmatter (random YAML values, keys
and nesting, broken syntax, other encodings, odd fences), run records, probe specs and PROVENANCE
files (valid ones mutated with random and hostile values: paths that climb out, markup, escape
sequences, YAML syntax as names). Every command exits 0 or 1, validate speaks only in
`path:line: field: message` lines, nothing raises, nothing prints an escape sequence, and what the
runner would act on (entry, timeout) stays inside the repository and finite.

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


# --- records, probe specs and provenance -----------------------------------------------------------
# The other files a contribution brings: each is mutated from a valid one (fields replaced with
# random values, or raw text spliced in), and every command that reads it must answer cleanly.
VALID_RECORD = {
    "schema_version": 1, "probe": "probe-fuzz", "run_id": "20261129T100000Z-h200-run", "mode": "run",
    "status": "passed", "started_at": "2026-11-29T10:00:00Z", "finished_at": "2026-11-29T10:00:05Z",
    "environment": {"gpu": "NVIDIA H200", "arch": "sm_90a", "cuda_runtime": "13.0", "driver": "580"},
    "cases": [{"id": "c1", "status": "passed", "params": {"dtype": "bf16", "shape": "64x64x64"},
               "headline": {"metric": "tflops", "value": 110.0, "unit": "TFLOP/s", "baseline": "cuBLAS",
                            "baseline_value": 100.0, "ratio": 1.1}}],
}
RECORD_FIELDS = [*VALID_RECORD, "reason", "seed", "protocol", "ceilings", "negative_control", "instructions", "log_tail"]
VALID_PROBE = {
    "id": "probe-fuzz", "title": "Fuzzed probe", "kind": "kernel", "pages": ["hw-example"], "archs": ["sm_90a"],
    "requires": [], "entry": "run.py", "timeout_s": 30,
    "cases": [{"id": "c1", "params": {"dtype": "bf16"}, "claim": "peak"}],
    "expected_instructions": {"sm_90a": ["wgmma.mma_async"]}, "negative_control": "corrupt one element",
}
PROBE_FIELDS = [*VALID_PROBE, "description", "claims", "compile_requires", "tools", "baselines"]
VALID_PROVENANCE = {
    "artifact": "hw-example", "origin": "mixed", "upstream": {"package": "PyYAML", "version": "0.0"},
    "files": [{"path": "kernel.py", "sha256": "0" * 64, "origin": "own"},
              {"path": "yaml/__init__.py", "sha256": "0" * 64, "origin": "upstream"}],
}
PROVENANCE_FIELDS = [*VALID_PROVENANCE, "summary", "license", "references"]
hostile_text = st.sampled_from(["../../../../etc/passwd", "/etc/passwd", "..", "a/../../b", "<script>x</script>",
                                "\x1b[2J", "x: [y", "{oops}", "", " ", "c 1", "C1", "probe-fuzz/../x", "\u202e"])
fuzz_values = st.one_of(values, hostile_text, st.lists(hostile_text, max_size=3))


def mutated_mapping(valid: dict, fields: list[str]):
    """A valid mapping with some fields replaced (also inside its lists' first item)."""
    def build(top: dict, inner: dict) -> dict:
        data = json_safe({**valid, **top})
        for key, value in inner.items():
            for container in ("cases", "files"):
                if isinstance(data.get(container), list) and data[container] and isinstance(data[container][0], dict):
                    data[container][0] = {**data[container][0], key: value}
        return data
    inner_keys = st.sampled_from(["id", "status", "params", "path", "sha256", "origin", "headline", "claim", "metric"])
    return st.builds(build, st.dictionaries(st.sampled_from(fields), fuzz_values, max_size=3),
                     st.dictionaries(inner_keys, fuzz_values, max_size=2))


def json_safe(data):
    import copy

    return copy.deepcopy(data)


def as_json(data) -> str:
    import json

    try:
        return json.dumps(data, default=str)
    except (ValueError, TypeError, RecursionError):
        return "{}"


def run_sub(root: Path, *argv: str) -> tuple[int, str, str]:
    """A subcommand of `probe` or `site` takes --root after the second word."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([argv[0], argv[1], "--root", str(root), *argv[2:]])
    return code, out.getvalue(), err.getvalue()


def clean(argv, result, usage_error: bool = False) -> None:
    """A clean answer: exit 0 or 1 (2 where the input makes the call itself wrong, e.g. a probe id
    that no valid probe.yaml defines), no traceback, no terminal escape."""
    code, out, err = result
    assert code in ((0, 1, 2) if usage_error else (0, 1)), (argv, code, out, err)
    assert "Traceback" not in out + err
    assert "\x1b" not in out + err, (argv, out, err)
    if argv[0] == "validate":
        for line in out.splitlines():
            assert PROBLEM_LINE.match(line), f"malformed problem line: {line!r}"


def _fuzz_settings(test):
    return seed(int(SEED or 0))(settings(max_examples=max(EXAMPLES // 3, 20), derandomize=SEED is None, deadline=None,
                                         database=None, suppress_health_check=list(HealthCheck))(test))


def fuzz_repo() -> MiniRepo:
    mini = repo()
    probe = mini.root / "probes/probe-fuzz"
    if not probe.is_dir():
        mini.write("probes/probe-fuzz/probe.yaml", yaml.safe_dump(VALID_PROBE, sort_keys=False))
        mini.write("probes/probe-fuzz/run.py", "raise SystemExit(0)\n")
        page = mini.root / "wiki/hardware/example.md"
        page.write_text(page.read_text().replace("summary:", "probes:\n- probe-fuzz\nsummary:", 1))
    return mini


@_fuzz_settings
@given(record=st.one_of(mutated_mapping(VALID_RECORD, RECORD_FIELDS).map(as_json), raw_lines,
                        st.tuples(mutated_mapping(VALID_RECORD, RECORD_FIELDS).map(as_json), raw_lines).map("".join)),
       name=st.sampled_from(["20261129T100000Z-h200-run", "x", "x: [y", "20261129T100000Z-h200-run-2"]))
def test_any_record_gets_clean_answers(record: str, name: str):
    mini = fuzz_repo()
    path = mini.write(f"artifacts/evidence/probe-fuzz/{name}.json", record)
    try:
        for argv in (("validate",), ("get", "hw-example", "--include-code"), ("get", "hw-example", "--format", "json"),
                     ("refresh", "--check")):
            clean(argv, run(mini.root, *argv))
        for argv in (("probe", "list"), ("probe", "show", "probe-fuzz", "--json")):
            clean(argv, run_sub(mini.root, *argv))
    finally:
        path.unlink()


@_fuzz_settings
@given(spec=st.one_of(mutated_mapping(VALID_PROBE, PROBE_FIELDS).map(dumped), raw_lines))
def test_any_probe_spec_gets_clean_answers(spec: str):
    from kernelwiki.probing.specs import load_probes
    from kernelwiki.storage.repo import Repo

    mini = fuzz_repo()
    path = mini.root / "probes/probe-fuzz/probe.yaml"
    original = path.read_bytes()
    path.write_text(spec, encoding="utf-8", errors="surrogatepass")
    try:
        for argv in (("validate",), ("get", "hw-example", "--include-code"), ("refresh", "--check")):
            clean(argv, run(mini.root, *argv))
        for argv in (("probe", "list"), ("probe", "show", "probe-fuzz")):
            clean(argv, run_sub(mini.root, *argv), usage_error=argv[1] == "show")
        for probe in load_probes(Repo(mini.root)).values():  # what the runner sees: safe to act on
            assert 0 < probe.timeout_s < float("inf")
            assert mini.root / "probes" in probe.entry.resolve().parents
            probe.skip_reason("compile-only", None)
    finally:
        path.write_bytes(original)


@_fuzz_settings
@given(provenance=st.one_of(mutated_mapping(VALID_PROVENANCE, PROVENANCE_FIELDS).map(dumped), raw_lines))
def test_any_provenance_gets_clean_answers(provenance: str):
    mini = fuzz_repo()
    mini.write("artifacts/kernels/fuzz/kernel.py", "print('ours')\n")
    path = mini.write("artifacts/kernels/fuzz/PROVENANCE.yaml", provenance)
    page = mini.root / "wiki/hardware/example.md"
    original = page.read_text()
    page.write_text(original.replace("summary:", "artifact_dir: artifacts/kernels/fuzz\nsummary:", 1))
    try:
        for argv in (("validate",), ("get", "hw-example", "--include-code"),
                     ("get", "hw-example", "--include-code", "--format", "json")):
            code, out, err = run(mini.root, *argv)
            clean(argv, (code, out, err))
            assert "root:" not in out  # /etc/passwd is never printed
    finally:
        page.write_text(original)
        path.unlink()


# --- the MCP wire: every line is one message, one answer or nothing, and each answer can be sent -----------
MCP_METHODS = ["initialize", "tools/list", "tools/call", "resources/read", "resources/list", "notifications/initialized",
               "ping", "\ud800"]
message_like = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.one_of(st.just("2.0"), values), "id": st.one_of(st.integers(), st.text(max_size=5), values),
    "method": st.one_of(st.sampled_from(MCP_METHODS), values), "params": values, "result": values, "error": values})
mcp_lines = st.one_of(
    st.binary(max_size=200),
    st.one_of(values, message_like, st.lists(message_like, max_size=3)).map(
        lambda v: as_json(v).encode("utf-8", "surrogatepass")),
    message_like.map(lambda v: __import__("json").dumps(v, default=str).encode())
)


@seed(int(SEED or 0))
@settings(max_examples=max(EXAMPLES * 4, 200), derandomize=SEED is None, deadline=None, database=None)
@given(line=mcp_lines, protocol=st.sampled_from([None, "2025-03-26", "2025-11-25"]))
def test_any_mcp_line_is_a_message_an_answer_or_nothing(line: bytes, protocol: str | None):
    from mcp_types import JSONRPCError, JSONRPCRequest

    from kernelwiki.faces.mcp_wire import check_line

    checked = check_line(line, protocol)
    for message in checked if isinstance(checked, list) else [checked]:
        if message is None:
            continue
        if isinstance(message, JSONRPCError):
            assert message.error.message.startswith("error: ") and message.error.code in (-32700, -32600, -32602)
        message.model_dump_json()   # whatever is answered or passed on can be written back as JSON text
        if isinstance(message, JSONRPCRequest):
            assert isinstance(message.params, (dict, type(None)))

"""The arguments the CLI and the MCP server share, checked once here.

Both faces hand the raw values (argparse strings and integers, or the JSON an agent sent) to these
functions and show the same ArgumentError message: the CLI prints `error: MESSAGE` and exits 2,
the MCP server answers an error result with the same text. A value these functions accept is one
the commands can use; one they refuse never reaches a command (so `--arch sm_91` is refused over
MCP as on the command line instead of silently matching nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelwiki.model.vocab import composed, did_you_mean
from kernelwiki.storage.record_file import run_id_of

if TYPE_CHECKING:
    from kernelwiki.commands.get import Options
    from kernelwiki.commands.query import Filters
    from kernelwiki.model.vocab import Vocabulary
    from kernelwiki.storage.index import Wiki
    from kernelwiki.storage.termindex import QueryIndex

PAGE_TYPES = ("hardware", "kernel", "technique", "footgun", "language", "source")
EVIDENCE = ("spec", "source-reported", "compiled", "measured")
STATUSES = ("draft", "verified", "regressed", "stale")
PARTS = ("page", "frontmatter", "body", "claims", "prose")
MAX_NAME = 300
"""Longest page name, probe id, case id or file pattern accepted (longer ones are typos or attacks)."""
MIN_MAX_BYTES = 256
MAX_WORDS = 64
"""Most words in one query: a question's key words fit; each word costs a search of the vocabulary."""
MAX_PATTERNS = 64
"""Most file, case or shape patterns in one request: each is matched against every file or claim."""
PROBE_ID = re.compile(r"probe-[a-z0-9][a-z0-9-]*")


class ArgumentError(ValueError):
    """An argument no command can use; the message names the argument and what is wrong with it."""


def _name(field: str, value: Any, what: str) -> str:
    """A non-empty string without control characters (a NUL byte would end the name at the OS), in
    Unicode NFC as page text is (a decomposed name typed or sent finds the composed page)."""
    if value is None:
        raise ArgumentError(f"{field}: required; give {what}")
    if not isinstance(value, str):
        raise ArgumentError(f"{field}: give {what} as a string, not {type(value).__name__}")
    if not value.strip():
        raise ArgumentError(f"{field}: {what} is empty")
    if "\x00" in value:
        raise ArgumentError(f"{field}: {value!r} contains a NUL byte")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ArgumentError(f"{field}: {value!r} contains a control character")
    if len(value) > MAX_NAME:
        raise ArgumentError(f"{field}: {len(value)} characters; at most {MAX_NAME}")
    return composed(value)


def _list(field: str, values: Any) -> list[Any]:
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        raise ArgumentError(f"{field}: give a list of strings, not {type(values).__name__}")
    return list(values)


def _choices(field: str, values: Any, allowed: tuple[str, ...]) -> list[str]:
    chosen = []
    for value in _list(field, values):
        value = _name(field, value, f"a {field}")
        if value not in allowed:
            raise ArgumentError(f"{field}: {value!r} is not one of {', '.join(allowed)}{did_you_mean(value, allowed)}")
        chosen.append(value)
    return chosen


def page_types(values: Any) -> list[str]:
    return _choices("type", values, PAGE_TYPES)


def evidence_levels(values: Any) -> list[str]:
    return _choices("evidence", values, EVIDENCE)


def statuses(values: Any) -> list[str]:
    return _choices("status", values, STATUSES)


def part(value: Any) -> str:
    return _choices("part", [value if value is not None else "page"], PARTS)[0]


def tags(vocab: Vocabulary, values: Any) -> list[str]:
    chosen = []
    for value in _list("tag", values):
        value = _name("tag", value, "a tag")
        if value not in vocab.tags:
            raise ArgumentError(f"tag: unknown tag {value!r}{did_you_mean(value, vocab.tags)}")
        chosen.append(value)
    return chosen


def query_archs(wiki: Wiki | QueryIndex, values: Any) -> list[str]:
    """Architectures or GPU names a page filter understands (sm_90, sm_90a, H100, B200, ...)."""
    from kernelwiki.commands.query import normalize_arch

    archs = wiki.vocab.archs
    chosen = []
    for value in _list("arch", values):
        value = _name("arch", value, "an architecture")
        if not [a for a in normalize_arch(wiki, value) if a in archs or a + "a" in archs]:
            raise ArgumentError(f"arch: unknown architecture {value!r}{did_you_mean(value, archs)}")
        chosen.append(value)
    return chosen


def compile_archs(vocab: Vocabulary, values: Any) -> list[str]:
    """Exact architecture names a compile targets (sm_90a, sm_100a): no GPU names, no families."""
    chosen = []
    for value in _list("arch", values):
        value = _name("arch", value, "an architecture")
        if value not in vocab.archs:
            raise ArgumentError(f"arch: unknown architecture {value!r}{did_you_mean(value, vocab.archs)}")
        chosen.append(value)
    return chosen


def count(field: str, value: Any, default: int, minimum: int = 0) -> int:
    """An integer >= minimum (booleans are not integers here, though Python says they are)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{field}: give a whole number, not {value!r}")
    if value < minimum:
        raise ArgumentError(f"{field}: {value} is {'negative' if minimum == 0 else f'below {minimum}'}; give {minimum} or more")
    return value


DEFAULT_LIMIT = 10
"""Query hits shown unless asked for more: two lines each, so that an answer stays a few kB."""


def limit(value: Any) -> int:
    return count("limit", value, DEFAULT_LIMIT)


def max_bytes(value: Any) -> int | None:
    """A size limit on a text answer (None: no limit); too small a window could not hold one line."""
    return None if value is None else count("max_bytes", value, 0, MIN_MAX_BYTES)


def offset(value: Any) -> int:
    return count("offset", value, 0)


def words(value: Any) -> list[str]:
    """Query words: a string (MCP) or a list of strings (CLI), split on whitespace."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else _list("words", value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ArgumentError(f"words: give words as a string, not {type(item).__name__}")
        if "\x00" in item:
            raise ArgumentError(f"words: {item!r} contains a NUL byte")
        out += composed(item).split()
    if len(out) > MAX_WORDS:
        raise ArgumentError(f"words: {len(out)} words; a query takes at most {MAX_WORDS} (its key words are enough)")
    return out


def page_name(value: Any) -> str:
    """A page id, alias or repository path, before the index resolves it."""
    return _name("page", value, "a page id, alias or path")


def file_patterns(values: Any) -> list[str]:
    """Shell patterns (fnmatch) choosing code files by path or name: `*.py`, `hopper_gemm.py`."""
    return [_name("files", value, "a file pattern") for value in _patterns("files", values)]


def _patterns(field: str, values: Any) -> list[Any]:
    listed = _list(field, values)
    if len(listed) > MAX_PATTERNS:
        raise ArgumentError(f"{field}: {len(listed)} patterns; at most {MAX_PATTERNS} in one request (a shell "
                            "pattern such as *.py or bf16-* names many at once)")
    return listed


def probe_id(probes: dict, value: Any) -> str:
    value = _name("probe", value, "a probe id")
    if value not in probes:
        raise ArgumentError(f"no probe {value!r}{did_you_mean(value, probes)}")
    return value


def case_id(value: Any) -> str | None:
    """A case id's form; whether the record has that case is for the record to say."""
    return None if value is None else _name("case", value, "a case id")


def record_name(value: Any) -> str | None:
    """A run record as claims cite it (artifacts/evidence/<probe>/<run>.json.gz, or .json) or its file
    name; either suffix names the run whichever form its file has."""
    if value is None:
        return None
    value = _name("record", value, "a record path or file name")
    if ".." in value.split("/") or run_id_of(value) is None:
        raise ArgumentError(f"record: {value!r} is not a record path (artifacts/evidence/<probe>/<run>.json.gz) "
                            "or file name (<run>.json.gz or <run>.json)")
    return value


GPU_LIST = re.compile(r"[0-9]{1,3}(,[0-9]{1,3})*")


def gpus(value: Any) -> str | int | list[int] | None:
    """--gpus: 'all', a count N (the first N GPUs) or a comma list of nvidia-smi indices (0,2,3);
    None when not given. Whether the host has them is the runner's check."""
    if value is None:
        return None
    _name("gpus", value, "all, a number of GPUs or a list of GPU indices like 0,1,3")
    text = value.strip()
    if text == "all":
        return "all"
    if not GPU_LIST.fullmatch(text):
        raise ArgumentError(f"gpus: {value!r} is not all, a number of GPUs (4) or a list of GPU indices (0,1,3)")
    if "," not in text:
        count = int(text)
        if count < 1:
            raise ArgumentError("gpus: 0 GPUs; give at least 1, or all")
        return count
    indices = [int(part) for part in text.split(",")]
    if len(set(indices)) != len(indices):
        raise ArgumentError(f"gpus: {value!r} names a GPU twice")
    return indices


RAY_ADDRESS = re.compile(r"auto|local|(ray://)?[A-Za-z0-9.\[\]:_-]+:[0-9]{1,5}")
GPU_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,60}")


def ray_address(value: Any) -> str | None:
    """--ray: auto, local, HOST:PORT or ray://HOST:PORT (what ray.init takes); None when not given."""
    if value is None:
        return None
    _name("ray", value, "the Ray cluster's address (auto, HOST:PORT or ray://HOST:PORT)")
    if not RAY_ADDRESS.fullmatch(value):
        raise ArgumentError(f"ray: {value!r} is not auto, local, HOST:PORT or ray://HOST:PORT")
    return value


def gpu_models(values: Any) -> list[str]:
    """--gpu-model: GPU models as run ids name them (H200, H100-80GB-HBM3); a node offers each as
    the Ray resource kernelwiki-gpu:MODEL."""
    models = []
    for value in _list("gpu-model", values):
        _name("gpu-model", value, "a GPU model such as H200")
        if not GPU_MODEL.fullmatch(value):
            raise ArgumentError(f"gpu-model: {value!r} is not a GPU model like H200 or H100-80GB-HBM3")
        models.append(value)
    return models


def case_ids(values: Any) -> list[str]:
    return [_name("case", value, "a case id") for value in _list("case", values)]


def known_case_ids(specs: list, cases: list[str]) -> list[str]:
    """`cases` when each is a case of one of the selected probes; a typo would otherwise run (and
    record) every case of the probe."""
    known = set().union(*(spec.case_ids() for spec in specs)) if specs else set()
    for case in cases:
        if case not in known:
            raise ArgumentError(f"case: no case {case!r} in {', '.join(s.id for s in specs) or 'the selected probes'}"
                                f"{did_you_mean(case, sorted(known))}")
    return cases


def query(wiki: Wiki | QueryIndex, raw: dict) -> tuple[list[str], Filters, int]:
    """A query's words, filters and limit from the raw arguments of either face."""
    from kernelwiki.commands.query import Filters

    filters = Filters(page_types(raw.get("type")), tags(wiki.vocab, raw.get("tag")), query_archs(wiki, raw.get("arch")),
                      evidence_levels(raw.get("evidence")), statuses(raw.get("status")))
    return words(raw.get("words")), filters, limit(raw.get("limit"))


@dataclass(frozen=True)
class GetRequest:
    page: str
    options: Options
    max_bytes: int | None
    offset: int


def flag(field: str, value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ArgumentError(f"{field}: give true or false, not {value!r}")
    return value


def get(raw: dict) -> GetRequest:
    """A page request from the raw arguments of either face (before the page is looked up)."""
    from kernelwiki.commands.get import Options

    name = page_name(raw.get("page"))
    include_code, fetch = flag("include_code", raw.get("include_code")), flag("fetch_upstream", raw.get("fetch_upstream"))
    if fetch and not include_code:
        raise ArgumentError("fetch_upstream: --fetch-upstream works with --include-code (MCP: include_code)")
    patterns = file_patterns(raw.get("files"))
    if patterns and not include_code:
        raise ArgumentError("files: chooses among the code files; give include_code (--include-code) too")
    size, start = max_bytes(raw.get("max_bytes")), offset(raw.get("offset"))
    fmt = raw.get("format") or "md"
    if fmt not in ("md", "json"):
        raise ArgumentError(f"format: {fmt!r} is not one of md, json")
    if fmt == "json" and (size is not None or start):
        raise ArgumentError("max_bytes: cuts the Markdown answer; the JSON document is sent whole "
                            "(choose less with part, files or include_code)")
    if start and size is None:
        raise ArgumentError("offset: continues a cut answer; give max_bytes too")
    cases, shapes = claim_patterns("case", raw.get("case")), claim_patterns("shape", raw.get("shape"))
    chosen = part(raw.get("part"))
    if (cases or shapes) and chosen not in ("page", "claims"):
        raise ArgumentError(f"{'case' if cases else 'shape'}: chooses among the claims; give part claims "
                            "(--claims) or the whole page, not part " + chosen)
    heading = None if raw.get("section") is None else _name("section", raw.get("section"), "a heading's text")
    if heading is not None and chosen not in ("page", "body", "prose"):
        raise ArgumentError(f"section: chooses a part of the body; give part body, prose or page, not {chosen}")
    if heading is not None and patterns:
        raise ArgumentError("section: a section of the page, or files by name: ask for one at a time")
    options = Options(chosen, flag("follow_sources", raw.get("follow_sources")), include_code, fmt,
                      fetch, tuple(patterns), tuple(cases), tuple(shapes), heading)
    return GetRequest(name, options, size, start)


def claim_patterns(field: str, values: Any) -> list[str]:
    """--case / --shape: text a claim's case (or id) or shape holds, or a shell pattern it matches
    (`bf16-*`, `*x7168`); a single string counts as a list of one (MCP)."""
    return [_name(field, value, f"a {field} pattern") for value in _patterns(field, [values] if isinstance(values, str) else values)]

"""YAML in and out, the way every tool here reads and writes it.

Dates stay strings (a retrieval date is text, not a `datetime.date`), duplicate keys are errors,
and each node's line is kept so that problems can name the line they are on. The dumper is the
canonical form of a page's frontmatter: `validate` compares against it and `--fix` writes it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import yaml

from kernelwiki.model.problems import field_path
from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.terminal import CONTROL

LineMap = dict[tuple, int]
"""Field path -> 0-based line of the document."""

_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BASE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _without_timestamps(resolvers: dict) -> dict:
    return {
        first: [(tag, regexp) for tag, regexp in entries if tag != "tag:yaml.org,2002:timestamp"]
        for first, entries in resolvers.items()
    }


class _Memo:
    """Implicit tag resolution, remembered: the C parser and emitter call the Python resolver
    for every scalar (a third of a cold validate), and pages repeat the same few hundred values."""

    _resolved: dict[tuple, str] = {}

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)  # type: ignore[misc]
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            if len(self._resolved) > 200_000:
                self._resolved.clear()
            tag = self._resolved[key] = super().resolve(kind, value, implicit)  # type: ignore[misc]
        return tag


class Loader(_Memo, _BASE_LOADER):  # type: ignore[misc, valid-type]
    yaml_implicit_resolvers = _without_timestamps(_BASE_LOADER.yaml_implicit_resolvers)
    _resolved: dict[tuple, str] = {}


class Dumper(_Memo, _BASE_DUMPER):  # type: ignore[misc, valid-type]
    yaml_implicit_resolvers = _without_timestamps(_BASE_DUMPER.yaml_implicit_resolvers)
    _resolved: dict[tuple, str] = {}


class YamlProblem(Exception):
    """A YAML document that cannot be used; `line` is 0-based within the document."""

    def __init__(self, line: int, field: str, message: str):
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message


UNWRAPPED = 1 << 20
MAX_DEPTH = 32
"""Deepest nesting accepted; frontmatter needs a handful of levels, and walking or pickling
hundreds of levels recurses past Python's limit."""
MAX_INT_DIGITS = 100
"""Longer integers are refused: Python's int() refuses over 4,300 digits, and no claim needs 100."""
_INT_TAG, _FLOAT_TAG, _STR_TAG = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "str"))
ALIASES = "YAML anchors and aliases (&name, *name) are not allowed; write the value out"


def load(text: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; return the data and a map from field path to 0-based line.

    Values are built by one walk over the node tree that also refuses, with the line they are on,
    what would blow up while being built (aliases that expand exponentially, huge integers, deep
    nesting) or cannot be used (non-text keys)."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: LineMap = {}
        return _build(loader, node, lines), lines
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line if mark is not None else 0
        raise YamlProblem(line, "-", f"YAML: {err.problem or err.context}") from None
    except yaml.reader.ReaderError as err:
        # Its str() spans two lines and names a character position; say it on the line it is on.
        line = text[: err.position].count("\n")
        raise YamlProblem(line, "-", f"YAML: control character {_char(err.character)} is not allowed; remove it") from None
    except yaml.YAMLError as err:
        raise YamlProblem(0, "-", "YAML: " + " ".join(str(err).split())) from None
    finally:
        loader.dispose()


_MAP_TAG, _SEQ_TAG, _NULL_TAG, _BOOL_TAG = (f"tag:yaml.org,2002:{t}" for t in ("map", "seq", "null", "bool"))


def _build(loader: Loader, root: yaml.Node, lines: LineMap) -> Any:
    """Depth-first, in document order, without recursion (depth is checked, not hit)."""
    seen: set[int] = set()
    out: list[Any] = []
    # (node, path, container to put the value in, key or None to append)
    stack: list[tuple[yaml.Node, tuple, Any, Any]] = [(root, (), out, None)]
    while stack:
        node, path, parent, key = stack.pop()
        line = node.start_mark.line
        if id(node) in seen:
            raise YamlProblem(lines.get(path, line), field_path(path), ALIASES)
        seen.add(id(node))
        if len(path) > MAX_DEPTH:
            raise YamlProblem(line, field_path(path), f"nested more than {MAX_DEPTH} levels deep")
        lines.setdefault(path, line)
        tag = node.tag if isinstance(node, yaml.ScalarNode) else (node.tag, type(node))
        if tag == (_MAP_TAG, yaml.MappingNode):
            value: Any = {}
            keys: dict[str, int] = {}
            children = []
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line
                if key_node.tag != _STR_TAG or not isinstance(key_node, yaml.ScalarNode):
                    raise YamlProblem(key_line, field_path(path),
                                      f"keys must be plain text (got {_key_text(key_node)}); quote the key")
                name = key_node.value
                if CONTROL.search(name):
                    raise YamlProblem(key_line, field_path(path), f"control character {_char(CONTROL.search(name).group())} "
                                      "in a key; remove it")
                if name in keys:
                    raise YamlProblem(key_line, field_path(path + (name,)),
                                      f"duplicate key (first set on line {keys[name] + 1} of the document)")
                keys[name] = key_line
                lines[path + (name,)] = key_line
                children.append((value_node, path + (name,), value, name))
            stack.extend(reversed(children))
        elif tag == (_SEQ_TAG, yaml.SequenceNode):
            value = []
            for index, item in enumerate(node.value):
                if id(item) in seen:  # an alias: its node starts at the anchor, so name the list's line
                    raise YamlProblem(line, field_path(path + (index,)), ALIASES)
            stack.extend(reversed([(item, path + (index,), value, None) for index, item in enumerate(node.value)]))
        elif tag == _STR_TAG:
            value = node.value
            control = CONTROL.search(value)
            if control:
                raise YamlProblem(line, field_path(path), f"control character {_char(control.group())} in the text "
                                  "(written as a YAML escape); commands would print it to terminals; remove it")
        elif tag == _INT_TAG:
            if len(node.value) > MAX_INT_DIGITS:
                raise YamlProblem(line, field_path(path),
                                  f"an integer of {len(node.value)} characters; at most {MAX_INT_DIGITS} are accepted")
            value = int(node.value) if node.value.isdigit() else _construct(loader, node, path)
        elif tag == _FLOAT_TAG:  # .nan and .inf are read; validate refuses them, JSON output too
            value = _construct(loader, node, path)
        elif tag == _NULL_TAG:
            value = None
        else:  # booleans, and other tags (!!binary, !!set, ...): the safe constructor decides, or refuses
            if not isinstance(node, yaml.ScalarNode):
                _check_tree(node, path)
            value = _construct(loader, node, path)
        if key is None:
            parent.append(value)
        else:
            parent[key] = value
    return out[0]


def _construct(loader: Loader, node: yaml.Node, path: tuple) -> Any:
    """The safe constructor's value; a value its explicit tag cannot hold (`!!int abc`) is a problem."""
    try:
        return loader.construct_object(node, deep=True)
    except (ValueError, KeyError, TypeError, OverflowError) as err:
        tag = str(node.tag).rsplit(":", 1)[-1]
        raise YamlProblem(node.start_mark.line, field_path(path), f"cannot be read as {tag} ({type(err).__name__})") from None


def _check_tree(root: yaml.Node, path: tuple) -> None:
    """Aliases and depth under a collection with an unusual tag, before the constructor builds it."""
    seen: set[int] = set()
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            raise YamlProblem(node.start_mark.line, field_path(path), ALIASES)
        seen.add(id(node))
        if len(path) + depth > MAX_DEPTH:
            raise YamlProblem(node.start_mark.line, field_path(path), f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((item, depth + 1) for pair in node.value for item in pair)


def _char(character: Any) -> str:
    code = character if isinstance(character, int) else ord(character) if isinstance(character, str) and len(character) == 1 else None
    return f"U+{code:04X}" if code is not None else repr(character)


def _key_text(node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
    return f"{node.tag.rsplit(':', 1)[-1]} {node.value!r}"


MAX_FILE_BYTES = 1 << 20


def read_mapping(path: Path) -> tuple[dict | None, LineMap, YamlProblem | None]:
    """A YAML file that must hold a mapping (probe.yaml, PROVENANCE.yaml): (data, lines, None), or
    (None, {}, the problem). Never read through a symbolic link, never more than 1 MiB."""
    try:
        text = read_regular(path, MAX_FILE_BYTES).decode("utf-8")
    except UnsafeFile as err:
        return None, {}, YamlProblem(0, "-", f"{err}; not read")
    except UnicodeDecodeError as err:
        return None, {}, YamlProblem(0, "-", f"not valid UTF-8 (byte {err.start})")
    try:
        data, lines = load(text)
    except YamlProblem as err:
        return None, {}, err
    if not isinstance(data, dict):
        return None, {}, YamlProblem(0, "-", "must be a YAML mapping")
    return data, lines, None


def comment_line(text: str) -> int | None:
    """The 0-based line of the first YAML comment in `text`, or None. The dumper cannot keep
    comments, so tools that rewrite frontmatter must know before they do."""
    if "#" not in text:
        return None
    try:
        tokens = list(yaml.scan(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return None  # the parse error is reported elsewhere
    inside = [(t.start_mark.index, t.end_mark.index) for t in tokens if isinstance(t, yaml.ScalarToken)]
    start = 0
    while (position := text.find("#", start)) >= 0:
        start = position + 1
        if position and text[position - 1] not in " \t\n":
            continue
        if not any(a <= position < b for a, b in inside):
            return text.count("\n", 0, position)
    return None


def dump(data: Any) -> str:
    """The canonical text of a mapping: block style, keys in the author's order, unicode kept,
    long strings on one line (diffs stay line-per-field)."""
    stream = io.StringIO()
    dumper = Dumper(stream, default_flow_style=False, allow_unicode=True, sort_keys=False, width=UNWRAPPED)
    try:
        dumper.open()
        dumper.serialize(_represent(dumper, data))
        dumper.close()
    finally:
        dumper.dispose()
    return stream.getvalue()


def _represent(dumper: Dumper, data: Any) -> yaml.Node:
    """The node tree yaml's SafeRepresenter would build, built directly for the plain types a page
    holds (the representer's generic dispatch cost as much as emitting); other types go to it."""
    kind = type(data)
    if kind is str:
        return yaml.ScalarNode(_STR_TAG, data)
    if kind is dict:
        return yaml.MappingNode(_MAP_TAG, [(_represent(dumper, k), _represent(dumper, v)) for k, v in data.items()],
                                flow_style=False)
    if kind is list:
        return yaml.SequenceNode(_SEQ_TAG, [_represent(dumper, v) for v in data], flow_style=False)
    if kind is bool:
        return yaml.ScalarNode(_BOOL_TAG, "true" if data else "false")
    if kind is int:
        return yaml.ScalarNode(_INT_TAG, str(data))
    if data is None:
        return yaml.ScalarNode(_NULL_TAG, "null")
    return dumper.represent_data(data)


# --- the canonical form, read without a YAML parser ---------------------------------------------------
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*")
_TEXT = re.compile("[\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]*")
"""Characters dump writes as they are (outside the Basic Multilingual Plane it writes escapes)."""
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+(?:e[-+][0-9]+)?")
_LEADING = frozenset("#,[]{}&*!|>'\"%@`")
_tags: dict[str, str] = {}


def _plain_tag(value: str) -> str:
    """The tag the loader resolves a plain scalar to (its implicit resolvers, remembered)."""
    tag = _tags.get(value)
    if tag is None:
        tag = _STR_TAG
        for candidate, regexp in Loader.yaml_implicit_resolvers.get(value[:1], []):
            if regexp.match(value):
                tag = candidate
                break
        if len(_tags) < 100_000:
            _tags[value] = tag
    return tag


def _block_plain(text: str) -> bool:
    """Whether the emitter writes this one-line text plain in block context (its analysis of leading and
    trailing spaces and of block indicators, as yaml.emitter.Emitter.analyze_scalar makes it)."""
    if text[0] == " " or text[-1] == " " or text.startswith(("---", "...")) or text[0] in _LEADING:
        return False
    if text[0] in "?:-" and (len(text) == 1 or text[1] == " "):
        return False
    return ": " not in text and not text.endswith(":") and " #" not in text


def _emitted(value: Any) -> str | None:
    """How dump writes a scalar, for the scalars read_canonical knows (None: another kind)."""
    kind = type(value)
    if kind is str:
        if not value:
            return "''"
        if not _TEXT.fullmatch(value) or CONTROL.search(value):
            return None   # double quotes, escapes or a control character: the YAML reader decides
        if _plain_tag(value) == _STR_TAG and _block_plain(value):
            return value
        return "'" + value.replace("'", "''") + "'"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return None
        text = repr(value).lower()
        return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text
    if value is None:
        return "null"
    return None


_scalars: dict[str, tuple[bool, Any]] = {}


def _scalar(token: str) -> tuple[bool, Any]:
    """(True, value) of a scalar as dump writes it, else (False, None); remembered (pages repeat their
    keys' values: architectures, dtypes, evidence levels, units)."""
    found = _scalars.get(token)
    if found is None:
        found = _read_scalar(token)
        if len(_scalars) < 100_000:
            _scalars[token] = found
    return found


def _read_scalar(token: str) -> tuple[bool, Any]:
    if token.startswith("'"):
        inner = token[1:-1]
        if len(token) < 2 or not token.endswith("'") or "'" in inner.replace("''", ""):
            return False, None
        value: Any = inner.replace("''", "'")
    elif not token or token[0] == '"':
        return False, None
    else:
        tag = _plain_tag(token)
        if tag == _STR_TAG:
            value = token
        elif tag == _INT_TAG and _INT.fullmatch(token) and len(token) <= MAX_INT_DIGITS:
            value = int(token)
        elif tag == _FLOAT_TAG and _FLOAT.fullmatch(token):
            value = float(token)
        elif tag == _BOOL_TAG and token in ("true", "false"):
            value = token == "true"
        elif tag == _NULL_TAG and token == "null":
            value = None
        else:
            return False, None
    return _emitted(value) == token, value


class _NotCanonical(Exception):
    pass


def read_canonical(text: str) -> tuple[Any, LineMap] | None:
    """The data and line map of frontmatter that is exactly dump's text of a mapping of text, numbers,
    booleans, nulls, lists and mappings, read line by line without a YAML parser; None for any other
    text (the YAML reader then reads it: flow style, double quotes, comments, anchors, a value dump
    would write otherwise). What it returns is what load returns, and dump gives `text` back."""
    lines = text.split("\n")
    if not text.endswith("\n") or not lines[0] or lines[0][0] in " -":
        return None
    lines.pop()
    line_map: LineMap = {(): 0}
    try:
        data, end = _mapping(lines, 0, 0, (), line_map)
    except _NotCanonical:
        return None
    return (data, line_map) if end == len(lines) else None


_keys: set[str] = set()
"""Keys found to be plain text dump writes as they are (pages repeat a few hundred)."""


def _mapping(lines: list[str], at: int, indent: int, path: tuple, line_map: LineMap) -> tuple[dict, int]:
    if len(path) > MAX_DEPTH:
        raise _NotCanonical
    out: dict[str, Any] = {}
    pad, count = " " * indent, len(lines)
    while at < count:
        line = lines[at]
        if not line.startswith(pad):
            if not line.strip():
                raise _NotCanonical   # dump writes no empty line
            break   # a shallower line: this mapping has ended
        if line[indent:indent + 1] in ("", " ", "-"):
            raise _NotCanonical   # an empty line, deeper than a key here, or a list where dump writes none
        key, colon, rest = line[indent:].partition(":")
        if key not in _keys:
            if not colon or not _KEY.fullmatch(key) or len(key) >= 128 or _plain_tag(key) != _STR_TAG:
                raise _NotCanonical
            if len(_keys) < 100_000:
                _keys.add(key)
        if not colon or key in out:
            raise _NotCanonical
        line_map[path + (key,)] = at
        if rest[:1] == " " and rest not in (" []", " {}"):   # `key: value`, the most common line
            found = _scalars.get(rest[1:]) or _scalar(rest[1:])
            if not found[0]:
                raise _NotCanonical
            out[key] = found[1]
            at += 1
            continue
        out[key], at = _value(lines, at, rest, indent, path + (key,), line_map, in_mapping=True)
    return out, at


def _sequence(lines: list[str], at: int, indent: int, path: tuple, line_map: LineMap) -> tuple[list, int]:
    if len(path) > MAX_DEPTH:
        raise _NotCanonical
    out: list[Any] = []
    marker = " " * indent + "- "
    while at < len(lines) and lines[at].startswith(marker):
        item = path + (len(out),)
        line_map.setdefault(item, at)
        rest = lines[at][len(marker):]
        if rest.startswith("- "):   # a list in a list: `- - a`, its items two columns in
            lines[at] = " " * (indent + 2) + rest
            value, at = _sequence(lines, at, indent + 2, item, line_map)
        else:
            key, colon, tail = rest.partition(":")
            if colon and _KEY.fullmatch(key) and (not tail or tail.startswith(" ")):   # a mapping: `- k: v`
                lines[at] = " " * (indent + 2) + rest
                value, at = _mapping(lines, at, indent + 2, item, line_map)
            else:
                value, at = _value(lines, at, " " + rest, indent, item, line_map, in_mapping=False)
        out.append(value)
    return out, at


def _value(lines: list[str], at: int, rest: str, indent: int, path: tuple, line_map: LineMap,
           in_mapping: bool) -> tuple[Any, int]:
    """The value after `key:` (or `- `) on line `at`: on the line, or (a mapping's key with nothing
    after its colon) the block below it."""
    if rest == "" and in_mapping:
        following = lines[at + 1] if at + 1 < len(lines) else ""
        if following.startswith(" " * indent + "- "):   # dump writes a mapping's lists without indenting them
            return _sequence(lines, at + 1, indent, path, line_map)
        if following.startswith(" " * (indent + 2)) and following[indent + 2:indent + 3] not in (" ", "-", ""):
            return _mapping(lines, at + 1, indent + 2, path, line_map)
        raise _NotCanonical
    if not rest.startswith(" "):
        raise _NotCanonical
    token = rest[1:]
    if token == "[]":
        return [], at + 1
    if token == "{}":
        return {}, at + 1
    ok, value = _scalar(token)
    if not ok:
        raise _NotCanonical
    return value, at + 1

"""YAML in and out, the way every tool here reads and writes it.

Dates stay strings (a retrieval date is text, not a `datetime.date`), duplicate keys are errors,
and each node's line is kept so that problems can name the line they are on. The dumper is the
canonical form of a page's frontmatter: `validate` compares against it and `--fix` writes it.
"""

from __future__ import annotations

from typing import Any

import yaml

from kernelwiki.pages import LineMap
from kernelwiki.problems import field_path

_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BASE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _without_timestamps(resolvers: dict) -> dict:
    return {
        first: [(tag, regexp) for tag, regexp in entries if tag != "tag:yaml.org,2002:timestamp"]
        for first, entries in resolvers.items()
    }


class Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    yaml_implicit_resolvers = _without_timestamps(_BASE_LOADER.yaml_implicit_resolvers)


class Dumper(_BASE_DUMPER):  # type: ignore[misc, valid-type]
    yaml_implicit_resolvers = _without_timestamps(_BASE_DUMPER.yaml_implicit_resolvers)


class YamlProblem(Exception):
    """A YAML document that cannot be used; `line` is 0-based within the document."""

    def __init__(self, line: int, field: str, message: str):
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message


UNWRAPPED = 1 << 20


def load(text: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; return the data and a map from field path to 0-based line."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        lines: LineMap = {}
        _walk(node, (), lines)
        return loader.construct_document(node), lines
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line if mark is not None else 0
        raise YamlProblem(line, "-", f"YAML: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise YamlProblem(0, "-", f"YAML: {err}") from None
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: tuple, lines: LineMap) -> None:
    lines[path] = node.start_mark.line
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlProblem(key_node.start_mark.line, field_path(path), "keys must be plain text")
            key = key_node.value
            if key in seen:
                raise YamlProblem(
                    key_node.start_mark.line,
                    field_path(path + (key,)),
                    f"duplicate key (first set on line {seen[key] + 1} of the document)",
                )
            seen[key] = key_node.start_mark.line
            lines[path + (key,)] = key_node.start_mark.line
            _walk(value_node, path + (key,), lines)
            lines[path + (key,)] = key_node.start_mark.line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, path + (index,), lines)


def dump(data: Any) -> str:
    """The canonical text of a mapping: block style, keys in the author's order, unicode kept,
    long strings on one line (diffs stay line-per-field)."""
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=UNWRAPPED)

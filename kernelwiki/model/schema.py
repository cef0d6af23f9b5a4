"""JSON Schema validation (draft 2020-12) with errors turned into Problems that name the line."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.problems import NotARepo, Problem, field_path
from kernelwiki.model.schemafile import MAX_SCHEMA_BYTES, read_schema
from kernelwiki.model.vocab import did_you_mean

SCHEMA_FILES = ("claim", "page", "provenance", "probe", "record")


def fingerprint(schemas_dir: Path) -> str:
    """Changes whenever a schema or the vocabulary changes (cache key for validation results)."""
    digest = hashlib.sha256()
    for path in sorted(schemas_dir.glob("*")):
        try:  # never blocking on a FIFO; what cannot be read is reported by _validators
            digest.update(path.name.encode() + b"\0" + read_regular(path, MAX_SCHEMA_BYTES))
        except UnsafeFile:
            digest.update(path.name.encode() + b"\0unreadable\0")
    return digest.hexdigest()[:16]


@lru_cache(maxsize=8)
def _validators(schemas_dir: str) -> dict:
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = {name: read_schema(Path(schemas_dir), name) for name in SCHEMA_FILES}
    registry = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas.values()
    )
    return {name: Draft202012Validator(schema, registry=registry) for name, schema in schemas.items()}


def check(
    schemas_dir: Path, name: str, data: Any, rel: str, line_of: Callable[[tuple], int]
) -> list[Problem]:
    """Validate `data` against schemas/<name>.schema.json; `line_of(path)` gives a file line."""
    from kernelwiki.model.fastschema import passes

    if passes(schemas_dir, name, data):
        return []
    from referencing.exceptions import Unresolvable

    validator = _validators(str(schemas_dir))[name]
    problems = []
    try:
        for error in validator.iter_errors(data):
            for leaf in _leaves(error):
                path = tuple(leaf.absolute_path)
                field, message = _describe(leaf, path)
                problems.append(Problem(rel, line_of(path), field, message))
    except Unresolvable as err:  # a $ref to nothing in schemas/ (never fetched from anywhere)
        raise NotARepo(f"schemas/{name}.schema.json: {' '.join(str(err).split())[:200]}") from None
    return sorted(set(problems))


def _leaves(error):
    """The most specific errors: for if/then/else and allOf, the errors of the failing branch."""
    if error.context:
        for sub in error.context:
            yield from _leaves(sub)
    else:
        yield error


def _describe(error, path: tuple) -> tuple[str, str]:
    kind = error.validator
    if kind == "additionalProperties":
        extras = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        known = error.schema.get("properties", {}).keys()
        hints = "; ".join(f"unknown field {e!r}{did_you_mean(e, known)}" for e in extras)
        return field_path(path + (extras[0],)) if len(extras) == 1 else field_path(path), hints
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return field_path(path + (missing,)), "required field is missing"
    if kind == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return field_path(path), f"must be {_article(expected)}, got {_json_type(error.instance)} {_short(error.instance)}"
    if kind in ("enum", "const"):
        allowed = error.validator_value if kind == "enum" else [error.validator_value]
        return field_path(path), f"{_short(error.instance)} is not one of {', '.join(map(str, allowed))}" + (
            did_you_mean(error.instance, [str(a) for a in allowed]) if isinstance(error.instance, str) else ""
        )
    if kind == "pattern":
        return field_path(path), f"{_short(error.instance)} does not match {error.validator_value}"
    return field_path(path), error.message


def _article(name: str) -> str:
    words = {"array": "a list", "object": "a mapping", "string": "text", "integer": "an integer",
             "number": "a number", "boolean": "true or false"}
    return " or ".join(words.get(part.strip(), part) for part in name.split(" or "))


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    return {dict: "a mapping", list: "a list", str: "text", int: "an integer", float: "a number",
            type(None): "nothing"}.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."

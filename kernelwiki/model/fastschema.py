"""A fast yes/no answer to "does this document pass its schema?", so that validate pays for
jsonschema's detailed error reports only on documents that fail.

fastjsonschema compiles a schema into plain Python (tens of times faster than jsonschema's
interpreter, which dominated a cold validate of 20,000 pages). It knows draft-07, whose meaning
equals 2020-12's for every keyword our schemas use, and it resolves only local references, so
the schemas a schema points to (page -> claim) are inlined under $defs first. Where it is not
installed, or cannot compile a schema, `passes` answers None and the caller asks jsonschema.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from kernelwiki.model.schemafile import read_schema

SUFFIX = ".schema.json"
OWN_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
"""The schemas shipped beside this package. fastjsonschema generates and runs Python from a schema,
so it compiles only a schema equal to ours; any other (a checkout's edited schemas/, which is
untrusted input) is checked by jsonschema, which interprets it."""


def passes(schemas_dir: Path, name: str, data: Any) -> bool | None:
    """True or False; None when there is no fast validator for this schema."""
    validator = _compiled(str(schemas_dir), name)
    if validator is None:
        return None
    try:
        validator(data)
    except Exception:  # JsonSchemaValueException, or anything odd: let jsonschema decide
        return False
    return True


@lru_cache(maxsize=16)
def _compiled(schemas_dir: str, name: str) -> Callable[[Any], Any] | None:
    try:
        import fastjsonschema
    except ImportError:
        return None
    try:
        schema = _inlined(Path(schemas_dir), name)
        if schema != _inlined(OWN_SCHEMAS, name):
            return None  # fastjsonschema turns a schema into Python code: only our own schemas
        return fastjsonschema.compile(schema, use_formats=False)
    except Exception:  # an unsupported construct: the slow path is always right
        return None


def _inlined(schemas_dir: Path, name: str) -> dict:
    """The schema with every reference to another schema file turned into a local one."""
    root = read_schema(schemas_dir, name)
    defs = root.setdefault("$defs", {})

    def local(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.endswith(SUFFIX):
                node["$ref"] = f"#/$defs/{_include(ref[: -len(SUFFIX)])}"
            elif isinstance(ref, str) and ref.startswith("#/$defs/") and prefix:
                node["$ref"] = f"#/$defs/{prefix}{ref[len('#/$defs/'):]}"
            for value in node.values():
                local(value, prefix)
        elif isinstance(node, list):
            for value in node:
                local(value, prefix)

    def _include(other: str) -> str:
        if other not in defs:
            sub = read_schema(schemas_dir, other)
            defs[other] = {}
            for key, value in sub.pop("$defs", {}).items():
                local(value, f"{other}--")
                defs[f"{other}--{key}"] = value
            for key in ("$id", "$schema"):
                sub.pop(key, None)
            local(sub, f"{other}--")
            defs[other] = sub
        return other

    local(root, "")
    root.pop("$id", None)
    root["$schema"] = "http://json-schema.org/draft-07/schema#"
    return root

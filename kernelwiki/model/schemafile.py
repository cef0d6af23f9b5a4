"""One schema file of schemas/, read as untrusted input: never through a link or from a FIFO,
never another folder's file, and checked to be a JSON Schema before anything validates with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.problems import NotARepo

MAX_SCHEMA_BYTES = 1 << 20


def read_schema(schemas_dir: Path, name: str) -> dict:
    """schemas/<name>.schema.json as a mapping; NotARepo (one message naming the file) when it
    cannot be read, is not JSON, or is not a valid draft 2020-12 schema."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    where = f"schemas/{name}.schema.json"
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):  # a $ref names a sibling file, never a path
        raise NotARepo(f"schemas/: a schema refers to {name!r}, which is not a schema of this folder")
    try:
        schema = json.loads(read_regular(schemas_dir / f"{name}.schema.json", MAX_SCHEMA_BYTES).decode("utf-8"))
        Draft202012Validator.check_schema(schema)
    except UnsafeFile as err:
        raise NotARepo(f"{where}: {err}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise NotARepo(f"{where}: not JSON ({' '.join(str(err).split())[:200]})") from None
    except SchemaError as err:
        raise NotARepo(f"{where}: not a JSON Schema ({' '.join(str(err.message).split())[:200]})") from None
    if not isinstance(schema, dict) or not isinstance(schema.get("$id"), str):
        raise NotARepo(f"{where}: a schema must be a JSON object with an $id")
    return schema

"""A run record's file: its name (`<run_id>.json` or `<run_id>.json.gz`), its text and its bytes.

The runner writes `<run_id>.json.gz`: the record's text (record_text: one case per line) in gzip,
built so that the same record always gives the same bytes (no time stamp or file name in the
header, one compression level). Records written before that stay `<run_id>.json` until
`kernelwiki records compress` converts them. Every reader gets a record's text through read_text,
whichever the form: records arrive by pull request, so a gzip file is inflated only up to
MAX_TEXT_BYTES, and whatever is wrong with it (not gzip, truncated, too large) is a RecordFileError
whose message a problem line can carry.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

from kernelwiki.model.files import UnsafeFile, read_regular
from kernelwiki.model.terminal import printable

JSON = ".json"
GZIP = ".json.gz"
SUFFIXES = (GZIP, JSON)
"""The names a record file may have; the runner writes GZIP."""
MAX_TEXT_BYTES = 4 << 20
"""The largest record text read, plain or inflated (the largest real one is ~30 kB): one limit for
both forms, so that compressing a record never changes whether it is read."""
MAX_DEPTH = 72
"""The deepest a record's lists and objects nest (the real ones: 7): what walks a record recurses
(its text, the schema, the site), so a deeper one is refused as it is read; the runner refuses a
probe result nested past runner.MAX_RESULT_DEPTH (64), which its record wraps in a few levels."""
COMPRESS_LEVEL = 9
GZIP_HEADER = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x02\xff"
"""RFC 1952: magic, deflate, no flags (no file name), mtime 0, XFL 2 (level 9), OS 255 (unknown);
written by hand because gzip.compress's OS byte depends on the Python version."""


class RecordFileError(ValueError):
    """A record file that cannot be read as text; str() says why, in words."""


def run_id_of(name: str) -> str | None:
    """The run id a record file name stands for ('r.json.gz' and 'r.json' -> 'r'); None for a name
    of neither form. Accepts a path: only its last part counts."""
    base = name.rsplit("/", 1)[-1]
    suffix = next((s for s in SUFFIXES if base.endswith(s)), None)
    return base[: -len(suffix)] if suffix and len(base) > len(suffix) else None


def without_suffix(path: str) -> str:
    """`path` with its record suffix removed ('p/r.json.gz' -> 'p/r'); unchanged if it has none: the
    name of a run whichever form its file has."""
    suffix = next((s for s in SUFFIXES if path.endswith(s)), "")
    return path[: len(path) - len(suffix)]


def is_gzip(path: str | Path) -> bool:
    """Whether a record file is the compressed form (by its name, as every reader decides)."""
    return str(path).endswith(GZIP)


def taken(directory: Path, run_id: str) -> bool:
    """Whether a record of this run id exists in `directory`, in either form (a new run id must be
    neither, or the two files would be one run twice); a symbolic link of that name counts."""
    return any(os.path.lexists(directory / f"{run_id}{suffix}") for suffix in SUFFIXES)


def read_text(path: Path) -> str:
    """The JSON text of a record file of either form, never through a symbolic link or a FIFO, at
    most MAX_TEXT_BYTES (inflated: a small gzip file can stand for gigabytes, so inflating stops one
    byte past the limit)."""
    try:
        data = read_regular(path, MAX_TEXT_BYTES)
    except UnsafeFile as err:
        raise RecordFileError(f"{err}; not read") from None
    if is_gzip(path):
        data = gunzip(data, MAX_TEXT_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RecordFileError(f"not valid UTF-8 (byte {err.start}{' of the inflated text' if is_gzip(path) else ''})") from None


def gunzip(data: bytes, limit: int) -> bytes:
    """The bytes one gzip member holds, at most `limit` of them; RecordFileError for data that is
    not gzip, is cut short, fails its checksum, inflates past `limit` or has bytes after its end."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as err:
        raise RecordFileError(f"cannot be inflated ({err}): not a gzip file, or a damaged one; write it with "
                              "`kernelwiki records compress` (or `gzip -n`)") from None
    if len(out) > limit:
        raise RecordFileError(f"inflates to more than {limit:,} bytes, the limit for a record; not read")
    if not inflater.eof:
        raise RecordFileError(f"truncated gzip data: the stream ends after {len(data):,} bytes without its end "
                              "marker and checksum")
    if inflater.unused_data:
        raise RecordFileError(f"{len(inflater.unused_data):,} bytes after the end of the gzip stream; a record "
                              "file holds one gzip member")
    return out


def gzip_bytes(data: bytes) -> bytes:
    """`data` as one gzip member whose bytes depend on `data` alone (and the zlib library): no time
    stamp, no file name, level COMPRESS_LEVEL."""
    deflate = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    return GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def nesting(value: Any) -> int:
    """How deep lists and objects nest in `value` (a scalar: 0), counted without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def plain_strings(value: Any) -> Any:
    """`value` with every string (keys too) as plain text: each control character (terminal.CONTROL:
    C0 but tab and newline, DEL, C1, bidirectional overrides) written as its escape (\\x1b). A
    probe's error text can carry a tool's colour codes; a record holds none (validate refuses them)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {plain_strings(k): plain_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_strings(v) for v in value]
    return value


def record_text(record: dict) -> str:
    """A record's text as the runner writes it: standard JSON without indentation, each case on a
    line of its own, a final newline (diffs of the text stay readable: `zcat` shows it); strings
    as plain text (plain_strings)."""
    def dump(value) -> str:
        return json.dumps(plain_strings(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    head = {k: v for k, v in record.items() if k != "cases"}
    cases = record.get("cases") or []
    body = ",\n".join(dump(case) for case in cases)
    return dump(head)[:-1] + (',"cases":[\n' + body + "\n]}" if cases else ',"cases":[]}') + "\n"


def encode(text: str) -> bytes:
    """The bytes of a `.json.gz` record file holding `text`."""
    return gzip_bytes(text.encode("utf-8"))

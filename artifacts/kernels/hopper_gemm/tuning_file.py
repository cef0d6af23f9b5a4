"""The tuning file of `gemm(tune=True)` read and written as untrusted input (no torch, no CUTLASS here:
it runs, and is tested, on any CPU).

The file sits in a cache directory anyone with the account can write, so nothing in it is trusted:
it is opened without following a symbolic link and without blocking on a FIFO, at most MAX_BYTES
are read, JSON nested too deeply to read is a broken file, and every entry is checked by the
caller's `check` (autotune.entry_config). Whatever is wrong costs one warning per read and a tuning
run, never an exception out of gemm() nor a warning per bad entry. Writes replace the file
atomically: a link or a FIFO in its place is replaced, never written through.

Format: {"version": V, "entries": {bucket: entry}}.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

MAX_BYTES = 16 << 20
"""A bucket's entry is about 100 bytes: this is 100,000 buckets and more."""

Config = TypeVar("Config")


def _read_bytes(path: Path) -> bytes | None:
    """The file's bytes, None if it does not exist; OSError (with a reason) if it must not be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        if os.path.islink(path):
            raise OSError("it is a symbolic link, which the tuning file never is") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("it is not a regular file")
        if info.st_size > MAX_BYTES:
            raise OSError(f"it is {info.st_size:,} bytes, more than {MAX_BYTES:,}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def read(path: Path, version: int, check: Callable[[Any], Config | None]) -> dict[str, Config]:
    """The entries of the tuning file that `check` accepts, by bucket (none when the file is missing);
    a file that is unreadable, not JSON or not the format is one warning, and so are all the entries
    `check` refuses together."""
    try:
        raw = _read_bytes(path)
    except OSError as err:
        warnings.warn(f"{path}: tuning cache unreadable ({err.strerror or err}); tuning again", stacklevel=2)
        return {}
    if raw is None:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        warnings.warn(f"{path}: tuning cache unreadable (not UTF-8 at byte {err.start}); tuning again", stacklevel=2)
        return {}
    except RecursionError:
        warnings.warn(f"{path}: tuning cache nests too deeply to be the format; tuning again", stacklevel=2)
        return {}
    except ValueError as err:
        warnings.warn(f"{path}: tuning cache is not JSON ({str(err)[:200]}); tuning again", stacklevel=2)
        return {}
    if not isinstance(data, dict) or data.get("version") != version or not isinstance(data.get("entries"), dict):
        warnings.warn(f"{path}: tuning cache is not version {version} of the format; tuning again", stacklevel=2)
        return {}
    out, refused = {}, []
    for key, entry in data["entries"].items():
        config = check(entry)
        if config is None:
            refused.append(key)
        else:
            out[key] = config
    if refused:
        more = f" and {len(refused) - 1:,} more" if len(refused) > 1 else ""
        warnings.warn(f"{path}: entries[{refused[0][:200]!r}]{more}: not a configuration the kernel implements; "
                      "ignored", stacklevel=2)
    return out


def write(path: Path, version: int, entries: dict[str, Any]) -> None:
    """Replace the tuning file by one holding `entries` (written to a new file, then renamed over it);
    a cache that cannot be written is a warning: it costs a tuning next time, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"version": version, "entries": entries}, out, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as err:
        warnings.warn(f"{path}: cannot store the tuning ({type(err).__name__}: {err})", stacklevel=2)

"""Run records as every reader sees them: read safely, checked once, ordered one way.

validate reports a record's problems; refresh, get, the site and the runner read only records
without any (load_records), so that whatever validate lets through is exactly what the rest relies
on. "The latest record" of a probe means one thing, asked with explicit filters: latest, latest_by.
"""

from __future__ import annotations

import glob
import json
import re
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable

from kernelwiki.model.problems import Problem
from kernelwiki.model.terminal import CONTROL, printable
from kernelwiki.storage.repo import Repo
from kernelwiki.model.schema import check as schema_check
from kernelwiki.storage.record_file import (MAX_DEPTH, SUFFIXES, RecordFileError, is_gzip, nesting, read_text, run_id_of,
                                             without_suffix)
from kernelwiki.storage.record_form import expand, shared_problems

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
CLOCK_SKEW = timedelta(minutes=10)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A probe directory or run id: what the runner writes, and what a problem line can name."""
RUN_ID = re.compile(r"^(?P<base>.+-(?:run|compile-only))(?:-(?P<n>[0-9]+))?$")


class RecordProblem(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class RecordFile:
    rel: str
    path: Path
    data: Any
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number in standard JSON")


class _Overflow(ValueError):
    """A number literal too large for a float (1e999, which Python reads as inf; an integer of 400
    digits, which no reader can turn into one)."""

    def __init__(self, literal: str):
        super().__init__(literal)
        self.literal = literal


def finite_float(literal: str) -> float:
    """json's parse_float that refuses what would be read as an infinity."""
    value = float(literal)
    if value in (float("inf"), float("-inf")):
        raise _Overflow(literal)
    return value


def finite_int(literal: str) -> int:
    """json's parse_int that refuses an integer no float can hold."""
    value = int(literal)
    if abs(value) > 2 ** 1023:
        raise _Overflow(literal)
    return value


def read_record(path: Path) -> Any:
    """Parse one record file (`.json` or `.json.gz`, storage.record_file); RecordProblem (with a
    line of the JSON text) for anything that is not standard JSON in a readable file."""
    try:
        text = read_text(path)
    except RecordFileError as err:
        raise RecordProblem(1, str(err)) from None
    return parse_record(text)


def parse_record(text: str) -> Any:
    """A record's JSON text parsed as standard JSON (no NaN, no infinity, no number too large for a
    float) nested at most MAX_DEPTH levels; RecordProblem with the line of the text that is wrong."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=finite_float, parse_int=finite_int)
    except _Overflow as err:
        line = text.count("\n", 0, max(text.find(err.literal), 0)) + 1
        raise RecordProblem(line, f"{err.literal[:40]} is too large for a number (it would be read as infinity); "
                                  "write the value") from None
    except RecursionError:
        raise RecordProblem(1, "not a JSON run record: nested too deeply") from None
    except ValueError as err:
        line = getattr(err, "lineno", None) or 1
        message = getattr(err, "msg", None) or str(err)
        raise RecordProblem(line, f"not a JSON run record: {message}") from None
    if nesting(data) > MAX_DEPTH:
        raise RecordProblem(1, f"nested more than {MAX_DEPTH} levels deep: what reads a record walks it level by "
                               "level (the runner's are 7 deep); not read")
    return data


def order_key(started_at: Any, rel: str) -> tuple:
    """Oldest first: by started_at, then by the run-id counter (…-run, …-run-2, …-run-3 started
    within one second, in that order)."""
    run = run_id_of(rel) or rel
    match = RUN_ID.match(run)
    base, n = (match.group("base"), int(match.group("n") or 1)) if match else (run, 0)
    return (str(started_at), base, n, rel)


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


MAX_CONTROL_PROBLEMS = 5
"""At most this many strings with control characters named per record (the first ones found)."""


_Place = tuple | None
"""Where a value sits in a record: (its parent's place, its key or index); None for the record itself."""


def control_characters(data: Any) -> list[tuple[str, str]]:
    """(field path, first control character) of the record's strings, keys included, that hold one
    (terminal.CONTROL), at most MAX_CONTROL_PROBLEMS; walked without recursion (a record nested
    hundreds of levels deep arrives by pull request too), each value's place kept as a link to its
    parent's and spelled out only for a string that holds one (spelling every place out made a
    1 MB record of many keys deep down take gigabytes)."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[_Place, Any]] = [(None, data)]
    while stack and len(found) < MAX_CONTROL_PROBLEMS:
        place, value = stack.pop()
        if isinstance(value, str):
            hit = CONTROL.search(value)
            if hit:
                found.append((_field(place), hit.group()))
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                hit = CONTROL.search(str(key))
                if hit:
                    found.append((_field((place, str(key))) + " (its name)", hit.group()))
                stack.append(((place, str(key)), item))
        elif isinstance(value, list):
            stack += [((place, i), item) for i, item in reversed(list(enumerate(value)))]
    return found[:MAX_CONTROL_PROBLEMS]


def _field(place: _Place) -> str:
    """A place as a field path: `cases[0].params.name` (each key printable, at most 40 characters)."""
    parts: list[str] = []
    while place is not None:
        place, step = place
        parts.append(f"[{step}]" if isinstance(step, int) else f".{printable(step)[:40]}")
    return "".join(reversed(parts)).lstrip(".") or "-"


def check_record(repo: Repo, rel: str, path: Path, data: Any, probes: set[str], now: datetime) -> list[Problem]:
    """What validate reports about one parsed record, beyond JSON syntax."""
    problems = schema_check(repo.schemas, "record", data, rel, lambda p: 1)
    if not isinstance(data, dict):
        return problems

    def add(field: str, message: str) -> None:
        problems.append(Problem(rel, 1, field, message))

    if data.get("probe") != path.parent.name:
        add("probe", f"must equal the directory name {path.parent.name!r}")
    if path.parent.name not in probes:
        add("probe", f"no probe probes/{path.parent.name}/probe.yaml; a record belongs to a probe")
    if data.get("run_id") != run_id_of(path.name):
        add("run_id", f"must equal the file name {run_id_of(path.name)!r}")
    started = parse_time(data.get("started_at"))
    for key in ("started_at", "finished_at"):
        if key in data and parse_time(data[key]) is None:
            add(key, f"{data[key]!r} is not a UTC time like 2026-11-29T16:17:03Z")
        elif key in data and parse_time(data[key]) > now + CLOCK_SKEW:
            add(key, f"{data[key]} is in the future; a record reports a run that happened")
    finished = parse_time(data.get("finished_at"))
    if started and finished and finished < started:
        add("finished_at", "is before started_at")
    for where, char in control_characters(data):
        add(where, f"holds the control character U+{ord(char):04X}: a record's strings are plain text (the "
                   "runner writes control characters as escapes such as \\x1b); escape it or drop it")
    seen: set[str] = set()
    for index, case in enumerate(data.get("cases") if isinstance(data.get("cases"), list) else []):
        case_id = case.get("id") if isinstance(case, dict) else None
        if isinstance(case_id, str):
            if case_id in seen:
                add(f"cases[{index}].id", f"duplicate case id {case_id!r}: each case's claims are named by its id")
            seen.add(case_id)
    for field, message in shared_problems(data):
        add(field, message)
    return problems


def scan(repo: Repo, probes: set[str], now: datetime | None = None, probe: str = "*") -> list[RecordFile]:
    """Every artifacts/evidence/<probe>/<run>.json and <run>.json.gz (of one probe, if given) with its
    problems, in path order; the data of a record without problems is expanded (storage.record_form)."""
    now = now or datetime.now(timezone.utc)
    out: list[RecordFile] = []
    if not repo.evidence.is_dir() or repo.evidence.is_symlink():
        return out
    folders = glob.escape(probe) if probe != "*" else "*"
    for path in sorted(p for suffix in SUFFIXES for p in repo.evidence.glob(f"{folders}/*{suffix}")):
        rel = repo.rel(path)
        if not SAFE_NAME.fullmatch(path.parent.name) or not SAFE_NAME.fullmatch(run_id_of(path.name) or ""):
            # Named by the folder, since this name cannot stand in a `path:line:` problem line.
            where = repo.rel(path.parent) if SAFE_NAME.fullmatch(path.parent.name) else repo.rel(repo.evidence)
            out.append(RecordFile(where, path, None, (Problem(where, 1, "-", f"{path.relative_to(repo.evidence).as_posix()!r} "
                                                       "is not a run record name (letters, digits, '.', '_', '-'); not read"),)))
            continue
        if path.parent.is_symlink():
            out.append(RecordFile(rel, path, None, (Problem(rel, 1, "-", "its directory is a symbolic link; not read"),)))
            continue
        try:
            data = read_record(path)
        except RecordProblem as err:
            out.append(RecordFile(rel, path, None, (Problem(rel, err.line, "-", err.message),)))
            continue
        problems = tuple(check_record(repo, rel, path, data, probes, now))
        # Readers get each timing entry whole (storage.record_form); a record with problems is refused anyway.
        out.append(RecordFile(rel, path, data if problems else expand(data), problems))
    return _one_file_per_run(out)


def _one_file_per_run(records: list[RecordFile]) -> list[RecordFile]:
    """`records` with a problem on each `.json` whose run is also a `.json.gz` beside it: one run is one
    record, and readers take the compressed one."""
    compressed = {without_suffix(r.rel): r.rel for r in records if is_gzip(r.path)}
    out = []
    for record in records:
        twin = compressed.get(without_suffix(record.rel)) if not is_gzip(record.path) else None
        if twin:
            why = Problem(record.rel, 1, "-", f"the same run as {twin}; keep one file per run (`kernelwiki records "
                                               "compress` removes the .json when both hold the same record)")
            record = replace(record, problems=(*record.problems, why))
        out.append(record)
    return out


def probe_ids(repo: Repo) -> set[str]:
    """Directories under probes/ that hold a probe.yaml (whether or not it is valid)."""
    if not repo.probes.is_dir():
        return set()
    return {p.name for p in repo.probes.iterdir() if not p.is_symlink() and (p / "probe.yaml").is_file()}


@dataclass(frozen=True)
class Record:
    """A run record that validate accepts, as refresh, get and the site read it."""

    path: str
    """Repository-relative path of the record file (`.json.gz`, or `.json` from before compression)."""
    data: dict

    @property
    def started(self) -> str:
        return str(self.data.get("started_at", ""))

    @property
    def arch(self) -> str | None:
        return (self.data.get("environment") or {}).get("arch")

    @property
    def mode(self) -> str | None:
        return self.data.get("mode")

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    def fraction_of_ceiling(self, headline: Any) -> float | None:
        """A case headline's fraction of the measured ceiling, only where the record's own `ceilings`
        name the calibration run of the same invocation they came from (`run_id`, which the runner
        writes only then): a record without one - whose calibration failed, or an older record whose
        ceilings were read from another run's record (`record` alone) - shows no % of ceiling."""
        ceilings = self.data.get("ceilings")
        fraction = headline.get("fraction_of_ceiling") if isinstance(headline, dict) else None
        if not isinstance(ceilings, dict) or not ceilings.get("run_id"):
            return None
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not fraction > 0:
            return None
        return float(fraction)

    def archs(self) -> list[str]:
        """The architectures the record speaks for: those a compile-only record compiled for, the
        machine's for a run."""
        if self.mode == "compile-only":
            return list(self.data.get("instructions") or {})
        return [str(self.arch)]


def load_records(repo: Repo, probe: str = "*", quiet: bool = False) -> dict[str, list[Record]]:
    """probe id -> its records (of one probe, if given), oldest first; only records that validate
    accepts. The others are named on stderr (unless `quiet`), so that a refused record is never
    silently ignored."""
    return load_and_refused(repo, probe, quiet)[0]


def in_the_future(record: RecordFile) -> bool:
    """Whether validate refused a record only for being dated after this machine's clock."""
    return bool(record.problems) and all("is in the future" in p.message for p in record.problems)


def load_and_refused(repo: Repo, probe: str = "*", quiet: bool = False) -> tuple[dict[str, list[Record]], list[RecordFile]]:
    """load_records, and the records it refused."""
    out: dict[str, list[Record]] = {}
    refused = []
    for record in scan(repo, probe_ids(repo), probe=probe):
        if record.ok:
            out.setdefault(record.path.parent.name, []).append(Record(record.rel, record.data))
        else:
            refused.append(record)
    for record in [] if quiet else refused:
        print(f"{record.problems[0]} (record ignored; see kernelwiki validate)", file=sys.stderr)
    for records in out.values():
        records.sort(key=lambda r: order_key(r.started, r.path))
    return out, refused


def _matches(record: Record, mode: str | None, status: str | None, arch: str | None, with_cases: bool) -> bool:
    return ((mode is None or record.mode == mode) and (status is None or record.status == status)
            and (arch is None or arch in record.archs()) and (not with_cases or bool(record.data.get("cases"))))


def latest(records: list[Record], *, mode: str | None = None, status: str | None = None, arch: str | None = None,
           with_cases: bool = False) -> Record | None:
    """The newest of a probe's records (oldest first, as load_records gives them) that has the
    mode ('run', 'compile-only'), the status ('passed', ...) and speaks for the architecture given,
    and with `with_cases` holds at least one case; None when none does. An argument left out does
    not filter."""
    return next((r for r in reversed(records) if _matches(r, mode, status, arch, with_cases)), None)


def latest_by(records: list[Record], groups: Callable[[Record], Iterable[Hashable]], *, mode: str | None = None,
              status: str | None = None) -> dict[Hashable, Record]:
    """For each group a record falls in (`groups(record)`, e.g. Record.archs), the newest matching
    record, in the order the groups first appear."""
    out: dict[Hashable, Record] = {}
    for record in records:
        if _matches(record, mode, status, None, False):
            for group in groups(record):
                out[group] = record
    return out

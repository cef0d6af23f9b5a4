"""Probe processes: started in their own process group and tagged in their environment, so that
every process a probe starts - including one that calls setsid() and leaves the group - can be
found and killed: at the timeout, when the probe exits, when the runner is interrupted, and by
the next runner when a runner was killed outright (SIGKILL) and could not clean up.

The tag is two environment variables that children inherit: KERNELWIKI_PROBE_OF (the repository
root; stale processes of this checkout) and KERNELWIKI_PROBE_RUN (one probe run). Linux /proc only;
elsewhere only the process group is killed.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

OF_VAR = "KERNELWIKI_PROBE_OF"
RUN_VAR = "KERNELWIKI_PROBE_RUN"
PROC = Path("/proc")


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the runner; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum


def signal_name(number: int) -> str:
    """SIGSEGV for 11; SIGRTMIN+6 for a real-time signal that has no name of its own."""
    try:
        return signal.Signals(number).name
    except ValueError:
        low, high = int(getattr(signal, "SIGRTMIN", 34)), int(getattr(signal, "SIGRTMAX", 64))
        return f"SIGRTMIN+{number - low}" if low <= number <= high else f"signal {number}"


def tag(root: Path) -> dict[str, str]:
    """Environment variables that mark one probe run of this checkout."""
    return {OF_VAR: str(root), RUN_VAR: uuid.uuid4().hex}


def tagged(name: str, value: str) -> list[int]:
    """Pids of live processes (other than this one) whose environment has name=value."""
    if not PROC.is_dir():
        return []
    wanted = f"{name}={value}".encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_tree(pgid: int, run_token: str) -> list[int]:
    """SIGKILL the probe's process group and every process tagged with its run; the pids killed."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return _kill_all(tagged(RUN_VAR, run_token))


def kill_stale(root: Path) -> list[int]:
    """Kill probe processes of this checkout left by an earlier runner. Only call while holding the
    runner lock: then no live runner owns them."""
    return _kill_all(tagged(OF_VAR, str(root)))


def _kill_all(pids: list[int]) -> list[int]:
    """SIGKILL each pid; the ones that were still there to kill."""
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


@contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into Interrupted for the duration, so that the code unwinding from
    it kills the running probe (signal handlers can only be set from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)

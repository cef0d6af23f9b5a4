"""Probe processes: every process a probe starts is found and killed at the timeout, when the probe
exits and when the runner is interrupted, whatever it did to hide (setsid, an empty environment,
forking to new pids).

The runner makes itself a child subreaper (Linux prctl PR_SET_CHILD_SUBREAPER): a process orphaned
anywhere under a probe is re-parented to the runner instead of init, so the probe's whole tree stays
the runner's descendants. When the probe ends, the runner kills its process group and every
descendant it did not have before the probe started, again and again until none is left (a process
forking in the meantime is re-parented to the runner and found on the next pass), and reaps them.

For a runner killed outright (SIGKILL), which can clean up nothing, probes also carry a tag in their
environment: KERNELWIKI_PROBE_OF (the repository root) and KERNELWIKI_PROBE_RUN (one probe run); the
next runner kills the tagged processes of its checkout. A process that dropped its environment
escapes that last net only (a cgroup per run would close it). Linux /proc only; elsewhere only the
process group is killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
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


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the one orphans under it are re-parented to; False where the OS cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, tuple[int, bool]]:
    """pid -> (parent pid, whether it is a zombie) for every process in /proc."""
    table = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        table[int(entry.name)] = (int(fields[1]), fields[0] == "Z")
    return table


def children() -> set[int]:
    """This process's direct children (zombies included)."""
    me = os.getpid()
    return {pid for pid, (parent, _) in _parents().items() if parent == me}


def kill_descendants(leader: int, before: set[int], seconds: float = 5.0) -> list[int]:
    """SIGKILL every process under the probe `leader` and every child this (subreaper) process
    gained that is not in `before`, pass after pass until none is alive; reap the adopted ones
    (the leader is left for its Popen to reap). The pids killed."""
    me, killed = os.getpid(), set()
    deadline = time.monotonic() + seconds
    while True:
        table = _parents()
        roots = {leader} | {pid for pid, (parent, _) in table.items() if parent == me and pid not in before}
        tree, frontier = set(roots), list(roots)
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, _) in table.items():
                if ppid == parent and pid not in tree:
                    tree.add(pid)
                    frontier.append(pid)
        live = [pid for pid in tree if pid in table and not table[pid][1] and pid != me]
        killed |= set(_kill_all(live))
        for pid in roots - {leader}:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not live or time.monotonic() > deadline:
            return sorted(killed)
        time.sleep(0.005)


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

"""`kernelwiki probe run --ray ADDRESS`: a fleet of GPU machines through Ray, not an engine of our own.

Each node of the cluster says which GPUs it has with one custom resource per GPU model,
`kernelwiki-gpu:<MODEL>` (MODEL as record run ids name it: H200, H100-80GB-HBM3, B200), e.g.
`ray start --address HEAD --num-gpus 8 --resources '{"kernelwiki-gpu:H200": 8}'`. Every probe becomes
one Ray task per model (and per --repeat copy) with `num_gpus=1` and one unit of that model's
resource, spread over the nodes. The task runs the probe on its node exactly as the local runner
does (its own process, timeout, tagged children) from a copy of this checkout that Ray ships
(runtime_env working_dir), and returns the record; nothing is written on the node.

Back here each record is untrusted input: it lands in artifacts/evidence only if it passes
check_record (schema, probe, run id, times), written atomically; a record that does not is replaced
by a `failed` one saying why. A task whose worker or node dies is retried by Ray (max_retries); when
the retries are spent the probe is recorded `crashed`. A record is never half-written.

Reaching the cluster has one deadline (CONNECT_TIMEOUT_S): an address nothing listens on is refused
before Ray is asked, and a Ray that cannot connect (no cluster for `auto`, a port that is no Ray's)
is a FleetError, one `error:` line, never a hang or a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import sys
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from kernelwiki.harness import env as env_mod
from kernelwiki.harness.peaks import CEILINGS_ENV, ceilings_unavailable
from kernelwiki.probing import processes
from kernelwiki.probing.gpus import batch_id
from kernelwiki.probing.runner import Options, Outcome, _iso, _run_one, _write_record
from kernelwiki.probing.specs import ProbeSpec, load_probes
from kernelwiki.storage import record_file
from kernelwiki.storage.records import check_record
from kernelwiki.storage.repo import Repo

RESOURCE_PREFIX = "kernelwiki-gpu:"
SHIPPED_EXCLUDES = [".git", ".venv", ".kernelwiki-cache", "site", "node_modules", "**/__pycache__"]
SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
CONNECT_TIMEOUT_S = 60.0
"""The one deadline for reaching the cluster (ray.init): Ray alone retries an unreachable GCS for minutes."""


class FleetError(RuntimeError):
    """Ray is missing, or the cluster cannot run what was asked; the message says what to do."""


def gpu_resource(model: str) -> str:
    """The custom resource a node offers per GPU of `model` ('H200' -> 'kernelwiki-gpu:H200')."""
    return RESOURCE_PREFIX + model


def cluster_models(resources: dict[str, float]) -> list[str]:
    """The GPU models a cluster offers, from ray.cluster_resources()."""
    return sorted(key[len(RESOURCE_PREFIX):] for key, amount in resources.items()
                  if key.startswith(RESOURCE_PREFIX) and amount >= 1)


@dataclass(frozen=True)
class Task:
    """What one Ray task runs: a probe on one GPU of one model."""
    probe: str
    model: str
    mode: str
    cases: list[str]
    archs: list[str]
    seed: int | None
    timeout_s: float | None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise FleetError("--ray needs Ray: pip install 'kernelwiki[fleet]'") from None
    return ray


def run_on_ray(repo: Repo, specs: list[ProbeSpec], options: Options, address: str, *, models: list[str] | None = None,
               repeat: int = 1, max_retries: int = 2, out: TextIO | None = None) -> list[Outcome]:
    """Run every probe on every GPU model asked for (default: all the cluster offers), `repeat`
    times each; land each record here. Outcomes in the order the tasks ended."""
    out = out or sys.stderr
    ray = _import_ray()
    env_vars = {"KERNELWIKI_COMMIT": env_mod.fingerprint(repo.root).get("commit") or ""}
    if os.environ.get("KERNELWIKI_FAKE_GPU"):  # tests: the fake GPUs of the nodes are those of this one
        env_vars["KERNELWIKI_FAKE_GPU"] = os.environ["KERNELWIKI_FAKE_GPU"]
    # The checkout goes to the nodes as the job's working directory (only a job can ship one).
    connect(ray, address, {"working_dir": str(repo.root), "excludes": SHIPPED_EXCLUDES, "env_vars": env_vars})
    try:
        return _schedule(ray, repo, specs, options, models, repeat, max_retries, out)
    finally:
        ray.shutdown()


def connect(ray, address: str, runtime_env: dict, timeout_s: float | None = None) -> None:
    """ray.init within one deadline, or a FleetError that says why in one line."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    result: dict[str, BaseException | None] = {}

    def init() -> None:
        try:
            _listening(address, min(timeout_s, 10.0))
            # logging_level: Ray's own notes ("SIGTERM handler is not set ...") stay off the runner's output.
            ray.init(address=address, log_to_driver=False, runtime_env=runtime_env, logging_level=logging.ERROR)
            result["error"] = None
        except BaseException as err:   # noqa: BLE001 - reported in the calling thread
            result["error"] = err

    # In a thread of its own: neither a name lookup nor ray.init, for an address that answers but is no
    # Ray's, has a deadline of its own.
    thread = threading.Thread(target=init, name="kernelwiki-ray-init", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise FleetError(f"--ray {address}: no Ray cluster answered within {timeout_s:.0f} s; start one "
                         "(ray start --head) or give the address of its head node")
    if isinstance(result.get("error"), FleetError):
        raise result["error"]
    if result.get("error") is not None:
        err = result["error"]
        words = " ".join(str(err).split())[:300] or type(err).__name__
        raise FleetError(f"--ray {address}: cannot connect to the Ray cluster: {words}")


def _listening(address: str, timeout_s: float) -> None:
    """For HOST:PORT and ray://HOST:PORT, whether anything accepts a connection there (a refused or
    silent port is a FleetError at once, not minutes of Ray's retries)."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError, OverflowError) as err:   # OverflowError: a port above 65535
        reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise FleetError(f"--ray {address}: nothing accepts a connection there ({reason}); start the cluster "
                         "(ray start --head) or give the address of its head node") from None


def _schedule(ray, repo: Repo, specs: list[ProbeSpec], options: Options, models: list[str] | None, repeat: int,
              max_retries: int, out: TextIO) -> list[Outcome]:
    offered = cluster_models(ray.cluster_resources())
    wanted = models or offered
    missing = [m for m in wanted if m not in offered]
    if not wanted or missing:
        raise FleetError(f"no node of the Ray cluster offers {', '.join(gpu_resource(m) for m in missing or ['<MODEL>'])}; "
                         "start GPU nodes with ray start --num-gpus N --resources '{\"" + gpu_resource("H200") + "\": N}'")
    remote = ray.remote(_probe_task)
    pending: dict[Any, Task] = {}
    for spec in specs:
        for model in wanted:
            task = Task(spec.id, model, options.mode, options.cases, options.archs, options.seed, options.timeout_s)
            for _ in range(repeat):
                ref = remote.options(num_gpus=1, resources={gpu_resource(model): 1}, max_retries=max_retries,
                                     retry_exceptions=False, scheduling_strategy="SPREAD").remote(asdict(task))
                pending[ref] = task
    print(f"kernelwiki probe run --ray: {len(pending)} task(s) of {len(specs)} probe(s) on {', '.join(wanted)}",
          file=out, flush=True)
    probes = {s.id: s for s in specs}
    known = set(load_probes(repo))
    batch = batch_id(socket.gethostname())
    lock = threading.Lock()
    outcomes = []
    try:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1, timeout=None)
            task = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as err:   # the worker or its node died, retries spent
                result = {"status": "crashed", "record": _crashed_record(task, max_retries, err)}
            if isinstance(result, dict) and isinstance(result.get("record"), dict):
                result["record"]["batch"] = batch
            outcome = _land(repo, probes[task.probe], known, task, result, options.write, lock)
            outcomes.append(outcome)
            print(f"{task.probe} on {task.model}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
                  + (f" -> {outcome.path}" if outcome.path else ""), file=out, flush=True)
    except processes.Interrupted:
        for ref in pending:   # a cancelled task's runner kills its probe's process tree on the node
            ray.cancel(ref)
        raise
    return outcomes


def _probe_task(task: dict) -> dict:
    """On a node: run one probe on the GPU Ray gave this task; the record, not written."""
    import ray

    task = Task(**task)
    repo = Repo(Path.cwd().resolve())  # the shipped copy of the checkout
    spec = load_probes(repo).get(task.probe)
    if spec is None:
        return {"status": "failed", "reason": f"no probe {task.probe} in the checkout shipped to the node"}
    gpu = env_mod.detect_gpu()
    reason = spec.skip_reason(task.mode, gpu, 1)
    if reason:
        return {"status": "skipped", "reason": reason}
    ids = [int(i) for i in ray.get_gpu_ids()]
    index = ids[0] if ids else None
    uuid = next((d.uuid for d in env_mod.list_gpus() if d.index == index), None)
    environment = dict(env_mod.fingerprint(repo.root), host=socket.gethostname(), gpu_index=index, gpu_uuid=uuid,
                       ray_node=ray.get_runtime_context().get_node_id())
    options = Options(mode=task.mode, cases=task.cases, archs=task.archs, seed=task.seed, timeout_s=task.timeout_s,
                      write=False)
    timeout = task.timeout_s or spec.timeout_s
    alone = {CEILINGS_ENV: json.dumps(ceilings_unavailable("under --ray each probe is a task of its own: no calibration "
                                                             "ran before it on its GPU"))}
    outcome = _run_one(repo, spec, options, environment, timeout, alone, sys.stderr)
    return {"status": outcome.status, "reason": outcome.reason, "record": outcome.record}


def _crashed_record(task: Task, retries: int, err: BaseException) -> dict:
    now = _iso(datetime.now(timezone.utc))
    return {
        "schema_version": 1, "probe": task.probe, "run_id": f"{now.replace('-', '').replace(':', '')}-{task.model.lower()}-{task.mode}",
        "mode": task.mode, "status": "crashed", "started_at": now, "finished_at": now,
        "reason": f"the Ray worker or node running it died, {retries + 1} attempt(s) in all ({type(err).__name__})",
        "environment": {"gpu": None, "arch": None, "driver": None, "host": None},
        "cases": [], "log_tail": str(err)[-4000:],
    }


def _land(repo: Repo, spec: ProbeSpec, known: set[str], task: Task, result: Any, write: bool,
          lock: threading.Lock) -> Outcome:
    """Check what a node sent back and write it, or a `failed` record saying what was wrong with it."""
    if not isinstance(result, dict) or not isinstance(result.get("status"), str):
        result = {"status": "failed", "reason": "the node sent back something that is not a result"}
    record = result.get("record")
    if record is None:
        return Outcome(spec.id, result["status"], str(result.get("reason", ""))[:1000])
    with lock:
        problems = _problems(repo, spec.id, known, record)
        if problems:
            reason = "the record the node sent back fails its check: " + "; ".join(problems[:5])
            record = _crashed_record(task, 0, RuntimeError(reason))
            record.update(status="failed", reason=reason[:1000])
            problems = _problems(repo, spec.id, known, record)
        if problems:  # never write what would not validate
            return Outcome(spec.id, "failed", "; ".join(problems)[:1000])
        path = _write_record(repo, spec.id, record) if write else None
    return Outcome(spec.id, record["status"], record.get("reason", ""), record, path)


def _problems(repo: Repo, probe_id: str, known: set[str], record: Any) -> list[str]:
    """What check_record finds wrong with the record as it would land; its run id made unique first."""
    if not isinstance(record, dict) or not SAFE_RUN_ID.fullmatch(str(record.get("run_id", ""))):
        return ["run_id: missing or not a plain file name"]
    base, candidate, n = record["run_id"], record["run_id"], 2
    while record_file.taken(repo.evidence / probe_id, candidate):
        candidate, n = f"{base}-{n}", n + 1
    record["run_id"] = candidate
    path = repo.evidence / probe_id / f"{candidate}{record_file.GZIP}"
    found = check_record(repo, repo.rel(path), path, record, known, datetime.now(timezone.utc))
    return [f"{p.field}: {p.message}" for p in found]

"""The four row-wise ops of probe-rowwise-membound and what the probe runs for each: the input sets, the
reference (fp32 for 16-bit inputs, fp64 for fp32 ones), our kernels, quack 0.6.5, torch eager and
torch.compile, the bytes each launch must move, and the compile jobs that warm every cache in
parallel processes before the timing process starts (`precompile`).

Every candidate is `fn(s) -> tuple of outputs` on an input set `s`; it launches on the current stream,
so a CUDA graph can capture it. Imported by name from the probe's folder (the runner puts it first on
sys.path), and by the precompile workers.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from types import SimpleNamespace
from typing import Callable

OPS = ("rmsnorm", "add_rmsnorm", "layernorm", "softmax")
DTYPES = ("bf16", "fp16", "fp32")
EPS = {"rmsnorm": 1e-6, "add_rmsnorm": 1e-6, "layernorm": 1e-5, "softmax": None}
INPUT_BYTES = 512 * 2**20        # each input tensor of a bandwidth case
RECOMPILE_LIMIT = 1024           # torch.compile specializes on every shape: one compile per case
PRECOMPILE_WORKERS = 16
PRECOMPILE_TIMEOUT_S = 75


def torch_dtype(name: str):
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in table:
        raise ValueError(f"dtype {name!r} unknown; known: {', '.join(table)}")
    return table[name]


def element_bytes(dtype: str) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]


def rows_for(op: str, dtype: str, n: int) -> int:
    """M of a bandwidth case: each input INPUT_BYTES."""
    return INPUT_BYTES // (n * element_bytes(dtype))


def moved_bytes(op: str, m: int, n: int, element: int) -> int:
    """Bytes a launch must move: each row tensor read or written once, each weight or bias read once."""
    rows = {"rmsnorm": 2, "add_rmsnorm": 4, "layernorm": 2, "softmax": 2}[op]
    vectors = {"rmsnorm": 1, "add_rmsnorm": 1, "layernorm": 2, "softmax": 0}[op]
    return (rows * m * n + vectors * n) * element


def make_set(op: str, dtype: str, m: int, n: int, generator, scale: float = 1.0, offset: float = 0.0):
    """Fresh normal inputs (x = offset + scale * randn, residual scale * randn, weight 1 + 0.1 randn,
    bias 0.1 randn) rounded to the dtype, and our outputs (allocated, not poisoned: gate() poisons)."""
    import torch

    t = torch_dtype(dtype)

    def normal(*shape):
        return torch.randn(*shape, device="cuda", generator=generator, dtype=torch.float32)

    s = SimpleNamespace(op=op, x=(offset + scale * normal(m, n)).to(t))
    s.out = torch.empty_like(s.x)
    s.r = (scale * normal(m, n)).to(t) if op == "add_rmsnorm" else None
    s.rout = torch.empty_like(s.x) if op == "add_rmsnorm" else None
    s.w = (1.0 + 0.1 * normal(n)).to(t) if op != "softmax" else None
    s.b = (0.1 * normal(n)).to(t) if op == "layernorm" else None
    if op == "layernorm":   # quack's layernorm takes fp32 weight and bias only
        s.w32, s.b32 = s.w.float(), s.b.float()
    return s


def set_bytes(s) -> int:
    """Bytes one launch reads and writes in its set (the harness rotates sets past the L2 by these)."""
    return moved_bytes(s.op, s.x.shape[0], s.x.shape[1], s.x.element_size())


def reference(s) -> tuple:
    """The op in fp32 (16-bit inputs) or fp64 (fp32 inputs): (out,) or (out, residual_out)."""
    import torch
    import torch.nn.functional as F

    high = torch.float64 if s.x.dtype == torch.float32 else torch.float32
    x = s.x.to(high)
    n = x.shape[1]
    if s.op == "softmax":
        return (torch.softmax(x, dim=-1),)
    if s.op == "layernorm":
        return (F.layer_norm(x, (n,), s.w.to(high), s.b.to(high), EPS["layernorm"]),)
    h = x + s.r.to(high) if s.op == "add_rmsnorm" else x
    out = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + EPS[s.op]) * s.w.to(high)
    return (out, h) if s.op == "add_rmsnorm" else (out,)


def eager_fn(op: str) -> Callable:
    """The op as torch eager computes it at the input precision, on tensors (what torch.compile compiles)."""
    import torch
    import torch.nn.functional as F

    if op == "rmsnorm":
        return lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, EPS[op])
    if op == "add_rmsnorm":
        def add_rmsnorm(x, r, w, b):
            h = x + r
            return F.rms_norm(h, (h.shape[-1],), w, EPS[op]), h
        return add_rmsnorm
    if op == "layernorm":
        return lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS[op])
    return lambda x, r, w, b: torch.softmax(x, dim=-1)


def _tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


_COMPILED: dict = {}


def compiled_fn(op: str) -> Callable:
    """torch.compile of eager_fn (static shapes: one specialization per case, the recompile limit
    raised so that no case falls back to eager), built once per op and process."""
    if op not in _COMPILED:
        import torch

        torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
        torch._dynamo.config.accumulated_recompile_limit = RECOMPILE_LIMIT * 8
        torch._inductor.config.compile_threads = 1   # here and in the workers alike (16 of them share the cores)
        _COMPILED[op] = torch.compile(eager_fn(op), dynamic=False)
    return _COMPILED[op]


def quack_fn(op: str) -> Callable:
    """quack 0.6.5's public forward for the op (tensors in, outputs allocated by quack)."""
    import quack

    if op == "rmsnorm":
        return lambda s: (quack.rmsnorm(s.x, s.w, eps=EPS[op]),)
    if op == "add_rmsnorm":
        return lambda s: tuple(quack.rmsnorm(s.x, s.w, residual=s.r, prenorm=True, eps=EPS[op]))
    if op == "layernorm":
        from quack.rmsnorm import layernorm_fwd

        return lambda s: (layernorm_fwd(s.x, s.w32, s.b32, eps=EPS[op]),)
    return lambda s: (quack.softmax(s.x),)


def ours_fn(op: str, broken: str | None = None, eps: float | None = None) -> Callable:
    """Our kernel for the op, into the set's own outputs; `broken` is a negative control's variant."""
    from artifacts.kernels.rowwise import norm, softmax

    eps = EPS[op] if eps is None else eps
    if op == "rmsnorm":
        return lambda s: (norm.rmsnorm_forward(s.x, s.w, s.out, eps, broken=broken),)
    if op == "add_rmsnorm":
        return lambda s: norm.add_rmsnorm_forward(s.x, s.r, s.w, s.out, s.rout, eps, broken=broken)
    if op == "layernorm":
        return lambda s: (norm.layernorm_forward(s.x, s.w, s.b, s.out, eps, broken=broken),)
    return lambda s: (softmax.softmax_forward(s.x, s.out, broken=broken),)


def candidates(op: str) -> dict[str, Callable]:
    """{name: fn(s)} of everything a case times: ours first, then the baselines."""
    eager, compiled = eager_fn(op), compiled_fn(op)
    return {"ours": ours_fn(op), "quack": quack_fn(op),
            "torch eager": lambda s: _tuple(eager(s.x, s.r, s.w, s.b)),
            "torch.compile": lambda s: _tuple(compiled(s.x, s.r, s.w, s.b))}


def library(s) -> tuple:
    """torch eager at the input precision: the error the gates are derived from."""
    return _tuple(eager_fn(s.op)(s.x, s.r, s.w, s.b))


def plan_text(op: str, dtype: str, m: int, n: int) -> str:
    """Our row plan for the case, short: threads per row, vectors per thread, cluster, rows per CTA."""
    from artifacts.kernels.rowwise import rowwise_common

    plan = rowwise_common.choose_plan(n, element_bytes(dtype) * 8, 2 if op == "add_rmsnorm" else 1,
                                      op != "softmax", m, rowwise_common.sm_count())
    return (f"t{plan.threads_per_row} v{plan.vecs_per_thread} c{plan.cluster_n} r{plan.rows_per_cta} "
            f"cta{plan.cta_threads}")


# --- precompile: every kernel a run needs, compiled in parallel processes, loaded from caches later -------

def precompile_job(job: tuple) -> tuple[str, float]:
    """Compile one configuration (in a worker process) so that the timing process finds it in a cache:
    ours and quack export object files, torch.compile fills the inductor caches. ("ours", op, dtype,
    n, broken, m) | ("quack", op, dtype, n) | ("compile", op, dtype, m, n). Returns (what, seconds)."""
    import torch

    started = time.time()
    kind, op, dtype = job[:3]
    with torch.no_grad():
        if kind == "ours":
            from artifacts.kernels.rowwise import norm, softmax

            from artifacts.kernels.rowwise import rowwise_common

            cute_dtype = _cute_dtype(dtype)
            major, minor = torch.cuda.get_device_capability()
            n, broken, m = job[3], job[4], job[5]
            arch, sms = f"sm_{major}{minor}a", rowwise_common.sm_count()
            if op == "softmax":
                softmax.kernel_for(cute_dtype, n, broken, arch=arch, m=m, sms=sms)
            else:
                norm.kernel_for(op, cute_dtype, n, True, op == "layernorm", broken, arch=arch, m=m, sms=sms)
        elif kind == "quack":
            s = make_set(op, dtype, 1, job[3], torch.Generator(device="cuda").manual_seed(0))
            quack_fn(op)(s)
        else:
            m, n = job[3], job[4]
            s = make_empty_set(op, dtype, m, n)
            compiled_fn(op)(s.x, s.r, s.w, s.b)
        torch.cuda.synchronize()
    return " ".join(str(v) for v in job), time.time() - started


def make_empty_set(op: str, dtype: str, m: int, n: int):
    """Tensors of a case's shapes and dtype, uninitialized (what a compile needs)."""
    import torch

    t = torch_dtype(dtype)
    x = torch.empty(m, n, device="cuda", dtype=t)
    return SimpleNamespace(x=x, r=torch.empty_like(x) if op == "add_rmsnorm" else None,
                           w=torch.empty(n, device="cuda", dtype=t) if op != "softmax" else None,
                           b=torch.empty(n, device="cuda", dtype=t) if op == "layernorm" else None)


def _cute_dtype(dtype: str):
    import cutlass

    return {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}[dtype]


def precompile(jobs: list[tuple], workers: int = PRECOMPILE_WORKERS, timeout_s: float = PRECOMPILE_TIMEOUT_S) -> dict:
    """Run the jobs in `workers` spawned processes (CUDA needs spawn), printing progress; a job that
    fails is reported and left to the timing process (which then compiles it itself). Returns a
    summary for the record: jobs, failures, wall seconds."""
    import multiprocessing

    started = time.time()
    unique = list(dict.fromkeys(jobs))
    failures: list[str] = []
    seconds: dict[str, list[float]] = {}
    print(f"precompile: {len(unique)} kernels in {workers} processes ...", flush=True)
    done = 0
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init)
    futures = {pool.submit(precompile_job, job): job for job in unique}
    try:
        for future in as_completed(futures, timeout=timeout_s):
            done += 1
            try:
                seconds.setdefault(futures[future][0], []).append(future.result()[1])
            except Exception as err:   # noqa: BLE001  (the timing process compiles it, or fails the case)
                failures.append(f"{' '.join(map(str, futures[future]))}: {type(err).__name__}: {str(err)[:200]}")
            if done % 25 == 0 or done == len(unique):
                print(f"precompile: {done}/{len(unique)} ({time.time() - started:.0f} s)", flush=True)
        pool.shutdown(wait=True)
    except TimeoutError:
        failures.append(f"{len(unique) - done} jobs unfinished after {timeout_s:g} s")
        workers_left = list(getattr(pool, "_processes", {}).values())   # this pool's own worker processes
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers_left:
            process.terminate()
    for line in failures[:20]:
        print(f"precompile failed: {line}", flush=True)
    per_kind = {kind: f"{len(t)} x {sum(t) / len(t):.1f} s (max {max(t):.1f})" for kind, t in seconds.items()}
    return {"jobs": len(unique), "failed": len(failures), "wall_s": round(time.time() - started, 1), "workers": workers,
            "seconds_per_job": per_kind}


def _worker_init() -> None:
    """A worker compiles: keep its threads few (16 workers share the machine's cores)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

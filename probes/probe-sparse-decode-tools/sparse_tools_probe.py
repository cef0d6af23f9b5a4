"""probe-sparse-decode-tools: our sm_90a sparse decode and FlashMLA 9241ae3 under Nsight Compute.

One child process - a driver that builds each case's problem in turn (normal inputs, the V3.2 FP8
cache), runs our kernel and FlashMLA on it, checks both outputs against the FP32 reference through
`gates.check`, then runs each once more between cudaProfilerStart/Stop - runs under ncu (clocks left as
they are, `--profile-from-start off`) for all cases and the control together (one compile), and the
probe reads the counters of every kernel the two launched per case: our main kernel (and combine, where
a sequence is split), FlashMLA's main kernel and combine. ncu replays each kernel alone with its
caches flushed, so the two kernels of a decode do not overlap here as they do in a CUDA graph; the
speeds are probe-sparse-decode-sm90's. A case passes when both outputs are correct and ncu reported
both main kernels. The headline is our main kernel's tensor-pipe activity against FlashMLA's.

The negative control is a third problem of the same driver under the same ncu command: one selected
row of our kernel's input read off by one (index + 1 for token 40 of sequence 0): its gate must fail.

Run through the runner: kernelwiki probe run --probe probe-sparse-decode-tools
"""

from __future__ import annotations

import csv
import io
import json
import sys
import tempfile
from pathlib import Path

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import tools
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

DRIVER = """
import json, sys, torch
sys.path[:0] = [{repo_root!r}, {baseline_dir!r}]   # a driver in a temporary folder: the checkout and the probe's helpers
from artifacts.kernels.sparse_decode import reference, sparse_decode_sm90
from kernelwiki.harness import gates, tools
import flashmla_baseline
problems, seed = json.loads(sys.argv[1]), int(sys.argv[2])
results = []
for batch, heads, topk, tokens, corrupt in problems:
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, cache, indices = reference.random_problem(batch, heads, topk, tokens, g)
    ref_o, ref_lse = reference.sparse_decode(q, cache, indices)
    ours_in = indices.clone()
    if corrupt:
        ours_in[0, 40] += 1
    op = sparse_decode_sm90.SparseDecode(q, cache, ours_in)
    gates.poison(op.out)
    op.run()
    torch.cuda.synchronize()
    tol = gates.reference_tolerance(reference.sparse_decode_fp16(q, cache, indices), ref_o, k=2.0)
    result = {{"ours": gates.check(op.out, ref_o, "bf16", **tol), "ours_kernels": 1 + (op.splits > 1)}}
    if corrupt:   # the negative control: checked, not profiled
        results.append(result)
        continue
    why = flashmla_baseline.unavailable() or flashmla_baseline.unsupported(heads, topk, cache.shape[0])
    run = None
    if why is None:
        run = flashmla_baseline.decoder(q, cache, indices)
        out, _ = run()
        torch.cuda.synchronize()
        bf16 = gates.reference_tolerance(reference.sparse_decode_bf16(q, cache, indices), ref_o, k=2.0)
        result["FlashMLA"] = gates.check(out, ref_o, "bf16", **bf16)
    else:
        result["FlashMLA"] = {{"passed": False, "reason": why}}
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    op.run()
    if run is not None:
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    results.append(result)
    del q, cache, indices, ref_o, ref_lse, op, run
    torch.cuda.empty_cache()
print(tools.driver_line({{"passed": True, "problems": results}}))
"""
COUNTERS = {   # short name in the record -> ncu metric
    "duration_us": "gpu__time_duration.sum",
    "grid": "launch__grid_size",
    "block": "launch__block_size",
    "registers": "launch__registers_per_thread",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "smem_wavefronts_pct": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
    "smem_store_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "warps_active_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
STALLS = ("long_scoreboard", "barrier", "wait", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "membar",
          "dispatch_stall", "not_selected", "lg_throttle", "sleeping")
KERNELS = {   # record prefix -> a substring of the kernel's name
    "ours main": "SparseDecodeSm90", "ours combine": "SparseDecodeCombine",
    "FlashMLA main": "flash_fwd_splitkv_mla_fp8_sparse", "FlashMLA combine": "flash_fwd_mla_combine",
}
NCU_TIMEOUT_S = 38


def metric_names() -> list[str]:
    return [*COUNTERS.values(), *(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS)]


def parse_raw(text: str) -> list[dict[str, float | None]]:
    """Each profiled kernel's counters (short names, plus its `name`), in launch order, from
    `ncu --import ... --csv --page raw`."""
    rows = list(csv.reader(io.StringIO(text[text.find('"ID"'):] if '"ID"' in text else "")))
    out: list[dict] = []
    if len(rows) < 3:
        return out
    header = rows[0]
    for row in rows[2:]:
        entry = dict(zip(header, row))
        values: dict = {"name": entry.get("Kernel Name", "")}
        for short, metric in [*COUNTERS.items(), *((f"stall_{s}", f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio")
                                                   for s in STALLS)]:
            try:
                values[short] = round(float(entry[metric].replace(",", "")), 4)
            except (KeyError, ValueError):
                values[short] = None
        out.append(values)
    return out


def assign(kernels: list[dict], verdicts: list[dict]) -> list[dict[str, dict]]:
    """Split the launch-ordered kernels over the profiled problems (ours first: 1 or 2 kernels as the
    driver says, then FlashMLA's main kernel and combine), by kernel name."""
    out, at = [], 0
    for verdict in verdicts:
        if "FlashMLA" not in verdict:      # the control: not profiled
            out.append({})
            continue
        found: dict[str, dict] = {}
        count = verdict.get("ours_kernels", 1) + (0 if "reason" in verdict["FlashMLA"] else 2)   # FlashMLA ran
        for values in kernels[at:at + count]:
            prefix = next((p for p, part in KERNELS.items() if part in values["name"]), None)
            if prefix and prefix not in found:
                found[prefix] = {k: v for k, v in values.items() if k != "name"}
        at += count
        out.append(found)
    return out


PROBLEMS = {   # case id (or the control) -> (batch, heads, topk, tokens per sequence, corrupt)
    "ncu-b128-h128": (128, 128, 2048, 8192, 0),
    "ncu-b1-h128": (1, 128, 2048, 65536, 0),
    "control": (4, 128, 2048, 16384, 1),
}
_RUN: dict = {}


def profile_all(seed: int) -> dict:
    """One driver process under ncu for every case and the control (one compile, one CUDA context):
    {name: (counters per kernel, the driver's verdict for it)}, plus "_tail" (ncu's output)."""
    if _RUN:
        return _RUN
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER.format(repo_root=str(REPO_ROOT),
                                        baseline_dir=str(REPO_ROOT / "probes" / "probe-sparse-decode-sm90")))
        report = Path(tmp) / "report"
        command = [sys.executable, "-W", "ignore", str(driver), json.dumps(list(PROBLEMS.values())), str(seed)]
        # --clock-control none: the GPU's clocks are left as they are (ncu would lock them to base)
        output = tools.run(["ncu", "--clock-control", "none", "--profile-from-start", "off", "--metrics",
                            ",".join(metric_names()), "-f", "-o", str(report), *command], timeout=NCU_TIMEOUT_S)
        raw = tools.run(["ncu", "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"], timeout=60) \
            if Path(f"{report}.ncu-rep").exists() else ""
    verdict = tools.driver_result(output)
    verdicts = (verdict.get("gate") or {}).get("problems") or [{} for _ in PROBLEMS]
    counters = assign(parse_raw(raw), verdicts) if len(verdicts) == len(PROBLEMS) else [{} for _ in PROBLEMS]
    _RUN.update({name: (c, {**v, "driver_ran": verdict.get("driver_ran", False)})
                 for name, c, v in zip(PROBLEMS, counters, verdicts)})
    _RUN["_tail"] = output[-tools.TAIL_CHARS:]
    return _RUN


def _flat(counters: dict) -> dict:
    return {f"{kernel}: {name}": value for kernel, values in counters.items() for name, value in values.items()}


def run_case(case: dict, ctx: Context) -> dict:
    run = profile_all(ctx.seed)
    counters, verdict = run.get(case["id"], ({}, {}))
    ours, theirs = counters.get("ours main", {}), counters.get("FlashMLA main", {})
    profiled = ours.get("tensor_pipe_pct") is not None
    flash_ok = bool(verdict.get("FlashMLA", {}).get("passed")) and theirs.get("tensor_pipe_pct") is not None
    correctness = {**verdict, "passed": bool(verdict.get("ours", {}).get("passed")) and profiled and flash_ok}
    if not correctness["passed"]:
        correctness["tail"] = run["_tail"]
    totals = {f"{who} total duration_us": round(sum(v.get("duration_us") or 0.0 for k, v in counters.items()
                                                    if k.startswith(who)), 3) for who in ("ours", "FlashMLA")}
    notes = {} if flash_ok else {"FlashMLA": {"failed": verdict.get("FlashMLA", {}).get("reason") or "not profiled"}}
    return {"correctness": correctness, "metrics": {**_flat(counters), **totals},
            **ctx.headline_against(case["metric"], ours.get("tensor_pipe_pct") or 0.0, "% of active cycles",
                                   {"FlashMLA": theirs.get("tensor_pipe_pct")}, correct={"FlashMLA": flash_ok},
                                   notes=notes)}


def negative_control(ctx: Context) -> dict:
    """Our kernel's input with one row off by one (b4 h128), in the same driver under the same ncu
    command: its gate must fail."""
    run = profile_all(ctx.seed)
    _, verdict = run["control"]
    ours = verdict.get("ours", {})
    result = {"passed": bool(ours.get("passed", True)), "ours": ours,
              "bug": "index + 1 for token 40 of sequence 0 (our kernel's input only)"}
    if not verdict.get("driver_ran"):
        result.update(passed=True, reason="the driver did not run: a control that never ran cannot fail", tail=run["_tail"])
    return result


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Compile-only: the kernel this probe profiles (128 heads, one CTA per head block: the default)."""
    from artifacts.kernels.sparse_decode import sparse_decode_sm90

    return compile_mod.from_cute(sparse_decode_sm90.compile_for(arch, heads=128), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

"""probe-sparse-decode-tools: our sm_90a sparse decode and FlashMLA 9241ae3 under Nsight Compute.

Each case starts one child process - a driver that builds one problem (normal inputs, the V3.2 FP8
cache), runs our kernel and FlashMLA on it, checks both outputs against the FP32 reference through
`gates.check`, then runs each once more between cudaProfilerStart/Stop - under ncu (clocks left as
they are, `--profile-from-start off`), and reads the counters of every kernel the two launched: our
main kernel and combine, FlashMLA's main kernel and combine. ncu replays each kernel alone with its
caches flushed, so the two kernels of a decode do not overlap here as they do in a CUDA graph; the
speeds are probe-sparse-decode-sm90's. A case passes when both outputs are correct and ncu reported
both main kernels. The headline is our main kernel's tensor-pipe activity against FlashMLA's.

The negative control runs the same driver under the same ncu command with one selected row of our
kernel's input read off by one (index + 1 for token 40 of sequence 0): its output gate must fail.

Run through the runner: kernelwiki probe run --probe probe-sparse-decode-tools
"""

from __future__ import annotations

import csv
import io
import sys
import tempfile
from pathlib import Path

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import tools
from kernelwiki.harness.probe import REPO_ROOT, Context, Probe

DRIVER = """
import sys, torch
sys.path[:0] = [{repo_root!r}, {baseline_dir!r}]   # a driver in a temporary folder: the checkout and the probe's helpers
from artifacts.kernels.sparse_decode import reference, sparse_decode_sm90
from kernelwiki.harness import gates, tools
import flashmla_baseline
batch, heads, topk, tokens, seed, corrupt = (int(x) for x in sys.argv[1:7])
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
result = {{"ours": gates.check(op.out, ref_o, "bf16", **tol)}}
why = flashmla_baseline.unavailable() or flashmla_baseline.unsupported(heads, topk, cache.shape[0])
if why is None:
    run = flashmla_baseline.decoder(q, cache, indices)
    out, _ = run()
    torch.cuda.synchronize()
    bf16 = gates.reference_tolerance(reference.sparse_decode_bf16(q, cache, indices), ref_o, k=2.0)
    result["FlashMLA"] = gates.check(out, ref_o, "bf16", **bf16)
else:
    run = None
    result["FlashMLA"] = {{"passed": False, "reason": why}}
result["passed"] = result["ours"]["passed"] and result["FlashMLA"]["passed"]
torch.cuda.synchronize()
torch.cuda.profiler.start()
op.run()
if run is not None:
    run()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print(tools.driver_line(result))
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
NCU_TIMEOUT_S = 240


def metric_names() -> list[str]:
    return [*COUNTERS.values(), *(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS)]


def parse_raw(text: str) -> dict[str, dict[str, float | None]]:
    """{kernel prefix: {short name: value}} from `ncu --import ... --csv --page raw` (first launch of each)."""
    rows = list(csv.reader(io.StringIO(text[text.find('"ID"'):] if '"ID"' in text else "")))
    out: dict[str, dict[str, float | None]] = {}
    if len(rows) < 3:
        return out
    header = rows[0]
    for row in rows[2:]:
        entry = dict(zip(header, row))
        name = entry.get("Kernel Name", "")
        prefix = next((p for p, part in KERNELS.items() if part in name), None)
        if prefix is None or prefix in out:
            continue
        values: dict[str, float | None] = {}
        for short, metric in [*COUNTERS.items(), *((f"stall_{s}", f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio")
                                                   for s in STALLS)]:
            try:
                values[short] = round(float(entry[metric].replace(",", "")), 4)
            except (KeyError, ValueError):
                values[short] = None
        out[prefix] = values
    return out


def profile(params: dict, seed: int, corrupt: bool) -> tuple[dict, dict, str]:
    """(counters per kernel, the driver's verdict, ncu's output tail) for one driver run under ncu."""
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER.format(repo_root=str(REPO_ROOT),
                                        baseline_dir=str(REPO_ROOT / "probes" / "probe-sparse-decode-sm90")))
        report = Path(tmp) / "report"
        command = [sys.executable, "-W", "ignore", str(driver), str(params["batch"]), str(params["heads"]),
                   str(params["topk"]), str(params["cache_tokens_per_seq"]), str(seed), str(int(corrupt))]
        # --clock-control none: the GPU's clocks are left as they are (ncu would lock them to base)
        output = tools.run(["ncu", "--clock-control", "none", "--profile-from-start", "off", "--metrics",
                            ",".join(metric_names()), "-f", "-o", str(report), *command], timeout=NCU_TIMEOUT_S)
        raw = tools.run(["ncu", "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"], timeout=120) \
            if Path(f"{report}.ncu-rep").exists() else ""
    return parse_raw(raw), tools.driver_result(output), output[-tools.TAIL_CHARS:]


def _flat(counters: dict) -> dict:
    return {f"{kernel}: {name}": value for kernel, values in counters.items() for name, value in values.items()}


def run_case(case: dict, ctx: Context) -> dict:
    params = case["params"]
    counters, verdict, tail = profile(params, ctx.seed, corrupt=False)
    gate = verdict.get("gate", {})
    ours, theirs = counters.get("ours main", {}), counters.get("FlashMLA main", {})
    profiled = ours.get("tensor_pipe_pct") is not None
    flash_ok = bool(gate.get("FlashMLA", {}).get("passed")) and theirs.get("tensor_pipe_pct") is not None
    correctness = {**verdict, "passed": bool(gate.get("ours", {}).get("passed")) and profiled and flash_ok}
    if not correctness["passed"]:
        correctness["tail"] = tail
    totals = {f"{who} total duration_us": round(sum(v.get("duration_us") or 0.0 for k, v in counters.items()
                                                    if k.startswith(who)), 3) for who in ("ours", "FlashMLA")}
    notes = {} if flash_ok else {"FlashMLA": {"failed": gate.get("FlashMLA", {}).get("reason") or "not profiled"}}
    return {"correctness": correctness, "metrics": {**_flat(counters), **totals},
            **ctx.headline_against(case["metric"], ours.get("tensor_pipe_pct") or 0.0, "% of active cycles",
                                   {"FlashMLA": theirs.get("tensor_pipe_pct")}, correct={"FlashMLA": flash_ok},
                                   notes=notes)}


def negative_control(ctx: Context) -> dict:
    """Our kernel's input with one row off by one, under the same ncu command: its gate must fail."""
    params = {"batch": 4, "heads": 128, "topk": 2048, "cache_tokens_per_seq": 16384}
    counters, verdict, tail = profile(params, ctx.seed + 1, corrupt=True)
    ours = verdict.get("gate", {}).get("ours", {})
    result = {"passed": bool(ours.get("passed", True)), "ours": ours, "profiled": sorted(counters),
              "bug": "index + 1 for token 40 of sequence 0 (our kernel's input only)"}
    if not verdict.get("driver_ran"):
        result.update(passed=True, reason="the driver did not run: a control that never ran cannot fail", tail=tail)
    return result


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Compile-only: the kernel this probe profiles (128 heads, one CTA per head block: the default)."""
    from artifacts.kernels.sparse_decode import sparse_decode_sm90

    return compile_mod.from_cute(sparse_decode_sm90.compile_for(arch, heads=128), arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)

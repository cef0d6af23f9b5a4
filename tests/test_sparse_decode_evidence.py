"""probe-sparse-decode-sm90's evidence on the CPU: the O gate tells an fp16 P.V from a bf16 one, the
one-pass control's six wrong rows land within 1.5-10x of it, and FlashMLA is skipped with a reason where it cannot run."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from conftest import load_probe_script
from kernelwiki.harness import gates

pytest.importorskip("cutlass")   # the probe script imports our kernel module

H, T, D, DV = 64, 2048, 576, 512


def _probe():
    return load_probe_script("probe-sparse-decode-sm90", "sparse_decode_probe")


def _bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32).astype(np.float64)


def _fp16(x):
    return np.asarray(x, np.float16).astype(np.float64)


def _attention(q, kv):
    s = q @ kv.T / D ** 0.5
    p = np.exp(s - s.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def _online_fp16(q, kv, block=64):
    """Our kernel's arithmetic: online softmax over 64-token tiles, P = exp(s - running max) in fp16."""
    s = q @ kv.T / D ** 0.5
    m, l, acc = np.full(H, -np.inf), np.zeros(H), np.zeros((H, DV))
    for t0 in range(0, T, block):
        sb = s[:, t0:t0 + block]
        new = np.maximum(m, sb.max(1))
        c, pb = np.exp(m - new), np.exp(sb - new[:, None])
        l, acc, m = l * c + pb.sum(1), acc * c[:, None] + _fp16(pb) @ kv[t0:t0 + block, :DV], new
    return _bf16(acc / l[:, None])


def test_the_rounded_gate_passes_an_fp16_kernel_and_fails_a_bf16_one():
    """A NumPy model of the three computations (values exact in bf16 and fp16, as the dequantized cache
    is): against the bf16-rounded exact O, the fp16 computation and our online-softmax kernel sit near
    each other and a bf16 P.V about three times as far, so ROUNDED_FACTOR x the fp16 error separates them."""
    probe = _probe()
    rng = np.random.default_rng(0)
    q, kv = _bf16(rng.standard_normal((H, D))), _bf16(rng.standard_normal((T, D)))
    p = _attention(q, kv)
    exact = p @ kv[:, :DV]
    rounded = _bf16(exact)
    tol = probe.ROUNDED_FACTOR * gates.relative_error(_bf16(_fp16(p) @ kv[:, :DV]), rounded)
    ours = gates.check(_online_fp16(q, kv), rounded, "bf16", tol=tol)
    bf16 = gates.check(_bf16(_bf16(p) @ kv[:, :DV]), rounded, "bf16", tol=tol)
    assert ours["passed"] and not bf16["passed"]
    assert 1 < gates.error_over_gate(bf16) < gates.CONTROL_BLUNT_FACTOR


def _wrong_rows_error(rng, tokens: int) -> float:
    """Relative error of one sequence's O when its first `tokens` rows are read from the next row."""
    q, kv = rng.standard_normal((H, D)), rng.standard_normal((T + tokens, D))
    o = _attention(q, kv[:T]) @ kv[:T, :DV]
    wrong = kv[:T].copy()
    wrong[:tokens] = kv[T:]   # a selected token's neighbouring row is an unrelated row of the cache
    return gates.relative_error(_attention(q, wrong) @ wrong[:, :DV], o)


# Record 20261202T094344Z-h200-run (H200), control one-pass-one-row with one token: O's relative error
# and its gate, and the kernel's own error on a correct run of the same computation.
ONE_TOKEN_REL, O_GATE, KERNEL_REL = 0.00382105, 0.00332734, 0.00166367


def test_six_wrong_rows_put_the_one_pass_control_between_1_5_and_10_times_the_o_gate():
    """One wrong row moved O's relative error to only 1.15x its gate on the H200 (control-too-blunt).
    In the NumPy model the error of k wrong rows grows as sqrt(k); applied to the recorded one-row
    error, the probe's six rows land inside the reach rule's 1.5-10x."""
    probe = _probe()
    rng = np.random.default_rng(1)
    one = np.mean([_wrong_rows_error(rng, 1) for _ in range(8)])
    six = np.mean([_wrong_rows_error(rng, 6) for _ in range(8)])
    assert 0.75 * 6 ** 0.5 < six / one < 1.25 * 6 ** 0.5
    bug_one = (ONE_TOKEN_REL ** 2 - KERNEL_REL ** 2) ** 0.5
    for tokens, low, high in ((1, 1, 1.5), (6, 1.5, gates.CONTROL_BLUNT_FACTOR)):
        predicted = (KERNEL_REL ** 2 + (six / one) ** 2 * bug_one ** 2 * tokens / 6) ** 0.5 / O_GATE
        assert low < predicted < high, (tokens, predicted)
    assert "tokens=6" in inspect.getsource(probe.control_one_pass)


def test_flashmla_is_skipped_with_the_reason_where_it_cannot_run():
    probe = _probe()
    assert "supports 64 or 128 query heads, not 16" in probe.flashmla.unsupported(16, 2048, 65536)
    assert probe.flashmla.unsupported(64, 2048, 65536) is None
    assert probe.flashmla.unsupported(128, 64, 65536) is None
    assert "positive multiple of 64" in probe.flashmla.unsupported(128, 32, 65536)
    assert "not whole pages" in probe.flashmla.unsupported(128, 2048, 1000)
    reason = probe.flashmla_skip_reason(64, 2048, 65536)
    assert reason is None or "not importable" in reason     # no flash_mla on the CPU machine


@pytest.mark.parametrize("child, expected", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "crashed: killed by SIGSEGV (b1 h16 topk2048 in a child process)"),
    ("import sys; print('Assertion failed'); sys.exit(3)", "failed: exit status 3 (b1 h16 topk2048 in a child process): Assertion failed"),
], ids=["signal", "exit-status"])
def test_a_flashmla_crash_is_recorded_with_how_the_child_ended(monkeypatch, child, expected):
    """FlashMLA kills the process at 16 heads: the probe runs it in a child and keeps the signal (or
    exit status and last words) as the failed baseline's reason."""
    probe = _probe()
    monkeypatch.setattr(probe.flashmla, "CHILD", child)
    assert expected in probe.flashmla.crash_reason(1, 16, 2048)


def test_every_control_is_described_in_probe_yaml():
    from kernelwiki.model import yamlio
    from conftest import ROOT

    spec, _ = yamlio.load((ROOT / "probes/probe-sparse-decode-sm90/probe.yaml").read_text())
    assert set(_probe().NEGATIVE_CONTROLS) == set(spec["negative_control"])


def test_the_tools_probe_splits_one_ncu_session_over_its_cases():
    """probe-sparse-decode-tools profiles every case in one driver under ncu: the launch-ordered kernels
    are handed back per case (ours: one kernel, or two with the combine; FlashMLA: main and combine),
    and the control's problem is not profiled."""
    tools_probe = load_probe_script("probe-sparse-decode-tools", "sparse_tools_probe")
    compile(tools_probe.DRIVER.format(repo_root="/r", baseline_dir="/b"), "driver.py", "exec")   # valid Python
    header = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","us"\n'
    names = ["SparseDecodeSm90_x", "flash_fwd_splitkv_mla_fp8_sparse_kernel<>", "flash_fwd_mla_combine_kernel<>",
             "SparseDecodeSm90_y", "SparseDecodeCombine_y", "flash_fwd_splitkv_mla_fp8_sparse_kernel<>",
             "flash_fwd_mla_combine_kernel<>"]
    raw = header + "".join(f'"{i}","{n}","{i + 1}.5"\n' for i, n in enumerate(names))
    kernels = tools_probe.parse_raw("==PROF== noise\n" + raw)
    verdicts = [{"ours_kernels": 1, "FlashMLA": {"passed": True}}, {"ours_kernels": 2, "FlashMLA": {"passed": False}},
                {"ours_kernels": 1}]
    first, second, control = tools_probe.assign(kernels, verdicts)
    assert first["ours main"]["duration_us"] == 1.5 and first["FlashMLA combine"]["duration_us"] == 3.5
    assert second["ours combine"]["duration_us"] == 5.5 and second["FlashMLA main"]["duration_us"] == 6.5
    assert control == {} and set(tools_probe.PROBLEMS) == {"ncu-b128-h128", "ncu-b1-h128", "control"}

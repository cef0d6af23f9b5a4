"""The driver probe-l2-cache's `sources-*` cases run under Nsight Compute: one working set read by
l2_read three times (the checked launch, a warm-up, then the launch ncu profiles with
`--launch-skip 2 --launch-count 1`), the checksum gate's verdict printed as a DRIVER_RESULT line.

    python ncu_driver.py WORKING_SET_MIB SEED
"""

from __future__ import annotations

import sys

import torch

import l2_cache_probe as probe   # this directory is the script's, first on sys.path
from kernelwiki.harness import tools


def main(mib: int, seed: int) -> None:
    buf = probe.working_set(mib * probe.MIB, torch.Generator(device="cuda").manual_seed(seed))
    per_thread = probe.l2_cache.per_thread_for(probe.SWEEP_READ_BYTES, probe.l2_cache.read_threads(probe._sms()))
    correctness = probe.checked_read(buf, per_thread)
    checksum = torch.zeros(1, dtype=torch.int32, device="cuda")
    for _ in range(2):
        probe._kernels().read(buf, per_thread, checksum, sms=probe._sms(), stream=probe._stream())
    torch.cuda.synchronize()
    print(tools.driver_line(correctness), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

"""probe-footgun-compile-target: what CuTe DSL targets when it cannot see a GPU.

Compile-only: the kernel is compiled in a child process with CUDA_VISIBLE_DEVICES="" (so that the
DSL's GPU query fails even on a GPU machine), once with --gpu-arch ARCH and once without; the
.target line of each PTX is recorded as a fact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kernelwiki.harness.compile import Emitted
from kernelwiki.harness.probe import REPO_ROOT, Probe

CHILD = r"""
import json, re, sys
from artifacts.kernels.tma_copy import tma_copy
from kernelwiki.harness.compile import from_cute
arch = sys.argv[1] or None
ptx = from_cute(tma_copy.compile_for(arch), arch or "default").ptx
print(json.dumps(re.findall(r"^\.target\s+(\S+)", ptx, re.M)))
"""


def target(arch: str | None) -> str:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", CHILD, arch or ""], cwd=REPO_ROOT,
                            capture_output=True, text=True, env=env, timeout=240)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])[0]


def compile_kernel(arch: str) -> Emitted:
    explicit, default = target(arch), target(None)
    return Emitted(arch, ptx=f".target {explicit}\n", facts=[f"explicit-target:{explicit}", f"default-target:{default}"])


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)

"""A dynamic persistent tile loop with cluster launch control (CLC) on Blackwell (sm_100a).

What it does
    y[i] = alpha * x[i] over `tiles` tiles of 128 fp32 values, and owner[t] = the blockIdx.x of the
    CTA that processed tile t. The grid has one CTA per tile, as a non-persistent kernel would, but
    each CTA, before working on its tile, asks the hardware to cancel the launch of a CTA that has
    not started yet (clusterlaunchcontrol.try_cancel, completed on an mbarrier with a 16-byte
    transaction). When the request succeeds the response names the cancelled CTA's first ctaid and
    this CTA processes that tile next; when it fails there is nothing left to take and the CTA exits.
    So CTAs become persistent only while the GPU is full, and a CTA that finishes early takes more
    tiles - no tile counter in global memory, no grid sized to the SM count.

Why it exists
    The compile probe for hw-cluster-launch-control: try_cancel and the query_cancel decodes must be
    in the PTX for sm_100a. On a B200 the owner array shows which tiles were taken over (every tile
    exactly once) and y checks the work.

The request for the next tile is issued before the current tile's work so its latency hides behind
it; the response buffer is reused only after every thread has read it (a CTA barrier, then a proxy
fence, since the next response is written by the async proxy).

Compile only: python -m artifacts.kernels.clc_scheduler.clc_scale --arch sm_100a
"""

from __future__ import annotations

import argparse
import os
import tempfile

import cutlass
import cutlass.cute as cute

THREADS = 128                    # one fp32 value per thread per tile
RESPONSE_BYTES = 16              # the opaque 128-bit try_cancel response

DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


class ClcScale:
    """y = alpha * x, tile by tile, with CTAs that steal the tiles of not-yet-launched CTAs."""

    def __init__(self, alpha: float = 2.0):
        self.alpha = alpha

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, y_ptr: cute.Pointer, owner_ptr: cute.Pointer,
                 tiles: cutlass.Constexpr, stream):
        mX = cute.make_tensor(x_ptr, cute.make_layout(tiles * THREADS))
        mY = cute.make_tensor(y_ptr, cute.make_layout(tiles * THREADS))
        mOwner = cute.make_tensor(owner_ptr, cute.make_layout(tiles))

        @cute.struct
        class SharedStorage:
            response_barrier: cute.struct.MemRange[cutlass.Int64, 1]
            response: cute.struct.Align[cute.struct.MemRange[cutlass.Int32, 4], RESPONSE_BYTES]

        self.shared_storage = SharedStorage
        self.kernel(mX, mY, mOwner).launch(grid=[tiles, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mOwner: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        barrier = storage.response_barrier.data_ptr()
        response = storage.response.data_ptr()
        if tidx == 0:
            cute.arch.mbarrier_init(barrier, 1)
            cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        tile = cutlass.Int32(bidx)
        phase = cutlass.Int32(0)
        more = cutlass.Int32(1)
        while more != 0:
            if tidx == 0:  # ask for the next tile now; the answer lands while this one is computed
                cute.arch.mbarrier_arrive_and_expect_tx(barrier, RESPONSE_BYTES)
                cute.arch.issue_clc_query(barrier, response, multicast=False)
            i = tile * THREADS + tidx
            mY[i] = mX[i] * self.alpha
            if tidx == 0:
                mOwner[tile] = bidx
            cute.arch.mbarrier_wait(barrier, phase)
            phase = phase ^ 1
            next_x, _, _, more = cute.arch.clc_response(response)
            tile = next_x
            cute.arch.sync_threads()  # every thread has read the response before it is overwritten
            cute.arch.fence_proxy("async.shared", space="cta")


def compile_for(arch: str = "sm_100a", tiles: int = 1024):
    """Compile with placeholder pointers (no GPU needed), keeping PTX and cubin."""
    from cutlass.cute.runtime import make_ptr
    from cutlass.cute.typing import AddressSpace
    from cutlass.runtime import make_fake_stream

    ptr = lambda dtype: make_ptr(dtype, 0, AddressSpace.gmem, assumed_align=16)  # noqa: E731
    return cute.compile(ClcScale(), ptr(cutlass.Float32), ptr(cutlass.Float32), ptr(cutlass.Int32), tiles,
                        make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_100a")
    compile_for(parser.parse_args().arch)
    print("compiled")

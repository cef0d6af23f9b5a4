"""Arrive counts of the Hopper GEMMs' barriers, recomputed from what the kernel does and checked at compile time.

An mbarrier completes a phase after a fixed number of arrivals (and, for a TMA barrier, a fixed number of
transaction bytes) set when it is initialised; a named barrier (bar.sync) after a fixed number of
threads. A count above what the kernel delivers hangs the barrier; one below it releases a stage early
and races, often only in the one configuration that got it wrong (wiki: footgun-pipelineumma-consumer-threads,
footgun-mbarrier-tx-mismatch). So the count a kernel passes is compared, while it is traced, with the
count the protocol implies from kernel facts (warps per role, CTAs the multicast reaches, elected or
all-thread arrivals, the bytes each TMA box writes), and a mismatch stops the compile with a message
that names the barrier, both counts and the facts.

The rules, as CuTe DSL 4.8.1's PipelineTmaAsync and the PTX barriers implement them:
- TMA producer (`producer_acquire`): one `mbarrier.arrive.expect_tx` under elect_one per issuing warp;
  never scaled by the cluster: the CTAs a multicast reaches are credited with bytes, not arrivals.
- PipelineTmaAsync consumer (`consumer_release`): in every consumer warp one lane per destination CTA
  arrives, on the barrier of each CTA whose loads filled the stage: this CTA and the CTAs that multicast
  A or B to it (cluster_m + cluster_n - 1 in a 2-D cluster), so one arrival per consumer warp per such CTA.
- Transaction bytes: the bytes of every TMA box that lands in one stage of this CTA's shared memory,
  the multicast ones included (a CTA receives whole A and B tiles whichever CTA issued them).
- Named barriers: every thread that executes bar.sync / bar.arrive on the id counts.
- Ping-pong order barriers (one named barrier per consumer warpgroup): the owner waits with bar.sync
  and every other warpgroup of the rotation signals it with bar.arrive, so each counts the threads of
  all the warpgroups taking turns.
"""

from __future__ import annotations

WARP_THREADS = 32


class ArriveCountError(ValueError):
    """The count passed to a barrier contradicts the kernel facts (raised while the kernel is traced)."""


def tma_producer_arrivals(tma_warps: int) -> int:
    """Arrivals per phase of a full barrier: one elected arrive-and-expect-tx per TMA-issuing warp."""
    return _static(tma_warps, "tma_warps")


def multicast_sources(multicast_a: int, multicast_b: int) -> int:
    """CTAs whose loads fill one stage of this CTA (itself counted once): the CTAs sharing A (a row of
    the cluster, `multicast_a` of them) and those sharing B (`multicast_b`)."""
    return _static(multicast_a, "multicast_a") + _static(multicast_b, "multicast_b") - 1


def warp_release_arrivals(consumer_threads: int, source_ctas: int) -> int:
    """Arrivals per phase of an empty barrier: one per consumer warp from each CTA that reads the stage."""
    threads = _static(consumer_threads, "consumer_threads")
    if threads % WARP_THREADS:
        raise ArriveCountError(f"consumer_threads={threads}: consumers release per warp, so whole warps "
                               f"({WARP_THREADS} threads) must consume")
    return threads // WARP_THREADS * _static(source_ctas, "source_ctas")


def ordered_barrier_threads(warpgroup_threads: int, warpgroups: int) -> int:
    """Threads per phase of one ping-pong order barrier: the waiting warpgroup's and the signalling ones'."""
    threads, groups = _static(warpgroup_threads, "warpgroup_threads"), _static(warpgroups, "warpgroups")
    if groups < 2:
        raise ArriveCountError(f"warpgroups={groups}: an order barrier needs at least two warpgroups taking turns")
    return threads * groups


def stage_transaction_bytes(*boxes: tuple[int, int]) -> int:
    """Transaction bytes of one stage: `boxes` are (elements, bits per element) of each TMA box written
    into the stage."""
    return sum(_static(elements, "elements") * _static(bits, "bits") // 8 for elements, bits in boxes)


def check(barrier: str, given, expected: int, **facts) -> None:
    """Raise ArriveCountError unless `given` (what the kernel passes) equals `expected` (from `facts`)."""
    given = _static(given, f"{barrier}: given count")
    if given != expected:
        spelled = ", ".join(f"{name}={value}" for name, value in facts.items())
        raise ArriveCountError(f"{barrier}: the kernel passes {given} but the kernel facts give {expected} "
                               f"({spelled}); too high hangs the barrier, too low releases the stage early")


def _static(value, name: str) -> int:
    """A compile-time count as an int: every count of these kernels is known when the kernel is traced,
    so a run-time value here means the count can no longer be checked, which is itself an error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArriveCountError(f"{name}: {value!r} is not a compile-time integer; the count cannot be checked")
    return value

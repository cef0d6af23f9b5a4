"""timing.bench, the one timing protocol, on a fake device (no GPU): how many input sets, which
method a candidate gets, how the sets rotate through a graph, the floors, the record's protocol."""

from __future__ import annotations

import pytest

from kernelwiki.harness import timing

MiB = 2**20


class FakeDevice:
    """A GPU whose launches add their cost to a clock; a graph replays what it captured."""

    def __init__(self, l2_bytes: int = 60 * MiB, free_bytes: int = 100 * 2**30, empty_ms: float = 0.002):
        self.l2_bytes, self.free, self.empty_ms = l2_bytes, free_bytes, empty_ms
        self.floors: dict[str, float] = {}
        self.gpu_ms = 0.0
        self.flushed_launches: list[bool] = []

    def spend(self, ms: float) -> None:
        self.gpu_ms += ms

    def free_bytes(self) -> int:
        return self.free

    def synchronize(self) -> None:
        pass

    def graph(self, launch, error_mode="global"):
        self.error_modes = [*getattr(self, "error_modes", []), error_mode]
        launch()          # cuda_graph runs the work once before capturing it
        return launch

    def elapsed_ms(self, launch, flush: bool) -> float:
        self.flushed_launches.append(flush)
        before = self.gpu_ms
        launch()
        return self.gpu_ms - before

    def empty_launch(self):
        return lambda: self.spend(self.empty_ms)

    def read_clock(self) -> float:
        return 1980.0


def kernel(device: FakeDevice, ms: float, used: list | None = None):
    def fn(inputs) -> None:
        device.spend(ms)
        if used is not None:
            used.append(inputs)
    return fn


def test_a_short_candidate_cycles_through_sets_spanning_three_l2s_in_one_graph():
    device, built, used = FakeDevice(), [], []

    def make_inputs(i: int) -> int:
        built.append(i)
        return i

    result = timing.bench({"tiny": kernel(device, 0.01, used)}, make_inputs, 10 * MiB, iters=4, warmup=2,
                          device=device)["tiny"]
    assert built == list(range(18))                          # ceil(3 x 60 MiB / 10 MiB)
    protocol = result["protocol"]
    assert protocol["method"] == "short" and protocol["input_sets"] == 18 and protocol["l2_rotation"] == 3.0
    assert protocol["launches"] == 18 * 12                   # whole passes, about GRAPH_TARGET_MS
    assert used[-protocol["launches"]:] == list(range(18)) * 12   # the last replay: every set in turn
    assert result["median_ms"] == pytest.approx(0.01)        # per launch, not per replay
    assert protocol["below_floor"] is False and protocol["floor_ms"] == pytest.approx(0.002)


def test_a_long_candidate_replays_one_launch_after_a_read_sweep_and_builds_one_set():
    device, built = FakeDevice(), []
    result = timing.bench({"gemm": kernel(device, 0.4)}, lambda i: built.append(i), 10 * MiB, iters=5,
                          device=device)["gemm"]
    assert built == [0]
    assert result["protocol"]["method"] == "long" and result["protocol"]["launches"] == 1
    assert result["protocol"]["l2_rotation"] is None
    assert result["median_ms"] == pytest.approx(0.4)
    # eager samples unflushed, then the warm replay, then 5 flushed rounds (and the long floor's)
    assert device.flushed_launches[:timing.EAGER_SAMPLES] == [False] * timing.EAGER_SAMPLES
    assert device.flushed_launches[timing.EAGER_SAMPLES:timing.EAGER_SAMPLES + 5] == [True] * 5


def test_one_method_for_every_candidate_of_a_case_set_by_the_fastest():
    device, used_long = FakeDevice(), []
    results = timing.bench({"short": kernel(device, 0.02), "long": kernel(device, 0.2, used_long)},
                           lambda i: i, 30 * MiB, iters=3, device=device)
    assert {r["protocol"]["method"] for r in results.values()} == {"short"}   # no mixed comparison
    assert results["long"]["protocol"]["input_sets"] == 6 and set(used_long) == set(range(6))
    assert results["long"]["protocol"]["launches"] % 6 == 0
    assert results["long"]["median_ms"] == pytest.approx(0.2)
    both_long = timing.bench({"a": kernel(device, 0.1), "b": kernel(device, 0.2)}, lambda i: i, MiB, iters=3,
                             device=device)
    assert {r["protocol"]["method"] for r in both_long.values()} == {"long"}


def test_a_graph_that_captured_no_work_is_refused_naming_the_value():
    device = FakeDevice()
    with pytest.raises(ValueError, match=r"escaped: median 0\.000 us per launch is below the empty-launch floor"):
        timing.bench({"escaped": kernel(device, 0.0)}, lambda i: i, MiB, iters=3, device=device)


def test_a_case_whose_fastest_candidate_is_near_the_floor_is_below_floor():
    device = FakeDevice(empty_ms=0.002)
    results = timing.bench({"ours": kernel(device, 0.003), "cuBLAS": kernel(device, 0.008)}, lambda i: i, MiB,
                           iters=3, device=device)
    assert results["ours"]["protocol"]["below_floor"] is True      # 1.5 floors: mostly the launch
    assert results["cuBLAS"]["protocol"]["below_floor"] is False
    assert timing.case_below_floor({"timing": results})
    assert not timing.case_below_floor({"timing": {"cuBLAS": results["cuBLAS"]}})


def test_case_below_floor_looks_at_the_fastest_candidate_only():
    slow = {"median_ms": 0.5, "protocol": {"below_floor": True}}     # its own flag does not matter
    fast = {"median_ms": 0.1, "protocol": {"below_floor": False}}
    assert not timing.case_below_floor({"timing": {"a": slow, "b": fast}})
    assert timing.case_below_floor({"timing": {"a": {"median_ms": 0.05, "protocol": {"below_floor": True}}, "b": fast}})
    assert not timing.case_below_floor({"timing": {"old": {"median_ms": 0.001}}})   # Timer entries: no protocol
    assert not timing.case_below_floor({"timing": {"old": {"median_ms": 0.001, "protocol": "DeepGEMM's"}}})
    assert not timing.case_below_floor({})


def test_floors_are_measured_once_per_device():
    device = FakeDevice()
    timing.bench({"a": kernel(device, 0.01)}, lambda i: i, 64 * MiB, iters=2, device=device)
    device.empty_ms = 1.0     # a second measurement would see this
    result = timing.bench({"a": kernel(device, 0.01)}, lambda i: i, 64 * MiB, iters=2, device=device)
    assert result["a"]["protocol"]["floor_ms"] == pytest.approx(0.002)


@pytest.mark.parametrize("set_bytes, free, expected", [
    (10 * MiB, 100 * 2**30, 18),            # 3 x L2
    (200 * MiB, 100 * 2**30, 1),            # one set already spans 3 x L2
    (10 * MiB, 40 * MiB, 3),                # the set built + half of 40 MiB free
    (1024, 100 * 2**30, timing.MAX_INPUT_SETS),
])
def test_input_set_count(set_bytes, free, expected):
    assert timing.input_set_count(set_bytes, 60 * MiB, free) == expected


@pytest.mark.parametrize("bad", [0, -5, 1.5, None])
def test_set_bytes_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="set_bytes"):
        timing.input_set_count(bad, 60 * MiB, 2**30)
    with pytest.raises(ValueError, match="set_bytes"):
        timing.bench({"a": lambda inputs: None}, lambda i: i, bad, device=FakeDevice())


def test_classification_threshold():
    assert timing.classify(timing.SHORT_BELOW_MS * 0.99) == "short"
    assert timing.classify(timing.SHORT_BELOW_MS) == "long"


def test_launches_are_whole_passes_and_capped():
    assert timing.launches_per_graph(0.01, 7) % 7 == 0
    assert timing.launches_per_graph(1e-9, 1) == timing.MAX_LAUNCHES
    assert timing.launches_per_graph(0.04, timing.MAX_INPUT_SETS) == timing.MAX_INPUT_SETS   # one pass at least


def test_bench_refuses_bad_settings():
    device = FakeDevice()
    with pytest.raises(ValueError, match="order 'random'"):
        timing.bench({"a": kernel(device, 0.1)}, lambda i: i, MiB, order="random", device=device)
    with pytest.raises(ValueError, match="iters 0"):
        timing.bench({"a": kernel(device, 0.1)}, lambda i: i, MiB, iters=0, device=device)
    with pytest.raises(ValueError, match="at least one candidate"):
        timing.bench({}, lambda i: i, MiB, device=device)


def test_a_failed_capture_names_the_candidate():
    class NoGraphs(FakeDevice):
        def graph(self, launch, error_mode="global"):
            raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="^deepgemm: CUDA-graph capture failed .*not permitted"):
        timing.bench({"deepgemm": kernel(NoGraphs(), 0.1)}, lambda i: i, MiB, device=NoGraphs())


def test_a_failed_capture_names_the_error_that_invalidated_it():
    class Invalidated(FakeDevice):
        def graph(self, launch, error_mode="global"):
            try:
                raise RuntimeError("CUDA error: operation would make the legacy stream depend on a capturing "
                                   "blocking stream\nSearch for ...")
            finally:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    with pytest.raises(RuntimeError, match="^fa4: CUDA-graph capture failed .*first error: RuntimeError: CUDA "
                                           "error: operation would make the legacy stream depend"):
        timing.bench({"fa4": kernel(Invalidated(), 0.1)}, lambda i: i, MiB, device=Invalidated())


def test_the_protocol_names_the_rules_and_the_libraries():
    protocol = timing.bench_protocol(30, 5, "shuffled", FakeDevice())
    assert protocol["method"] == "bench" and protocol["iterations"] == 30 and protocol["order"] == "shuffled"
    assert "120 MiB" in protocol["long"] and "3x L2" in protocol["short"]
    assert {"cuda", "cublas", "cudnn"} <= set(protocol)


def test_merging_protocols_keeps_every_setting_seen():
    protocol = {"seed": 1}
    timing.merge_protocol(protocol, {"method": "bench", "iterations": 30})
    timing.merge_protocol(protocol, {"method": "bench", "iterations": 10})
    timing.merge_protocol(protocol, {"method": "bench", "iterations": 30})
    assert protocol == {"seed": 1, "method": "bench", "iterations": [10, 30]}


def test_context_bench_records_the_protocol(monkeypatch):
    from kernelwiki.harness.probe import Context

    device = FakeDevice()
    monkeypatch.setattr(timing, "_TORCH_DEVICE", device)
    ctx = Context(seed=3, gpu_short="H200", gpu_name="NVIDIA H200", ceilings={})
    result = ctx.bench({"a": kernel(device, 0.1)}, lambda i: i, MiB, iters=3)
    assert result["a"]["protocol"]["method"] == "long"
    assert ctx.protocol["method"] == "bench" and ctx.protocol["iterations"] == 3


def test_sets_stop_where_the_free_memory_runs_low():
    class Filling(FakeDevice):
        def free_bytes(self) -> int:
            return self.free

    device = Filling(free_bytes=1000 * MiB)

    def make_inputs(i: int) -> int:
        device.free -= 200 * MiB       # each set takes far more than the 10 MiB a launch touches
        return i

    result = timing.bench({"tiny": kernel(device, 0.01)}, make_inputs, 10 * MiB, iters=2, device=device)
    assert result["tiny"]["protocol"]["input_sets"] == 4   # set 0 leaves 800 MiB; then sets while 400 MiB stay free


def test_the_capture_error_mode_reaches_the_graph_and_a_wrong_one_is_refused():
    device = FakeDevice()
    timing.bench({"fa4 fwd+bwd": kernel(device, 0.1)}, lambda i: i, MiB, device=device,
                 capture_error_mode="thread_local")
    assert device.error_modes[0] == "thread_local"
    with pytest.raises(ValueError, match="capture_error_mode 'local'"):
        timing.bench({"a": kernel(device, 0.1)}, lambda i: i, MiB, device=device, capture_error_mode="local")

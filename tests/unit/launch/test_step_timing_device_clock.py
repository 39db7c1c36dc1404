"""The site hook's step clock on CUDA (launch/site_hook/_traindeck_steps.py): CUDA events on the device's timeline.

The hook is loaded from its file as a fresh module per test and attached, as a rank's sitecustomize attaches it, to a
torch whose `cuda` is a stand-in at the hardware boundary only: streams whose events pass when the test says and
at device times the test gives (`FakeCuda`: the default stream, and side streams such as FSDP2's all-gather
stream, each with its own clock), with `synchronize` counting its calls. Everything above it is the
hook's own code (`_attach_torch`, `_CudaClock`, `_Timing`); its clock is driven as the torch and DeepSpeed wrappers
drive it, the host clock is set by hand too, and the rank file it writes is read back.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

HOOK = Path(__file__).resolve().parents[3] / "backend" / "launch" / "site_hook" / "_traindeck_steps.py"
MARKS_PER_STEP = 9  # the boundaries of `Rank.step`, each one event on CUDA (the first step's first: its start)


class FakeEvent:
    """torch.cuda.Event(enable_timing=True): a point on the fake stream."""

    def __init__(self, cuda: FakeCuda, enable_timing: bool = False) -> None:
        assert enable_timing
        self.cuda = cuda
        self.seq = -1
        self.at = 0.0
        cuda.made += 1

    def record(self, stream: FakeStream | None = None) -> None:
        cuda = self.cuda
        stream = stream or cuda.current
        if cuda.capturing:
            cuda.recorded_while_capturing += 1
        if not cuda.initialized:
            cuda.recorded_uninitialised += 1
        if cuda.fail_record == cuda.recorded:
            cuda.fail_record = None
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        self.seq, self.at = cuda.recorded, stream.now_ms
        cuda.recorded += 1
        stream.recorded += 1

    def query(self) -> bool:
        return self.seq < self.cuda.passed

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.seq < self.cuda.passed and end.seq < self.cuda.passed):
            raise RuntimeError("CUDA error: device not ready")
        if end.seq in self.cuda.fail_read:
            raise RuntimeError("CUDA error: invalid resource handle")
        return end.at - self.at

    def synchronize(self) -> None:
        self.cuda.event_syncs += 1
        self.cuda.passed = max(self.cuda.passed, self.seq + 1)


class FakeStream:
    """torch.cuda.Stream: its own clock (`now_ms`); `wait_event` makes it wait for an event recorded elsewhere, and
    `wait_stream` for all another stream was given, as torch's does it (`self.wait_event(stream.record_event())`)."""

    def __init__(self, name: str, cuda: FakeCuda | None = None) -> None:
        self.name = name
        self.cuda = cuda
        self.now_ms = 0.0
        self.recorded = 0

    def wait_event(self, event: FakeEvent) -> None:
        self.now_ms = max(self.now_ms, event.at)

    def record_event(self) -> FakeEvent:
        assert self.cuda is not None
        event = self.cuda.Event(enable_timing=True)
        event.record(self)
        return event

    def wait_stream(self, stream: FakeStream) -> None:
        self.wait_event(stream.record_event())


class FakeCuda:
    """torch.cuda at the hardware boundary: the default stream (its clock at `now_ms`) current unless the test
    enters another with `stream`; the device has passed `passed` records."""

    Stream = FakeStream

    def __init__(self) -> None:
        self.default = FakeStream("default", self)
        self.current = self.default
        self.recorded = 0
        self.passed = 0
        self.made = 0
        self.initialized = True
        self.capturing = False
        self.recorded_while_capturing = 0
        self.recorded_uninitialised = 0
        self.fail_record: int | None = None
        self.fail_read: set[int] = set()
        self.syncs = 0
        self.event_syncs = 0
        self.memory_reads = 0

    @property
    def now_ms(self) -> float:
        return self.default.now_ms

    @now_ms.setter
    def now_ms(self, value: float) -> None:
        self.default.now_ms = value

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # noqa: N802 - torch's name
        return FakeEvent(self, enable_timing=enable_timing)

    def current_stream(self) -> FakeStream:
        return self.current

    @contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def is_initialized(self) -> bool:
        return self.initialized

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def synchronize(self) -> None:
        self.syncs += 1
        self.passed = self.recorded

    def memory_stats_as_nested_dict(self) -> dict[str, Any]:
        self.memory_reads += 1
        return {"allocated_bytes": {"all": {"current": 10, "peak": 20}},
                "reserved_bytes": {"all": {"current": 30, "peak": 40}}}


class HostClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Rank:
    """The hook in a rank with a fake CUDA device: drives steps and reads back what the hook wrote."""

    def __init__(self, hook: ModuleType, cuda: FakeCuda, host: HostClock, folder: Path,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.hook, self.cuda, self.host, self.folder, self.monkeypatch = hook, cuda, host, folder, monkeypatch
        self.timing = hook._TIMING
        self.ends: list[int] = []  # records made on the stream by the end of each step

    def _at(self, call: Any, phase: str, device_ms: float) -> None:
        self.cuda.now_ms += device_ms
        self.host.now += 0.001  # every boundary 1 ms after the last on the host's clock
        call(phase)

    def step(self, k: int, capture: bool = False) -> None:
        """One step: forward, a backward with a collective inside it, the optimizer (10*k ms on the device: each
        step's own figure), with known device times between the boundaries."""
        t = self.timing
        self._at(t.enter, "forward", 1.0)  # 1 ms of "other" first (the first step starts here)
        self.cuda.capturing = capture
        self._at(t.leave, "forward", 30.0)
        self._at(t.enter, "backward", 0.5)
        self._at(t.enter, "communication", 20.0)
        self._at(t.leave, "communication", 40.0)
        self._at(t.leave, "backward", 25.0)
        self.cuda.capturing = False
        self._at(t.enter, "optimizer", 0.0)
        self._at(t.leave, "optimizer", 10.0 * k)
        self.cuda.now_ms += 2.0
        self.host.now += 0.001
        t.step_ended()
        self.ends.append(self.cuda.recorded)

    def runs_while_the_host_sleeps(self) -> None:
        """From now on the stream runs all it was given whenever the host sleeps (waiting for it)."""
        def sleep(seconds: float) -> None:
            self.cuda.passed = self.cuda.recorded

        self.monkeypatch.setattr(self.hook.time, "sleep", sleep)

    def passes(self, step: int) -> None:
        """The stream passes the end of `step`."""
        self.cuda.passed = self.ends[step - 1] if step > 0 else 0

    def written(self) -> list[dict[str, Any]]:
        path = self.folder / "rank0.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [line for line in lines if "step" in line]

    def hooks(self) -> dict[str, Any]:
        path = self.folder / "rank0.jsonl"
        return next(json.loads(line) for line in path.read_text().splitlines() if '"hooks"' in line)


def device_record(k: int) -> dict[str, float]:
    """Step k's figures on the device's timeline (the first step starts at its first forward)."""
    other = 2.5 if k == 1 else 3.5
    phases = {"forward_ms": 30.0, "backward_ms": 45.0, "communication_ms": 40.0, "optimizer_ms": 10.0 * k,
              "swap_ms": 0.0, "other_ms": other}
    return {"step_ms": sum(phases.values()), **phases}


def host_record(k: int) -> dict[str, float]:
    """Step k's figures on the host's clock (1 ms between boundaries)."""
    phases = {"forward_ms": 1.0, "backward_ms": 2.0, "communication_ms": 1.0, "optimizer_ms": 1.0, "swap_ms": 0.0,
              "other_ms": 3.0 if k == 1 else 4.0}
    return {"step_ms": sum(phases.values()), **phases}


def figures(line: dict[str, Any]) -> dict[str, float]:
    return {key: line[key] for key in ("step_ms", "forward_ms", "backward_ms", "communication_ms", "optimizer_ms",
                                       "swap_ms", "other_ms")}


def _rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: str | None = None) -> Rank:
    if sync is None:
        monkeypatch.delenv("TRAINDECK_STEP_SYNC", raising=False)
    else:
        monkeypatch.setenv("TRAINDECK_STEP_SYNC", sync)
    spec = importlib.util.spec_from_file_location("_traindeck_steps_cuda_under_test", HOOK)
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    host = HostClock()
    monkeypatch.setattr(hook, "_clock", host)
    hook._TIMING = hook._Timing(str(tmp_path / "steps"), "0")
    cuda = FakeCuda()
    # torch with this CUDA and nothing else: the optimizer, autograd, module and collective attachments find no
    # module (the test's own torch is left alone) and say so.
    for name in ("torch.optim.optimizer", "torch.autograd", "torch.nn.modules.module", "torch.distributed"):
        monkeypatch.setitem(sys.modules, name, None)
    hook._attach_torch(SimpleNamespace(cuda=cuda))
    return Rank(hook, cuda, host, tmp_path / "steps", monkeypatch)


@pytest.mark.parametrize("lag", [1, 2])
def test_records_come_late_in_order_with_the_devices_times_and_none_is_lost_at_exit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lag: int) -> None:
    rank = _rank(tmp_path, monkeypatch)
    waits: list[object] = []
    real_wait = rank.timing.device.wait
    monkeypatch.setattr(rank.timing.device, "wait", lambda mark, *a: waits.append(mark) or real_wait(mark, *a))
    for k in range(1, 9):
        rank.step(k)
        rank.passes(k - lag)  # the device runs `lag` steps behind the host
        rank.timing.flush()
        assert [line["step"] for line in rank.written()] == list(range(1, k - lag + 1)), k
    assert rank.cuda.syncs == 0 and rank.cuda.event_syncs == 0 and waits == []  # the host never waited
    rank.runs_while_the_host_sleeps()
    rank.timing.close()  # what atexit calls
    lines = rank.written()
    assert [line["step"] for line in lines] == list(range(1, 9))
    assert len(waits) == 1 and rank.cuda.syncs == 0  # one wait at exit, for the last step's end
    for k, line in enumerate(lines, start=1):
        assert figures(line) == device_record(k), k
        assert sum(line[f"{p}_ms"] for p in rank.hook.PHASES) == line["step_ms"]
        assert line["gpu_allocated"] == 10 and line["gpu_peak_reserved"] == 40
    assert rank.cuda.memory_reads == 8  # one read of the allocator's counters a step
    assert rank.hooks()["clock"] == "cuda events" and rank.hooks()["sync"] is False


def test_a_capturing_stream_records_nothing_and_its_step_keeps_the_host_clock(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rank = _rank(tmp_path, monkeypatch)
    for k in range(1, 5):
        rank.step(k, capture=k == 3)  # step 3's forward and backward are captured into a CUDA graph
        rank.passes(k)
    rank.timing.close()
    assert rank.cuda.recorded_while_capturing == 0
    lines = rank.written()
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert [figures(line) for line in lines] == [device_record(1), device_record(2), host_record(3), device_record(4)]


def test_nothing_is_recorded_before_cuda_is_initialised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank = _rank(tmp_path, monkeypatch)
    rank.cuda.initialized = False
    rank.step(1)
    rank.step(2)
    rank.cuda.initialized = True  # the script moves its model to the GPU
    rank.step(3)
    rank.step(4)
    rank.passes(4)
    rank.timing.close()
    assert rank.cuda.recorded_uninitialised == 0
    # Step 4 starts with the first event: step 2's end found CUDA not initialised yet.
    assert [figures(line) for line in rank.written()] == [host_record(1), host_record(2), host_record(3),
                                                          device_record(4)]


@pytest.mark.parametrize("failing", ["record", "read"])
def test_an_error_in_the_event_path_leaves_that_step_on_the_host_clock(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       failing: str) -> None:
    rank = _rank(tmp_path, monkeypatch)
    inside_step_2 = MARKS_PER_STEP + 3  # step 2's fourth event: its collective's start, inside its backward
    if failing == "record":
        rank.cuda.fail_record = inside_step_2
    else:
        rank.cuda.fail_read.add(inside_step_2)
    for k in range(1, 5):
        rank.step(k)
        rank.passes(k - 1)
    rank.runs_while_the_host_sleeps()
    rank.timing.close()
    assert [figures(line) for line in rank.written()] == [device_record(1), host_record(2), device_record(3),
                                                          device_record(4)]


def test_waiting_steps_stay_few_and_events_are_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank = _rank(tmp_path, monkeypatch)
    for k in range(1, 11):
        rank.step(k)
        rank.passes(k - 2)
    made = rank.cuda.made
    for k in range(11, 201):
        rank.step(k)
        rank.passes(k - 2)
        assert len(rank.timing.late) <= 3
    assert rank.cuda.made == made  # no event made after the first steps: the pool's events are recorded again
    # A device far behind (it passes nothing until the host waits for it): past the bound the host waits for the
    # oldest step, and the steps waiting stay few.
    rank.runs_while_the_host_sleeps()
    waits: list[object] = []
    real_wait = rank.timing.device.wait
    monkeypatch.setattr(rank.timing.device, "wait", lambda mark, *a: waits.append(mark) or real_wait(mark, *a))
    most = 0
    for k in range(201, 241):
        rank.step(k)
        most = max(most, len(rank.timing.late))
    assert most == rank.hook._LATE_MAX and len(waits) == 2  # steps 201-217 and 218-234 waited once each
    rank.timing.close()
    lines = rank.written()
    assert [line["step"] for line in lines] == list(range(1, 241))
    assert all(figures(line) == device_record(k) for k, line in enumerate(lines, start=1))
    assert rank.cuda.syncs == 0


@pytest.mark.parametrize(("sync", "clock"), [(None, "cuda events"), ("1", "host, synchronised"), ("0", "host")])
def test_the_cuda_path_never_synchronises_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       sync: str | None, clock: str) -> None:
    rank = _rank(tmp_path, monkeypatch, sync)
    for k in range(1, 5):
        rank.step(k)
        rank.passes(k)
    assert rank.cuda.syncs == (4 * 3 * 2 if sync == "1" else 0)  # opt-in: each outermost phase's start and end
    assert rank.cuda.event_syncs == 0
    rank.timing.close()
    assert rank.cuda.recorded == (4 * MARKS_PER_STEP if sync is None else 0)
    expected = device_record if sync is None else host_record
    assert [figures(line) for line in rank.written()] == [expected(k) for k in range(1, 5)]
    assert rank.hooks()["clock"] == clock and rank.hooks()["sync"] is (sync == "1")


def test_a_step_with_too_many_boundaries_goes_on_the_host_clock(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # An evaluation loop's forwards between two steps: the step's events are not kept without bound.
    rank = _rank(tmp_path, monkeypatch)
    limit = MARKS_PER_STEP + 1
    monkeypatch.setattr(rank.hook, "_MARKS_MAX", limit)
    rank.step(1)
    rank.step(2)
    for _ in range(3):  # three evaluation batches after step 2
        rank.timing.enter("forward")
        rank.timing.leave("forward")
    rank.host.now += 0.006  # their 6 ms on the host
    rank.step(3)
    rank.step(4)
    rank.passes(4)
    rank.timing.close()
    third = host_record(3)
    third.update(step_ms=third["step_ms"] + 6.0, other_ms=third["other_ms"] + 6.0)
    assert [figures(line) for line in rank.written()] == [device_record(1), device_record(2), third, device_record(4)]
    # Step 3 stops recording at the bound (its first event is step 2's end); step 4 starts anew at step 3's end.
    assert rank.cuda.recorded == 2 * MARKS_PER_STEP + (limit - 1) + 1 + MARKS_PER_STEP


class FSDPParamGroup:
    """FSDP2's parameter group where the hook meets it: its methods make the current stream wait for a collective's
    event, as torch's do (`self.device_handle.current_stream().wait_event(event)`); the unshard wait also makes the
    all-gather stream wait (`_wait_all_gather_streams_on_event`), which costs the compute stream nothing."""

    def __init__(self, cuda: FakeCuda, all_gather: FakeStream) -> None:
        self.cuda, self.all_gather = cuda, all_gather

    def wait_for_unshard(self, event: FakeEvent) -> None:
        self.cuda.current_stream().wait_event(event)
        self.all_gather.wait_event(event)

    def post_backward(self, event: FakeEvent) -> None:
        self.cuda.current_stream().wait_event(event)

    def finalize_backward(self, event: FakeEvent) -> None:
        self.cuda.current_stream().wait_event(event)


def fsdp2_step(rank: Rank, group: FSDPParamGroup, all_gather: FakeStream, reduce_scatter: FakeStream) -> None:
    """One FSDP2 step of two units on the device: unit 0's all-gather exposed (the compute stream waits 20 ms for it),
    unit 1's overlapped with unit 0's compute, the reduce-scatter's last 15 ms exposed at the end of backward. The
    collectives run inside their streams' contexts, as FSDP2 issues them; the script waits 5 ms for a stream of its
    own between forward and backward."""
    cuda, t = rank.cuda, rank.timing

    def collective(stream: FakeStream, ms: float) -> FakeEvent:
        stream.now_ms = max(stream.now_ms, cuda.now_ms)
        with cuda.stream(stream):
            t.enter("communication")  # torch.distributed's all_gather_single / reduce_scatter_single, wrapped
            stream.now_ms += ms
            t.leave("communication")
            event = cuda.Event(enable_timing=True)
            event.record()
        return event

    rank._at(t.enter, "forward", 1.0)
    group.wait_for_unshard(collective(all_gather, 20.0))  # exposed: 20 ms
    gathered = collective(all_gather, 20.0)
    cuda.now_ms += 30.0  # unit 0's forward
    group.wait_for_unshard(gathered)  # overlapped: no wait
    cuda.now_ms += 30.0  # unit 1's forward
    rank._at(t.leave, "forward", 0.0)
    prefetch = cuda.Event(enable_timing=True)
    prefetch.seq, prefetch.at = cuda.recorded, cuda.now_ms + 5.0  # the script's own copy stream, 5 ms behind
    cuda.recorded += 1
    cuda.current_stream().wait_event(prefetch)
    rank._at(t.enter, "backward", 0.5)
    cuda.now_ms += 40.0
    reduced = collective(reduce_scatter, 25.0)
    group.post_backward(gathered)  # an event the compute stream has passed: no wait
    cuda.now_ms += 10.0
    group.finalize_backward(reduced)  # exposed: 15 ms
    rank._at(t.leave, "backward", 0.0)
    rank._at(t.enter, "optimizer", 0.0)
    rank._at(t.leave, "optimizer", 10.0)
    cuda.now_ms += 2.0
    rank.host.now += 0.001
    t.step_ended()
    rank.ends.append(cuda.recorded)


def _fsdp2_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Rank, FakeStream, FakeStream]:
    rank = _rank(tmp_path, monkeypatch)
    monkeypatch.setattr(FakeStream, "wait_event", FakeStream.wait_event)  # what the hook patches, restored
    group_class = FSDPParamGroup
    for name in ("wait_for_unshard", "post_backward", "finalize_backward"):
        monkeypatch.setattr(group_class, name, getattr(group_class, name))
    return rank, FakeStream("all-gather"), FakeStream("reduce-scatter")


def _run_fsdp2(rank: Rank, group: FSDPParamGroup, all_gather: FakeStream, reduce_scatter: FakeStream) -> list[dict]:
    for k in range(1, 4):
        fsdp2_step(rank, group, all_gather, reduce_scatter)
        rank.passes(k)
    rank.timing.close()
    lines = rank.written()
    assert [line["step"] for line in lines] == [1, 2, 3]
    return [figures(line) for line in lines]


def test_collectives_on_fsdp2s_own_streams_are_marked_on_the_compute_stream(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Without FSDP2's waits attached, the compute stream's waits count in the phase that runs them; an overlapped
    # collective costs nothing, and none takes the compute it overlapped from forward or backward.
    rank, all_gather, reduce_scatter = _fsdp2_rank(tmp_path, monkeypatch)
    group = FSDPParamGroup(rank.cuda, all_gather)
    got = _run_fsdp2(rank, group, all_gather, reduce_scatter)
    phases = {"forward_ms": 80.0, "backward_ms": 65.0, "communication_ms": 0.0, "optimizer_ms": 10.0, "swap_ms": 0.0}
    assert got == [{"step_ms": sum(phases.values()) + other, **phases, "other_ms": other} for other in (7.5, 8.5, 8.5)]
    # The hook's events are all on the compute stream: FSDP2's streams hold only FSDP's own (two all-gathers' and
    # one reduce-scatter's a step).
    assert (all_gather.recorded, reduce_scatter.recorded) == (6, 3)


def test_fsdp2s_waits_on_its_collectives_are_communication_on_cuda(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    rank, all_gather, reduce_scatter = _fsdp2_rank(tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=rank.cuda))  # the torch the hook looks up
    rank.hook._ATTACH["torch.distributed.fsdp._fully_shard._fsdp_param_group"](
        SimpleNamespace(FSDPParamGroup=FSDPParamGroup))
    assert rank.timing.stream_waits == {"FSDP2"}
    group = FSDPParamGroup(rank.cuda, all_gather)
    got = _run_fsdp2(rank, group, all_gather, reduce_scatter)
    # The exposed 20 ms of unit 0's all-gather and 15 ms of the reduce-scatter; the script's own wait stays "other".
    phases = {"forward_ms": 60.0, "backward_ms": 50.0, "communication_ms": 35.0, "optimizer_ms": 10.0, "swap_ms": 0.0}
    assert got == [{"step_ms": sum(phases.values()) + other, **phases, "other_ms": other} for other in (7.5, 8.5, 8.5)]
    assert (all_gather.recorded, reduce_scatter.recorded) == (6, 3)
    assert rank.cuda.syncs == 0 and rank.cuda.event_syncs == 0


# ---- ZeRO-3 and FSDP1: the same stream pattern, waited for with wait_stream ------------------------------------
def side_collective(rank: Rank, stream: FakeStream, ms: float) -> None:
    """A collective issued inside `stream`'s context (a torch.distributed or deepspeed.comm entry point, wrapped as
    communication): `ms` on that stream, from where the compute stream is now."""
    cuda, t = rank.cuda, rank.timing
    stream.now_ms = max(stream.now_ms, cuda.now_ms)
    with cuda.stream(stream):
        t.enter("communication")
        stream.now_ms += ms
        t.leave("communication")


class PartitionedParameterCoordinator:
    """ZeRO-3's parameter coordinator where the hook meets it: `fetch_sub_module` waits on the module's all-gather
    handle inside the all-gather stream's context (Work.wait, wrapped as communication), then makes the compute stream
    wait for that stream, as DeepSpeed 0.19's does (`get_accelerator().current_stream().wait_stream(
    self.__allgather_stream)`)."""

    def __init__(self, rank: Rank, all_gather: FakeStream) -> None:
        self.rank, self.all_gather = rank, all_gather

    def fetch_sub_module(self, gather_ms: float) -> None:
        cuda, t = self.rank.cuda, self.rank.timing
        if gather_ms:  # not prefetched: its all-gather is issued now
            side_collective(self.rank, self.all_gather, gather_ms)
        with cuda.stream(self.all_gather):
            t.enter("communication")  # the handle's Work.wait
            t.leave("communication")
        cuda.current_stream().wait_stream(self.all_gather)


def zero3_step(rank: Rank, coordinator: PartitionedParameterCoordinator, all_gather: FakeStream) -> None:
    """One ZeRO-3 step of two modules, as the FSDP2 step: module 0's all-gather exposed (20 ms), module 1's
    prefetched under module 0's forward, and in backward a prefetched all-gather of 55 ms of which the compute (40 ms)
    hides all but 15 ms."""
    cuda, t = rank.cuda, rank.timing
    rank._at(t.enter, "forward", 1.0)
    coordinator.fetch_sub_module(20.0)  # exposed: 20 ms
    side_collective(rank, all_gather, 20.0)  # module 1's prefetch, on the all-gather stream after module 0's
    cuda.now_ms += 30.0  # module 0's forward
    coordinator.fetch_sub_module(0.0)  # prefetched and done: no wait
    cuda.now_ms += 30.0  # module 1's forward
    rank._at(t.leave, "forward", 0.0)
    rank._at(t.enter, "backward", 0.5)
    side_collective(rank, all_gather, 55.0)  # module 0's gather for backward, prefetched as module 1's backward runs
    cuda.now_ms += 40.0
    coordinator.fetch_sub_module(0.0)  # exposed: 15 ms
    cuda.now_ms += 10.0
    rank._at(t.leave, "backward", 0.0)
    rank._at(t.enter, "optimizer", 0.0)
    rank._at(t.leave, "optimizer", 10.0)
    cuda.now_ms += 2.0
    rank.host.now += 0.001
    t.step_ended()
    rank.ends.append(cuda.recorded)


class FSDP1State:
    """An FSDP1 unit's state: its unshard stream (all-gathers) and post-backward stream (reduce-scatters)."""

    def __init__(self, cuda: FakeCuda) -> None:
        self._unshard_stream = FakeStream("unshard", cuda)
        self._post_backward_stream = FakeStream("post-backward", cuda)
        self._unshard_event: FakeEvent | None = None


def fsdp1_runtime(cuda: FakeCuda) -> ModuleType:
    """torch/distributed/fsdp/_runtime_utils.py where the hook meets it: module functions that make the current stream
    wait for FSDP1's streams, as torch 2.13's do."""
    runtime = ModuleType("torch.distributed.fsdp._runtime_utils")

    def _pre_forward_unshard(state: FSDP1State, handle: object) -> None:
        if state._unshard_event is not None:
            cuda.current_stream().wait_event(state._unshard_event)
            state._unshard_event = None
        else:
            cuda.current_stream().wait_stream(state._unshard_stream)

    def _pre_backward_hook(state: FSDP1State, module: object, handle: object, grad: object) -> object:
        cuda.current_stream().wait_stream(state._unshard_stream)
        return grad

    def _post_backward_final_callback(state: FSDP1State, module: object) -> None:
        cuda.current_stream().wait_stream(state._post_backward_stream)

    for function in (_pre_forward_unshard, _pre_backward_hook, _post_backward_final_callback):
        setattr(runtime, function.__name__, function)
    return runtime


def fsdp1_step(rank: Rank, runtime: ModuleType, state: FSDP1State) -> None:
    """One FSDP1 step, the same pattern: unit 0's all-gather exposed (20 ms; the compute stream waits on its event),
    unit 1's overlapped, the backward's unshard already done, the reduce-scatter's last 15 ms exposed at the end of
    backward. torch calls the functions as its module's globals (or partials of them made after import)."""
    cuda, t = rank.cuda, rank.timing
    rank._at(t.enter, "forward", 1.0)
    side_collective(rank, state._unshard_stream, 20.0)
    state._unshard_event = state._unshard_stream.record_event()
    runtime._pre_forward_unshard(state, None)  # exposed: 20 ms
    side_collective(rank, state._unshard_stream, 20.0)  # unit 1's, prefetched
    cuda.now_ms += 30.0
    runtime._pre_forward_unshard(state, None)  # overlapped: no wait
    cuda.now_ms += 30.0
    rank._at(t.leave, "forward", 0.0)
    rank._at(t.enter, "backward", 0.5)
    runtime._pre_backward_hook(state, None, None, None)  # the unshard stream is long done: no wait
    cuda.now_ms += 40.0
    side_collective(rank, state._post_backward_stream, 25.0)
    cuda.now_ms += 10.0
    runtime._post_backward_final_callback(state, None)  # exposed: 15 ms
    rank._at(t.leave, "backward", 0.0)
    rank._at(t.enter, "optimizer", 0.0)
    rank._at(t.leave, "optimizer", 10.0)
    cuda.now_ms += 2.0
    rank.host.now += 0.001
    t.step_ended()
    rank.ends.append(cuda.recorded)


def _run(rank: Rank, step: Any) -> list[dict]:
    for k in range(1, 4):
        step()
        rank.passes(k)
    rank.timing.close()
    lines = rank.written()
    assert [line["step"] for line in lines] == [1, 2, 3]
    return [figures(line) for line in lines]


def _library_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attach: bool) -> Rank:
    rank = _rank(tmp_path, monkeypatch)
    monkeypatch.setattr(FakeStream, "wait_event", FakeStream.wait_event)  # what the hook patches, restored
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=rank.cuda))  # the torch the hook looks up
    if not attach:
        return rank
    coordinator = PartitionedParameterCoordinator
    monkeypatch.setattr(coordinator, "fetch_sub_module", coordinator.fetch_sub_module)  # restored after the test
    rank.hook._ATTACH["deepspeed.runtime.zero.partitioned_param_coordinator"](
        SimpleNamespace(PartitionedParameterCoordinator=coordinator))
    return rank


def _phases(forward: float, backward: float, communication: float) -> list[dict[str, float]]:
    phases = {"forward_ms": forward, "backward_ms": backward, "communication_ms": communication, "optimizer_ms": 10.0,
              "swap_ms": 0.0}
    # "other": 0.5 ms between forward and backward, 2 ms after the optimizer, and from the second step on the 1 ms
    # before forward (the first step starts at its forward)
    return [{"step_ms": sum(phases.values()) + other, **phases, "other_ms": other} for other in (2.5, 3.5, 3.5)]


@pytest.mark.parametrize("attach", [False, True])
def test_zero3s_waits_for_its_parameter_all_gathers_are_communication_on_cuda(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attach: bool) -> None:
    rank = _library_rank(tmp_path, monkeypatch, attach)
    all_gather = FakeStream("all-gather", rank.cuda)
    coordinator = PartitionedParameterCoordinator(rank, all_gather)
    got = _run(rank, lambda: zero3_step(rank, coordinator, all_gather))
    if attach:  # the exposed 20 ms of module 0's all-gather and 15 ms of the backward's: FSDP2's 60/50/35
        assert rank.timing.stream_waits == {"ZeRO-3"}
        assert got == _phases(60.0, 50.0, 35.0)
    else:  # the waits count in the phase that runs them
        assert got == _phases(80.0, 65.0, 0.0)
    assert rank.cuda.syncs == 0 and rank.cuda.event_syncs == 0


@pytest.mark.parametrize("attach", [False, True])
def test_fsdp1s_waits_on_its_streams_are_communication_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               attach: bool) -> None:
    rank = _library_rank(tmp_path, monkeypatch, False)
    runtime = fsdp1_runtime(rank.cuda)
    if attach:  # as the import hook does, once the module has run
        rank.hook._ATTACH["torch.distributed.fsdp._runtime_utils"](runtime)
        assert rank.timing.stream_waits == {"FSDP1"}
    state = FSDP1State(rank.cuda)
    got = _run(rank, lambda: fsdp1_step(rank, runtime, state))
    assert got == (_phases(60.0, 50.0, 35.0) if attach else _phases(80.0, 65.0, 0.0))
    # FSDP's own streams' waits (wait_stream records an event on the stream waited for) cost the compute stream
    # nothing, and nothing here waits for the device.
    assert rank.cuda.syncs == 0 and rank.cuda.event_syncs == 0

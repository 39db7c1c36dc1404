"""backend.monitor.live and .demo: the Monitor page's sampling loop and run-store reads, without Qt."""

from __future__ import annotations

import threading
import time

import pytest
from fixtures.monitor_run_tree import run_tree

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.monitor.demo import demo_offload_view, demo_samples, demo_steps
from traindeck.backend.monitor.live import (
    LiveSampler,
    run_choices,
    run_history,
    run_offload,
    step_times,
    summarize_steps,
)
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.store_read import resource_summary
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

MIB = 1024 * 1024


def test_live_sampler_hands_samples_to_the_callback_on_its_thread_and_follows_a_root_pid():
    got, threads = [], set()
    arrived = threading.Event()

    def on_sample(sample):
        got.append(sample)
        threads.add(threading.current_thread().name)
        arrived.set()

    with run_tree(ranks=1, mib=32) as tree:
        sampler = LiveSampler(on_sample, interval_s=0.1)
        sampler.start()
        try:
            assert arrived.wait(10)
            assert got[-1].run is None and got[-1].host.ram_total_bytes > 0
            sampler.root_pid = tree["launcher"]
            deadline = time.monotonic() + 10
            while not (got[-1].run and got[-1].run.ranks_rss_bytes >= 32 * MIB) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            assert sampler.stop()
    assert got[-1].run.root_pid == tree["launcher"] and got[-1].run.ranks_rss_bytes >= 32 * MIB
    assert threads == {"live-monitor"}
    count = len(got)
    time.sleep(0.3)
    assert len(got) == count  # stopped means stopped


def test_run_choices_list_running_runs_first_and_nothing_without_a_store(traindeck_home):
    assert run_choices() == []
    now = time.time()
    with RunStore() as store:
        store.add_run(RunRecord(id="old-done", run_dir=str(traindeck_home), created_at=now - 50, name="a",
                                state="succeeded", started_at=now - 50))
        store.add_run(RunRecord(id="newer-done", run_dir=str(traindeck_home), created_at=now - 10, name="b",
                                state="failed", started_at=now - 10))
        store.add_run(RunRecord(id="running-1", run_dir=str(traindeck_home), created_at=now - 100, name="c",
                                state="running", started_at=now - 100, launcher_pid=4242))
    choices = run_choices()
    assert [c.id for c in choices] == ["running-1", "newer-done", "old-done"]
    assert choices[0].live and choices[0].launcher_pid == 4242 and not choices[1].live
    assert "running" in choices[0].label and "c" in choices[0].label


def test_run_choices_list_a_live_run_queued_long_ago_behind_many_newer_runs(traindeck_home):
    """A run the queue started, queued before thirty others that still wait: it is running, so it is listed (and
    first), however many runs were made after it."""
    now = time.time()
    with RunStore() as store:
        store.add_run(RunRecord(id="20260101-080000-live", run_dir="/nonexistent/live", created_at=now - 3600,
                                started_at=now - 10, name="queued-first", launcher_pid=4242))
        for i in range(40):
            store.add_run(RunRecord(id=f"20260101-09{i:04d}-q{i:03d}", run_dir=f"/nonexistent/{i}",
                                    created_at=now - 3000 + i, name=f"waiting-{i}", state="queued"))
    choices = run_choices(limit=30)
    assert choices[0].id == "20260101-080000-live" and choices[0].live and choices[0].short == "queued-first ·live"
    assert len(choices) == 31


def test_step_times_take_the_series_with_most_steps_once_per_step(traindeck_home):
    with RunStore() as store:
        store.add_run(RunRecord(id="r1", run_dir=str(traindeck_home), created_at=time.time()))
        store.add_metrics("r1", [("lr", 10, 100.0, 1e-4, 0), ("loss", 1, 10.0, 3.0, 0), ("loss", 1, 10.5, 3.0, 1),
                                 ("loss", 2, 20.0, 2.5, 0), ("loss", 3, 30.0, 2.0, 0), ("epoch", None, 5.0, 0.1, 0)])
    assert step_times("r1") == [(10.0, 1), (20.0, 2), (30.0, 3)]
    assert step_times("unknown") == []


def test_a_recorded_run_reads_back_as_history_and_offload_view(traindeck_home):
    samples = demo_samples(seconds=150)
    steps = demo_steps(samples)
    with RunStore() as store:
        store.add_run(RunRecord(id="rec", run_dir=str(traindeck_home), created_at=samples[0].t))
        store.add_metrics("rec", [("loss", step, t, 1.0, 0) for t, step in steps])
    writer = ResourceWriter(run_store_path(), "rec", interval_s=1.0, started_at=samples[0].t)
    for sample in samples:
        writer.write(sample, commit=False)
    writer.commit()
    writer.close()
    history = run_history("rec", max_points=50)
    assert 0 < len(history["series"]["t"]) <= 50
    assert {p["role"] for p in history["last_processes"]["processes"]} == {"launcher", "rank"}
    view = run_offload("rec")
    assert view["step_times"] == steps and len(view["steps"]) == len(steps) - 1
    assert view["nvme_devices"] == [["/mnt/nvme/offload", "nvme0n1"]]


def test_demo_samples_tell_the_offload_story():
    samples = demo_samples(seconds=300)
    assert len(samples) == 300 and all(b.t - a.t == pytest.approx(1.0) for a, b in zip(samples, samples[1:], strict=False))
    assert all(len(s.gpus) == 2 and s.gpu_error is None and len(s.run.ranks) == 2 for s in samples)
    late = samples[-80:]
    # GPUs busy while computing and idle during the CPU's Adam step; the CPU the other way round.
    assert max(g.utilization_percent for s in late for g in s.gpus) > 90
    assert min(g.utilization_percent for s in late for g in s.gpus) < 10
    assert max(s.host.cpu_percent for s in late) > 80
    view = demo_offload_view(samples)
    figures = view["steps"]
    assert figures and all(f["seconds_per_step"] == pytest.approx(8.0) for f in figures)
    summary = summarize_steps(figures)
    # ~1.5 GiB each way per GPU and step, two GPUs.
    assert 2.5 * 1024**3 < summary["pcie_h2d_bytes_per_step"] < 4 * 1024**3
    assert summary["nvme_read_bytes_per_step"] > 1024**3
    assert summarize_steps([]) == {"steps": 0.0, **{k: None for k in summary if k != "steps"}}


def test_demo_samples_are_valid_for_the_store_summary(tmp_path):
    samples = demo_samples(seconds=120)
    writer = ResourceWriter(tmp_path / "s.sqlite", "d", interval_s=1.0, started_at=samples[0].t)
    for sample in samples:
        writer.write(sample, commit=False)
    writer.commit()
    writer.close()
    summary = resource_summary(tmp_path / "s.sqlite", "d")
    assert summary["samples"] == 120 and summary["gpu_count"] == 2
    assert summary["peak_gpu_mem_bytes"] < 24564 * MIB
    assert summary["peak_host_used_bytes"] < summary["ram_total_bytes"]


def test_only_a_running_run_without_its_supervisor_is_lost(traindeck_home):
    """An ended run's supervisor is gone because the run ended: it keeps its own state ("stopped", "succeeded"),
    and only a run still marked running whose supervisor is gone reads as lost."""
    now = time.time()
    with RunStore() as store:
        store.add_run(RunRecord(id="stopped-1", run_dir=str(traindeck_home), created_at=now - 20, name="a",
                                state="stopped", started_at=now - 20))
        store.add_run(RunRecord(id="done-1", run_dir=str(traindeck_home), created_at=now - 30, name="b",
                                state="succeeded", started_at=now - 30))
        store.add_run(RunRecord(id="orphan-1", run_dir=str(traindeck_home), created_at=now - 40, name="c",
                                state="running", started_at=now - 40))
    states = {c.id: c.state for c in run_choices(alive=lambda record: False)}
    assert states == {"stopped-1": "stopped", "done-1": "succeeded", "orphan-1": "lost"}


def test_offload_per_step_seconds_come_from_the_timed_steps_not_the_logs_read_times(traindeck_home):
    # As a 2-rank ZeRO-3 run logged it: DeepSpeed prints a line per step, read by the supervisor about every 100
    # ms, so two steps of 70 ms often share a read time (0.00 s/step) and the next is 0.10 s/step. The ranks timed
    # each step's end.
    from traindeck.backend.steps import PHASES, StepRecord

    t0 = 1_000.0
    with RunStore() as store:
        store.add_run(RunRecord(id="z3", run_dir=str(traindeck_home), created_at=t0))
        store.add_metrics("z3", [("lr", n, t0 + round(n * 0.07, 1), 1e-3, 0) for n in range(1, 41)])
        store.add_steps("z3", [StepRecord(rank=r, step=n, t=t0 + n * 0.07, step_ms=70.0,
                                          phases_ms={p: 70.0 if p == "backward" else 0.0 for p in PHASES})
                               for r in (0, 1) for n in range(1, 41)])
        store.add_run(RunRecord(id="resumed", run_dir=str(traindeck_home), created_at=t0))
        store.add_metrics("resumed", [("loss", 1000 + n, t0 + n, 1.0, 0) for n in range(1, 11)])
        store.add_steps("resumed", [StepRecord(rank=0, step=n, t=t0 + n - 0.01, step_ms=990.0,
                                               phases_ms={p: 990.0 if p == "backward" else 0.0 for p in PHASES})
                                    for n in range(1, 11)])
    view = run_offload("z3")
    per_step = [round(f["seconds_per_step"], 3) for f in view["steps"]]
    assert per_step == [0.07] * 39
    assert summarize_steps(view["steps"])["seconds_per_step"] == pytest.approx(0.07)
    assert [s for _, s in view["step_times"]] == list(range(1, 41))
    # The log counts its steps otherwise than the ranks (a resumed run): its own numbers and times stay.
    resumed = run_offload("resumed")
    assert resumed["step_times"] == [(t0 + n, 1000 + n) for n in range(1, 11)]


def test_step_phases_carry_the_anatomys_straggler_none_where_the_ranks_are_evenly_matched(traindeck_home):
    """The Offload tab calls its rank the slowest by the Step tab's rule (`StepAnatomy.straggler`): a rank whose
    own work is a hair above the other's is shown, but it is no straggler; one 50% above is."""
    from traindeck.backend.monitor.live import step_phases
    from traindeck.backend.steps import PHASES, StepRecord

    def records(optimizer_ms_of_rank_1: float) -> list[StepRecord]:
        return [StepRecord(rank=r, step=n, t=1_000.0 + n, step_ms=100.0,
                           phases_ms={**{p: 0.0 for p in PHASES}, "backward": 50.0,
                                      "optimizer": optimizer_ms_of_rank_1 if r == 1 else 20.0,
                                      "communication": 30.0 if r == 0 else 50.0 - optimizer_ms_of_rank_1})
                for r in (0, 1) for n in range(1, 21)]

    with RunStore() as store:
        for run_id, optimizer in (("even", 21.0), ("lagging", 45.0), ("alone", 20.0)):
            store.add_run(RunRecord(id=run_id, run_dir=str(traindeck_home), created_at=1_000.0))
            rows = records(optimizer)
            store.add_steps(run_id, [r for r in rows if run_id != "alone" or r.rank == 0])
    even, lagging, alone = (step_phases(run_id, run_store_path()) for run_id in ("even", "lagging", "alone"))
    assert even is not None and (even["rank"], even["straggler"], even["ranks"]) == (1, None, 2)
    assert lagging is not None and (lagging["rank"], lagging["straggler"], lagging["ranks"]) == (1, 1, 2)
    assert alone is not None and (alone["rank"], alone["straggler"], alone["ranks"]) == (0, None, 1)

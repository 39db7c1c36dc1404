"""Each rank's line read back from a run's recording (for the Monitor's per-rank charts): named as a live view names
it, bounded to a number of points however long the run, its values those recorded."""

from __future__ import annotations

import numpy as np

from traindeck.backend.core.paths import run_store_path
from traindeck.backend.monitor import demo_samples
from traindeck.backend.monitor.live import rank_lines, run_history
from traindeck.backend.monitor.sample_store import ResourceWriter
from traindeck.backend.monitor.store_read import read_process_samples
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def _record(home, seconds: int) -> list:
    samples = demo_samples(seconds=seconds)
    with RunStore() as store:
        store.add_run(RunRecord(id="rec", run_dir=str(home), created_at=samples[0].t))
    writer = ResourceWriter(run_store_path(), "rec", interval_s=1.0, started_at=samples[0].t)
    for sample in samples:
        writer.write(sample, commit=False)
    writer.commit()
    writer.close()
    return samples


def test_rank_lines_come_back_bounded_and_named_as_live(traindeck_home):
    samples = _record(traindeck_home, 300)
    every = read_process_samples(run_store_path(), "rec")
    assert len(every) == 300
    bounded = read_process_samples(run_store_path(), "rec", max_points=40)
    assert 30 <= len(bounded) <= 40  # a sample per time bucket, oldest first
    assert bounded[0]["t"] == every[0]["t"] and all(a["t"] < b["t"] for a, b in zip(bounded, bounded[1:], strict=False))
    lines = run_history("rec", max_points=40)["ranks"]
    ranks = sorted(p.rank for p in samples[-1].run.processes if p.role == "rank")
    assert sorted(lines) == [f"rank {r}" for r in ranks]
    line = lines["rank 1"]
    assert len(line["t"]) == len(bounded)
    at = {s.t: s for s in samples}
    for t, rss, cpu in zip(line["t"], line["rss"], line["cpu"], strict=True):
        recorded = next(p for p in at[t].run.processes if p.rank == 1 and p.role == "rank")
        assert rss == recorded.rss_bytes and cpu == round(recorded.cpu_percent, 1)
    assert not np.all(np.isnan(line["locked"]))


def test_a_run_without_ranks_has_a_line_per_process_that_is_not_a_launcher():
    processes = [{"pid": 10, "role": "launcher", "rank": None, "cmdline": "python -m torch.distributed.run t.py",
                  "rss_bytes": 5, "cpu_percent": 1.0},
                 {"pid": 11, "role": "helper", "rank": None, "cmdline": "python t.py", "rss_bytes": 7,
                  "cpu_percent": None}]
    lines = rank_lines([{"t": 1.0, "root_pid": 10, "processes": processes}])
    assert list(lines) == ["PID 11"]
    assert lines["PID 11"]["rss"].tolist() == [7.0] and np.isnan(lines["PID 11"]["cpu"][0])
    assert rank_lines([]) == {}

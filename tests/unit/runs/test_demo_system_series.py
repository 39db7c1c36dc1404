"""The demo store's runs carry resource samples (written by the recorder's writer) that the Runs page's System view
charts: every chart of every demo run has a line, and the figures tell each run's story."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traindeck.backend.runs import SYSTEM_CHARTS, RunStore, read_system_series

GIB = 1024**3


def test_every_demo_run_has_every_system_chart(tmp_path: Path) -> None:
    from traindeck.gui.pages.runs.source import create_demo_store

    store_path, running_id = create_demo_store(tmp_path)
    with RunStore(store_path) as store:
        records = store.list_runs()
        assert len(records) == 6
        reads = {r.id: (r, read_system_series(store, r.id, live=not r.finished)) for r in records}
    for record, read in reads.values():
        assert read.missing == {}, (record.name, read.missing)
        assert set(read.lines) == {chart.key for chart in SYSTEM_CHARTS}, record.name
        assert set(read.lines["gpu_util"]) == {"GPU 0", "GPU 1"}
        assert {"rank 0", "rank 1", "all ranks"} <= set(read.lines["rank_rss"])
        assert read.references["gpu_memory"]["GPU size"] == 24564 * 1024**2
        t = read.lines["cpu"]["host"][0]
        started = record.started_at or record.created_at
        ended = record.ended_at if record.finished else t[-1]
        assert started < t[0] and t[-1] <= ended + 1e-6  # within the run's own time span
    record, running = reads[running_id]
    t, util = running.lines["gpu_util"]["GPU 0"]
    since = t - (record.started_at or 0)
    assert len(t) > 200  # a second apart, as the recorder writes them
    assert np.median(util[since > 40]) > 80 and np.median(util[since < 20]) < 15  # busy once the steps began
    _, rss = running.lines["rank_rss"]["rank 0"]
    assert 4 * GIB < np.nanmax(rss) < 6 * GIB
    # The run whose rank 1 ran out of GPU memory: its memory climbed to what the OOM message says was in use.
    failed = next(read for rec, read in reads.values() if rec.name == "llama-1b" and rec.id.endswith("c0de"))
    _, memory = failed.lines["gpu_memory"]["GPU 1"]
    assert 22 * GIB < np.nanmax(memory) < 23.57 * GIB

"""Recording into the run store and reading back: real SQLite files, a real process tree, real threads."""

from __future__ import annotations

import sqlite3
import threading
import time

import numpy as np
import pynvml
import pytest
from fixtures.monitor_run_tree import run_tree
from fixtures.monitor_samples import GIB, T0, phase, training_sample
from fixtures.nvml.fake_driver import MIB, FakePynvml, recording

from traindeck.backend.monitor import sample_store as store_module
from traindeck.backend.monitor.nvml import NvmlLibrary
from traindeck.backend.monitor.offload import offload_view
from traindeck.backend.monitor.recorder import RunResourceRecorder
from traindeck.backend.monitor.sample_store import CHUNK_SAMPLES, ResourceWriter
from traindeck.backend.monitor.store_read import read_process_samples, read_series, resource_summary


def _no_gpu() -> NvmlLibrary:
    return NvmlLibrary(FakePynvml(recording("gt_1030"), init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))


def _wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_recorder_records_a_real_process_tree_and_finds_both_childrens_memory(tmp_path):
    store = tmp_path / "runs.sqlite3"
    with run_tree(ranks=2, mib=60) as tree:
        recorder = RunResourceRecorder(store, "run-a", lambda: tree["launcher"], interval_s=0.2, gpu_library=_no_gpu())
        recorder.start()
        try:
            _wait_for(lambda: resource_summary(store, "run-a")["samples"] >= 3)
        finally:
            assert recorder.stop() is True

    series = read_series(store, "run-a")
    assert series["t"].size >= 3 and np.all(np.diff(series["t"]) > 0)
    assert np.all(series["rank_count"] == 2)
    assert np.all(series["ranks_rss"] >= 120 * MIB)
    assert np.all(series["rank_rss_max"] >= 60 * MIB)
    assert np.all(series["ram_used"] > 0) and np.all(series["ram_available"] > 0)
    assert not np.isnan(series["cpu_pct"]).any()  # primed before the first row: every row has a CPU figure
    assert np.isnan(series["gpu_mem_used"]).all()

    details = read_process_samples(store, "run-a")
    last = details[-1]
    assert last["root_pid"] == tree["launcher"]
    ranks = {p["pid"]: p for p in last["processes"] if p["role"] == "rank"}
    assert set(ranks) == set(tree["ranks"])
    for pid in tree["ranks"]:
        assert ranks[pid]["rss_bytes"] >= 60 * MIB
        assert ranks[pid]["rank"] == tree["ranks"].index(pid)
        assert ranks[pid]["cmdline"].startswith(("python", "/"))

    summary = resource_summary(store, "run-a")
    assert summary["samples"] == series["t"].size
    assert summary["peak_rank_rss_bytes"] >= 60 * MIB
    assert summary["peak_ranks_rss_bytes"] >= 120 * MIB
    assert summary["peak_gpu_mem_bytes"] is None and summary["gpu_count"] == 0
    assert "libnvidia-ml" in summary["gpu_error"]
    assert summary["peak_host_used_bytes"] > 0 and summary["interval_s"] == 0.2


def test_recorder_before_the_launcher_exists_records_host_only_then_the_run(tmp_path):
    store = tmp_path / "runs.sqlite3"
    root: list[int | None] = [None]
    with run_tree(ranks=1, mib=1) as tree:
        recorder = RunResourceRecorder(store, "run-b", lambda: root[0], interval_s=0.1, gpu_library=_no_gpu())
        with recorder:
            _wait_for(lambda: resource_summary(store, "run-b")["samples"] >= 2)
            root[0] = tree["launcher"]
            _wait_for(lambda: np.nanmax(read_series(store, "run-b")["rank_count"]) == 1)
    series = read_series(store, "run-b")
    assert series["rank_count"][0] == 0 and np.isnan(series["ranks_rss"][0])
    assert recorder.last_sample is not None and recorder.last_sample.run is not None


def test_recorder_with_gpus_stores_per_gpu_series_and_the_runs_gpu_memory(tmp_path):
    store = tmp_path / "runs.sqlite3"
    with run_tree(ranks=2, mib=1) as tree:
        fake = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: tree["ranks"][0]}, pcie_delay_s=0.01)
        recorder = RunResourceRecorder(store, "run-g", lambda: tree["launcher"], interval_s=0.2, gpu_library=NvmlLibrary(fake, host_pid_namespace=True))
        with recorder:
            _wait_for(lambda: resource_summary(store, "run-g")["samples"] >= 4)
    series = read_series(store, "run-g")
    assert set(series["gpus"]) == {0, 1}
    gpu0 = series["gpus"][0]
    np.testing.assert_array_equal(gpu0["t"], series["t"])  # one time axis for host and GPUs
    assert np.all(gpu0["mem_used"] == 22437 * MIB) and np.all(gpu0["mem_total"] == 24564 * MIB)
    assert np.all(gpu0["run_mem"] == 22430 * MIB)
    assert np.all(series["gpu_mem_used"] == (22437 + 17253) * MIB)
    assert np.all(series["ranks_gpu_mem"] == (22430 + 17246) * MIB)
    # PCIe arrives from its own thread: the later samples have it.
    assert series["pcie_h2d_bps"][-1] == (439 + 488) * 1024
    info = series["info"]
    assert [g["name"] for g in info["gpus"]] == ["NVIDIA RTX A5000"] * 2 and info["gpu_error"] is None

    summary = resource_summary(store, "run-g")
    assert summary["peak_gpu_mem_bytes"] == 22437 * MIB and summary["gpu_count"] == 2
    assert summary["peak_run_gpu_mem_bytes"] == (22430 + 17246) * MIB
    assert fake.driver.initialised == 0


def _write(store, run_id: str, count: int, **kwargs) -> list:
    samples = [training_sample(i, **kwargs) for i in range(count)]
    writer = ResourceWriter(store, run_id, interval_s=1.0, started_at=T0)
    for sample in samples:
        writer.write(sample)
    writer.close()
    return samples


def test_old_samples_move_into_chunks_and_read_back_exactly(tmp_path):
    store = tmp_path / "runs.sqlite3"
    samples = _write(store, "run-c", 2 * CHUNK_SAMPLES + 123)
    db = sqlite3.connect(store)
    assert db.execute("SELECT COUNT(*) FROM resource_chunks WHERE gpu = -1").fetchone()[0] == 2
    assert db.execute("SELECT COUNT(*) FROM resource_chunks WHERE gpu = 1").fetchone()[0] == 2
    assert db.execute("SELECT COUNT(*) FROM resource_samples").fetchone()[0] == 123
    assert db.execute("SELECT COUNT(*) FROM resource_gpu_samples").fetchone()[0] == 2 * 123
    db.close()

    series = read_series(store, "run-c")
    np.testing.assert_array_equal(series["t"], [s.t for s in samples])
    np.testing.assert_array_equal(series["ram_used"], [s.host.ram_used_bytes for s in samples])
    np.testing.assert_array_equal(series["ranks_rss"], [s.run.ranks_rss_bytes for s in samples])
    np.testing.assert_array_equal(series["gpus"][1]["pcie_d2h_bps"], [s.gpus[1].pcie_d2h_bytes_per_s for s in samples])
    np.testing.assert_array_equal(series["nvme_write_bps"], [s.host.disks[0].write_bytes_per_s for s in samples])

    since = samples[700].t
    tail = read_series(store, "run-c", since=since)
    np.testing.assert_array_equal(tail["t"], [s.t for s in samples[700:]])
    np.testing.assert_array_equal(tail["gpus"][0]["t"], tail["t"])


def test_downsampling_keeps_peaks_lows_and_means(tmp_path):
    store = tmp_path / "runs.sqlite3"
    samples = _write(store, "run-d", 1000)
    full = read_series(store, "run-d")
    small = read_series(store, "run-d", max_points=100)
    assert 90 <= small["t"].size <= 100
    assert small["t"][0] == full["t"][0]
    assert small["ram_used"].max() == full["ram_used"].max()  # the peak survives
    assert small["ram_available"].min() == full["ram_available"].min()  # so does the low
    # A rate's mean over the run is kept (equal buckets here), so bytes moved = mean rate x time still holds.
    assert np.nanmean(small["pcie_h2d_bps"]) == pytest.approx(np.nanmean(full["pcie_h2d_bps"]), rel=0.02)
    np.testing.assert_array_equal(small["gpus"][0]["t"], small["t"])
    assert len(samples) == 1000


def test_a_reader_never_sees_a_sample_twice_or_loses_one_while_chunks_move(tmp_path):
    store = tmp_path / "runs.sqlite3"
    writer = ResourceWriter(store, "run-e", interval_s=1.0, started_at=T0)
    writer.write(training_sample(0))
    seen: list[int] = []
    problems: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            t = read_series(store, "run-e")["t"]
            if t.size and (np.any(np.diff(t) <= 0) or t.size != int(round(t[-1] - T0)) + 1):
                problems.append(f"{t.size} samples up to {t[-1] - T0}")
            seen.append(t.size)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, CHUNK_SAMPLES + 200):
            writer.write(training_sample(i))
    finally:
        done.set()
        reader.join()
        writer.close()
    assert problems == []
    assert seen == sorted(seen) and len(seen) > 3


def test_the_supervisors_tables_are_left_alone(tmp_path):
    store = tmp_path / "runs.sqlite3"
    db = sqlite3.connect(store)
    db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, launcher_pid INTEGER)")
    db.execute("INSERT INTO runs VALUES ('run-f', 1234)")
    db.commit()
    db.close()
    _write(store, "run-f", 5)
    db = sqlite3.connect(store)
    assert db.execute("SELECT * FROM runs").fetchall() == [("run-f", 1234)]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    ours = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - {"runs"}
    assert all(name.startswith("resource_") for name in ours)


def test_a_second_recording_of_the_same_run_appends(tmp_path):
    store = tmp_path / "runs.sqlite3"
    _write(store, "run-h", 10)
    writer = ResourceWriter(store, "run-h", interval_s=1.0, started_at=T0 + 100)
    for i in range(10, 15):
        writer.write(training_sample(i))
    writer.close()
    assert resource_summary(store, "run-h")["samples"] == 15


def test_nothing_recorded_reads_as_empty_without_creating_a_store(tmp_path):
    missing = tmp_path / "none.sqlite3"
    summary = resource_summary(missing, "run-x")
    assert summary["samples"] == 0 and summary["peak_rank_rss_bytes"] is None and summary["peak_gpu_mem_bytes"] is None
    assert summary["peak_host_used_bytes"] is None
    assert read_series(missing, "run-x")["t"].size == 0
    assert read_process_samples(missing, "run-x") == []
    assert not missing.exists()
    # A store that exists (the supervisor's) but has no resource tables yet.
    other = tmp_path / "runs.sqlite3"
    sqlite3.connect(other).execute("CREATE TABLE runs (id TEXT)").connection.close()
    assert resource_summary(other, "run-x")["samples"] == 0


def test_summary_peaks_on_known_values(tmp_path):
    store = tmp_path / "runs.sqlite3"
    samples = _write(store, "run-s", 50)
    summary = resource_summary(store, "run-s")
    assert summary["samples"] == 50
    assert summary["peak_rank_rss_bytes"] == max(s.run.max_rank_rss_bytes for s in samples)
    assert summary["peak_ranks_rss_bytes"] == max(s.run.ranks_rss_bytes for s in samples)
    assert summary["peak_host_used_bytes"] == max(s.host.ram_used_bytes for s in samples)
    assert summary["min_host_available_bytes"] == min(s.host.ram_available_bytes for s in samples)
    assert summary["peak_gpu_mem_bytes"] == max(g.memory_used_bytes for s in samples for g in s.gpus)
    assert summary["peak_ranks_locked_bytes"] == 4 * GIB
    assert summary["ram_total_bytes"] == 64 * GIB and summary["gpu_count"] == 2
    assert (summary["first_t"], summary["last_t"]) == (T0, T0 + 49)


def test_offload_view_aligns_the_series_and_turns_rates_into_bytes_per_step(tmp_path):
    store = tmp_path / "runs.sqlite3"
    step_s = 6
    samples = _write(store, "run-o", 10 * step_s + 1, step_s=step_s)
    steps = [(T0 + k * step_s, k) for k in range(11)]  # one log line per step, at each step's end
    view = offload_view(store, "run-o", steps=steps)

    assert view["t"].size == len(samples)
    for name in ("ranks_host_bytes", "host_available_bytes", "pcie_h2d_bps", "pcie_d2h_bps", "nvme_write_bps",
                 "gpu_mem_used_bytes", "gpu_util_pct"):
        assert view[name].shape == view["t"].shape, name
    assert view["ram_total_bytes"] == 64 * GIB
    assert view["gpu_mem_total_bytes"] == 2 * 24564 * MIB
    assert view["nvme_devices"] == [["/mnt/nvme/offload", "nvme0n1"]]

    figures = view["steps"]
    assert [f["step"] for f in figures] == list(range(1, 11))
    # Each sample's rate covers the second before it: step k spans samples 6(k-1)+1 .. 6k.
    for f in figures:
        first = (f["step"] - 1) * step_s + 1
        window = samples[first : first + step_s]
        assert f["seconds_per_step"] == pytest.approx(step_s)
        want_h2d = sum(2 * s.gpus[0].pcie_h2d_bytes_per_s for s in window)  # two GPUs, one second each
        assert f["pcie_h2d_bytes_per_step"] == pytest.approx(want_h2d)
        want_nvme = sum(s.host.disks[0].write_bytes_per_s for s in window)
        assert f["nvme_write_bytes_per_step"] == pytest.approx(want_nvme)
        assert f["peak_ranks_host_bytes"] == max(s.run.ranks_rss_bytes for s in window)
        assert 0 < f["mean_gpu_util_pct"] < 97
    assert {phase(i, step_s) for i in range(step_s)} == {"compute", "d2h", "adam", "h2d"}

    # Steps logged every 5th step: figures are per step all the same.
    sparse = offload_view(store, "run-o", steps=[(T0, 0), (T0 + 30, 5), (T0 + 60, 10)])["steps"]
    assert [f["steps"] for f in sparse] == [5, 5]
    assert sparse[0]["pcie_h2d_bytes_per_step"] == pytest.approx(figures[0]["pcie_h2d_bytes_per_step"])

    # Steps shorter than the 1 s sampling (none of the samples inside them): RSS and GPU utilisation of the sample
    # nearest each step's end, where one is close, never a blank row.
    quick = offload_view(store, "run-o", steps=[(T0 + 10.0 + 0.2 * k, k) for k in range(4)])["steps"]
    assert [f["peak_ranks_host_bytes"] for f in quick] == [samples[10].run.ranks_rss_bytes] * 2 \
        + [samples[11].run.ranks_rss_bytes]
    assert all(f["mean_gpu_util_pct"] is not None for f in quick)
    far = offload_view(store, "run-o", steps=[(T0 + 500.0, 0), (T0 + 500.2, 1)])["steps"]
    assert far[0]["peak_ranks_host_bytes"] is None  # no sample near: no figure

    # Downsampled series for a chart, figures still from every sample.
    small = offload_view(store, "run-o", steps=steps, max_points=10)
    assert small["t"].size <= 10 and small["steps"] == figures


def test_offload_view_without_gpus_or_nvme_gives_no_false_zeros(tmp_path):
    store = tmp_path / "runs.sqlite3"
    writer = ResourceWriter(store, "run-n", interval_s=1.0, started_at=T0)
    for i in range(10):
        s = training_sample(i, gpus=0, nvme=False)
        writer.write(s)
    writer.close()
    view = offload_view(store, "run-n", steps=[(T0, 0), (T0 + 9, 9)])
    (figure,) = view["steps"]
    assert figure["pcie_h2d_bytes_per_step"] is None and figure["nvme_write_bytes_per_step"] is None
    assert figure["disk_write_bytes_per_step"] is not None
    assert np.isnan(view["pcie_h2d_bps"]).all() and view["gpu_mem_total_bytes"] is None


def test_interval_is_checked_when_the_recorder_is_made(tmp_path):
    with pytest.raises(ValueError):
        RunResourceRecorder(tmp_path / "s.sqlite3", "r", lambda: None, interval_s=0.01)
    with pytest.raises(ValueError):
        RunResourceRecorder(tmp_path / "s.sqlite3", "r", lambda: None, interval_s=60)
    assert store_module.CHUNK_SAMPLES >= 60


def test_chart_reads_from_rollups_equal_a_brute_force_downsample(tmp_path):
    store = tmp_path / "runs.sqlite3"
    samples = _write(store, "run-r", 3 * CHUNK_SAMPLES + 201)  # chunks + fresh rows; t = T0 + 0 .. T0 + 2000
    full = read_series(store, "run-r")
    for since, points in ((None, 100), (T0 + 700, 65)):  # 700 cuts into the second chunk
        small = read_series(store, "run-r", since=since, max_points=points)
        keep = full["t"] >= (since or -np.inf)
        t = full["t"][keep]
        width = (t[-1] - t[0]) / points
        bucket = np.minimum(((t - t[0]) / width).astype(int), points - 1)
        ids = np.unique(bucket)
        np.testing.assert_array_equal(small["t"], [t[bucket == b][0] for b in ids])
        for name, agg in (("ram_used", max), ("ranks_rss", max), ("ram_available", min)):
            np.testing.assert_array_equal(small[name], [agg(full[name][keep][bucket == b]) for b in ids], err_msg=name)
        for name in ("pcie_h2d_bps", "cpu_pct", "ranks_cpu_pct"):
            np.testing.assert_allclose(small[name], [full[name][keep][bucket == b].mean() for b in ids], rtol=1e-9)
        gpu = small["gpus"][1]
        np.testing.assert_array_equal(gpu["t"], small["t"])
        np.testing.assert_array_equal(gpu["mem_used"], [full["gpus"][1]["mem_used"][keep][bucket == b].max() for b in ids])
        assert small["info"]["samples"] == int(keep.sum()) and small["info"]["first_t"] == t[0]

    # The summary reads the rollups too; its peaks and lows are exact.
    summary = resource_summary(store, "run-r")
    assert summary["samples"] == len(samples) == 2001
    assert summary["peak_host_used_bytes"] == max(s.host.ram_used_bytes for s in samples)
    assert summary["min_host_available_bytes"] == min(s.host.ram_available_bytes for s in samples)
    assert summary["peak_rank_rss_bytes"] == max(s.run.max_rank_rss_bytes for s in samples)
    assert summary["peak_gpu_mem_bytes"] == max(g.memory_used_bytes for s in samples for g in s.gpus)
    assert summary["mean_ranks_cpu_percent"] == pytest.approx(np.mean([s.run.ranks_cpu_percent for s in samples]))
    assert (summary["first_t"], summary["last_t"]) == (T0, T0 + 2000)


def test_a_store_rebuilt_under_the_writer_gets_the_next_samples(tmp_path):
    """A corrupt store is moved aside and rebuilt by whoever opens it next (store_rebuild.py), while the run's
    recorder still holds a connection: its samples must go on in the new store, not into the file kept aside."""
    from traindeck.backend.runs.record.run_store import RunStore

    store = tmp_path / "runs.sqlite3"
    RunStore(store).close()
    writer = ResourceWriter(store, "run-r", interval_s=1.0, started_at=T0)
    for i in range(3):
        writer.write(training_sample(i))
    writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(store, "r+b") as f:  # the store's header torn: SQLite says "file is not a database"
        f.write(b"\0" * 100)
    RunStore(store).close()  # the next open finds it corrupt: moved aside, rebuilt
    assert list(tmp_path.glob("runs.sqlite3.corrupt-*"))
    for i in range(3, 7):
        writer.write(training_sample(i))
    writer.close()
    assert list(np.round(read_series(store, "run-r")["t"] - T0)) == [3, 4, 5, 6]


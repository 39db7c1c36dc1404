"""Run history figures and two runs compared: real run directories, a real run store, real resource samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from fixtures.history_runs import T0, make_run, peak_gpu_bytes
from fixtures.monitor_samples import training_sample

from traindeck.backend.runs.control.compare import (
    RUN_DIR_MARK,
    RunNotFound,
    argv_changes,
    compare_runs,
    config_snapshot,
    flatten,
)
from traindeck.backend.runs.control.history import RunHistory, run_figures, seconds_per_step
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


def test_compare_two_runs_with_different_zero_stages(store):
    a = make_run(store, "gpt2", stage=2, micro_batch=8, seconds_per_step=0.5, port=29501)
    b = make_run(store, "gpt2", preset="zero2", stage=3, micro_batch=4, seconds_per_step=0.8, started=T0 + 3600,
                 port=29733)
    result = compare_runs(store, a.id, b.id)

    changed = {d.key: (d.a, d.b) for d in result.differences}
    assert changed["deepspeed.zero_optimization.stage"] == (2, 3)
    assert changed["deepspeed.train_micro_batch_size_per_gpu"] == (8, 4)
    # Paths into each run's own directory and the rendezvous port differ in every pair of runs: not a choice.
    assert "accelerate.deepspeed_config.deepspeed_config_file" not in changed
    assert "launch.command" not in changed
    assert result.same > 10
    assert result.differences[0].in_a and result.differences[0].in_b

    diff = result.unified_diff
    assert '-    "stage": 2,' in diff and '+    "stage": 3,' in diff
    assert f"gpt2 ({a.id})/ds_config.json" in diff and f"gpt2 ({b.id})/ds_config.json" in diff
    assert a.run_dir not in diff and b.run_dir not in diff

    figures = {row.what: row for row in result.figures}
    assert figures["Seconds per step"].a == "0.5 s" and figures["Seconds per step"].b == "0.8 s"
    assert figures["Seconds per step"].change == "1.60x (higher)"
    peak = peak_gpu_bytes(30)
    assert result.a.peak_gpu_mem_bytes == peak == result.b.peak_gpu_mem_bytes
    assert figures["Peak GPU memory (fullest GPU)"].change == "same"
    # The run's process tree: the launcher plus both ranks at their largest (training_sample's last sample).
    last = training_sample(29).run
    assert last is not None and result.a.peak_host_ram_bytes == last.tree_rss_bytes
    assert figures["Duration"].a == "1:20" and figures["Duration"].b == "1:50"
    assert {row.what for row in result.metrics} == {"loss"}


def test_config_differences_name_keys_set_in_one_run_only(store):
    a = make_run(store, "a", preset="zero2")
    b = make_run(store, "b", preset="zero3", started=T0 + 10)
    result = compare_runs(store, a.id, b.id)
    only_b = {d.key for d in result.differences if not d.in_a}
    assert "deepspeed.zero_optimization.stage3_max_live_parameters" in only_b
    row = next(d for d in result.differences if d.key == "deepspeed.zero_optimization.stage3_max_live_parameters")
    assert row.text("a") == "(not set)" and row.text("b") == "1000000000"


def test_snapshot_normalises_the_run_dir_and_reads_the_launch(store):
    run = make_run(store, "x", samples=0)
    snap = config_snapshot(run.run_dir)
    assert snap.values["accelerate.deepspeed_config.deepspeed_config_file"] == f"{RUN_DIR_MARK}/ds_config.json"
    assert snap.values["launch.nproc"] == 2 and snap.values["launch.launcher"] == "accelerate"
    assert "<port>" in snap.values["launch.command"]
    assert set(snap.texts) == {"ds_config.json", "accelerate_config.yaml", "command"}
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}, "x") == {"x.a.b": 1, "x.a.c": [1, 2], "x.d": {}}


def test_a_run_without_config_files_or_samples_still_compares(store, tmp_path):
    bare = RunRecord(id="bare-1", run_dir=str(tmp_path / "gone"), created_at=T0, name="bare", state="failed",
                     ended_at=T0 + 5)
    store.add_run(bare)
    other = make_run(store, "full")
    result = compare_runs(store, bare.id, other.id)
    assert result.a.peak_gpu_mem_bytes is None and result.a.seconds_per_step is None
    assert all(not d.in_a for d in result.differences)
    assert "/dev/null" in result.unified_diff
    with pytest.raises(RunNotFound):
        compare_runs(store, bare.id, "no-such-run")


def test_seconds_per_step_sources_in_order(store):
    record = RunRecord(id="r", run_dir="/x", created_at=T0, started_at=T0, ended_at=T0 + 110,
                       progress={"current": 100, "rate": 2.0, "unit": "it"}, state="succeeded")
    spans = {"loss": (10, 100, T0 + 20.0, T0 + 110.0, 10), "lr": (10, 20, T0 + 20.0, T0 + 21.0, 2)}
    assert seconds_per_step(record, {"train_steps_per_second": 4.0}, spans) == (0.25, "HF Trainer's train_steps_per_second")
    value, source = seconds_per_step(record, {}, spans)
    assert value == pytest.approx(1.0) and "'loss'" in source  # the longest span of logged steps
    assert seconds_per_step(record, {}, {}) == (0.5, "the progress bar's rate")
    no_rate = RunRecord(id="r", run_dir="/x", created_at=T0, started_at=T0, ended_at=T0 + 110,
                        progress={"current": 100, "unit": "it"}, state="succeeded")
    assert seconds_per_step(no_rate, {}, {})[0] == pytest.approx(1.1)
    samples_bar = RunRecord(id="r", run_dir="/x", created_at=T0, progress={"current": 100, "rate": 50.0,
                                                                            "unit": "samples"})
    assert seconds_per_step(samples_bar, {}, {}) == (None, "")


def test_history_lists_runs_newest_first_and_reuses_finished_figures(store, monkeypatch):
    old = make_run(store, "old", started=T0)
    new = make_run(store, "new", started=T0 + 7200)
    history = RunHistory(store.path)
    try:
        rows = history.rows()
        assert [r.run_id for r in rows] == [new.id, old.id]
        assert rows[0].seconds_per_step == pytest.approx(0.5) and rows[0].state == "succeeded"

        calls = []
        import traindeck.backend.runs.control.history as module

        real = module.run_figures
        monkeypatch.setattr(module, "run_figures", lambda s, r, now=None: calls.append(r.id) or real(s, r, now))
        me = psutil.Process()  # this test stands in for the live run's supervisor
        store.add_run(RunRecord(id="live", run_dir="/nowhere", created_at=T0 + 9000, name="live", started_at=T0 + 9000,
                                progress={"current": 5, "rate": 0.5, "unit": "it"}, supervisor_pid=me.pid,
                                supervisor_started=me.create_time()))
        rows = history.rows()
        assert [r.run_id for r in rows] == ["live", new.id, old.id]
        assert calls == ["live"]  # finished runs come from the cache; the running one is read afresh
        assert rows[0].seconds_per_step == pytest.approx(2.0) and not rows[0].finished
    finally:
        history.close()


def test_history_marks_a_run_whose_supervisor_is_gone_as_lost(store, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store.add_run(RunRecord(id="orphan", run_dir=str(tmp_path), created_at=T0, name="orphan", started_at=T0,
                            supervisor_pid=gone.pid, supervisor_started=T0))
    kept = RunHistory(store.path, mark_lost=False)  # the demo's store: its runs have no supervisor at all
    history = RunHistory(store.path)
    try:
        assert [r.state for r in kept.rows()] == ["running"]
        assert [r.state for r in history.rows()] == ["lost"]
        record = store.get_run("orphan")
        assert record is not None and record.diagnosis is not None and record.diagnosis["kind"] == "lost"
    finally:
        history.close()
        kept.close()


def test_history_of_a_store_that_does_not_exist_is_empty_and_creates_nothing(tmp_path):
    history = RunHistory(tmp_path / "none.sqlite3")
    assert history.rows() == []
    assert not (tmp_path / "none.sqlite3").exists()


def test_figures_read_final_metrics_and_throughput(store):
    run = make_run(store, "hf", metrics=[("loss", 10, T0 + 40, 1.5, 0), ("train_samples_per_second", None, T0 + 90, 812.5, 0)])
    figures = run_figures(store, store.get_run(run.id))
    assert figures.final_metrics == {"loss": 1.5, "train_samples_per_second": 812.5}
    assert (figures.throughput, figures.throughput_unit) == (812.5, "samples/s")
    assert json.dumps(figures.final_metrics)


def test_argv_changes_name_the_option_whose_value_differs():
    a = ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", "<run dir>/ds_config.json",
         "--steps", "100", "--batch-size", "4"]
    b = a[:7] + ["600"] + a[8:]
    changes = argv_changes(a, b)
    assert [(c.option, c.a, c.b, c.position) for c in changes] == [("--steps", ("100",), ("600",), 7)]
    assert changes[0].key == "launch.argv --steps"


def test_argv_changes_of_an_inserted_flag_and_of_option_equals_value():
    a = ["python", "train.py", "--lr=1e-4", "--epochs", "3"]
    b = ["python", "train.py", "--lr=3e-4", "--fp16", "--epochs", "3"]
    changes = argv_changes(a, b)
    # The inserted flag does not make "--epochs 3" look different: a sequence match, not a position-wise zip.
    assert [(c.key, c.a, c.b) for c in changes] == [("launch.argv --lr", ("--lr=1e-4",), ("--lr=3e-4",)),
                                                    ("launch.argv[3]", (), ("--fp16",))]
    assert argv_changes(a, a) == []
    removed = argv_changes(a, a[:2])
    assert [(c.a, c.b) for c in removed] == [(("--lr=1e-4", "--epochs", "3"), ())]


def test_compare_shows_the_one_script_argument_that_differs(store):
    a = make_run(store, "demo", port=29501)
    b = make_run(store, "demo", started=T0 + 60, port=29502)
    for run, steps in ((a, "100"), (b, "600")):
        path = Path(run.run_dir) / "command.json"
        command = json.loads(path.read_text())
        command["argv"] = list(command["argv"]) + ["--steps", steps, "--log-every", "5"]
        command["command_line"] = " ".join(command["argv"])
        path.write_text(json.dumps(command))
    result = compare_runs(store, a.id, b.id)
    launch_rows = [(d.key, d.text("a"), d.text("b")) for d in result.differences if d.key.startswith("launch.")]
    assert launch_rows == [("launch.argv --steps", "100", "600")]
    # The unified diff lists one argument a line, so the differing one is its own -/+ pair.
    assert "\n-100\n+600\n" in result.unified_diff


def test_a_run_ended_by_a_signal_is_named_by_the_signal(store):
    from traindeck.backend.runs.control.compare import figure_rows

    run = make_run(store, "stopped")
    with RunStore() as other:
        other.finish_run(run.id, "stopped", exit_code=-2)
        record = other.get_run(run.id)
    figures = run_figures(store, record)
    state = next(row for row in figure_rows(figures, figures) if row.what == "State")
    assert state.a == "stopped (SIGINT)"

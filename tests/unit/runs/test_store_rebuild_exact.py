"""A rebuilt run store gets back what the run folders and the files the runs left still hold: printed metric values
made exact again from the TensorBoard event files that are still on disk (torch's SummaryWriter writes them), each
run from its own files only. Real run folders, a real store corrupted for real, real event files."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from support.trainer_values import LOSSES, LRS, f32

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from traindeck.backend.core.fileio import atomic_write_text  # noqa: E402
from traindeck.backend.core.paths import run_store_path  # noqa: E402
from traindeck.backend.runs.record.folder_record import write_end, write_identity  # noqa: E402
from traindeck.backend.runs.record.layout import create_run_dir  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402
from traindeck.backend.runs.record.tensorboard import EVENT_PREFIX  # noqa: E402


def run_folder(name: str, cwd: Path, created_at: float, log: str) -> RunRecord:
    """A run folder as start_run and the supervisor leave it: command.json (argv, cwd), run.json, output.log."""
    run_dir = create_run_dir()
    argv = [sys.executable, "train.py", "--output_dir", "out"]
    atomic_write_text(run_dir.command, json.dumps({"argv": argv, "cwd": str(cwd), "launcher": "python", "env": {}}))
    write_identity(run_dir.path, run_dir.run_id, name=name, preset=None, script="train.py", created_at=created_at)
    run_dir.output.write_text(log)
    return RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=created_at, name=name,
                     script="train.py", argv=argv, cwd=str(cwd))


def end(record: RunRecord, ended_at: float) -> None:
    write_end(record.run_dir, record.id, "succeeded", exit_code=0, ended_at=ended_at, diagnosis=None,
              state_detail="")


def trainer_lines(steps: range) -> str:
    """The HF Trainer's printed logs (each float as .4g, no step on the line)."""
    return "".join(str({"loss": f"{LOSSES[s - 1]:.4g}", "learning_rate": f"{LRS[s - 1]:.4g}",
                        "epoch": f"{s / 16:.4g}"}) + "\n" for s in steps)


def written_as_of(logdir: Path, created: float, modified: float) -> None:
    """The event file in `logdir` as its writer would have left it, created at `created` (its name holds that
    second) and last written at `modified`."""
    [path] = logdir.glob(EVENT_PREFIX + "*")
    path = path.rename(logdir / f"{EVENT_PREFIX}{int(created)}.host.4242.0")
    os.utime(path, (modified, modified))


def values(store: RunStore, run_id: str, name: str) -> list[float]:
    return [value for _step, _t, value in store.metric_series(run_id, name)]


def test_a_rebuilt_store_makes_printed_values_exact_again_from_the_event_files_left(tmp_path: Path) -> None:
    now = time.time()
    work = tmp_path / "work"  # one working directory and --output_dir for two runs, as a user reruns a script
    # An older run: the Trainer's printed dicts, its event file in out/runs/<date_host>, named as of its start.
    older = run_folder("older", work, now - 100, trainer_lines(range(1, 7)))
    writer = SummaryWriter(str(work / "out" / "runs" / "older"))
    for step in range(1, 7):
        for key, value in (("loss", LOSSES[step - 1]), ("learning_rate", LRS[step - 1]), ("epoch", step / 16)):
            writer.add_scalar(f"train/{key}", value, step)
    writer.close()
    written_as_of(work / "out" / "runs" / "older", now - 90, now - 55)
    end(older, now - 50)
    # A newer run in the same folders: its loss printed with steps (4 decimals), and a tag nothing prints.
    exact = {step: 1.0 / 3 + step / 7 for step in range(1, 5)}
    newer = run_folder("newer", work, now - 40, "".join(f"step {s} loss {v:.4f}\n" for s, v in exact.items()))
    writer = SummaryWriter(str(work / "out" / "runs" / "newer"))
    for step, value in exact.items():
        writer.add_scalar("train/loss", value, step)
        writer.add_scalar("eval/accuracy", step / 10, step)
    writer.close()
    end(newer, time.time())
    # A run whose event files are gone: its printed values stay.
    gone = run_folder("gone", tmp_path / "elsewhere", now - 30, trainer_lines(range(1, 4)))
    end(gone, now - 20)
    with RunStore() as store:
        for record in (older, newer, gone):
            store.add_run(record)
    with open(run_store_path(), "r+b") as handle:
        handle.write(b"this is not sqlite at all")

    started = time.monotonic()
    with RunStore() as store:
        took = time.monotonic() - started
        said = store.rebuilt
        assert said is not None
        assert "(3 series made exact from the TensorBoard event files of 2 runs)" in said, said
        assert "metric values stay as printed where no TensorBoard event file is left" in said
        assert values(store, older.id, "loss") == [f32(v) for v in LOSSES]  # 3.252 -> 3.2518253..., both 3.23s
        # float32 holds 5e-05 as 4.99999987e-05: the printed 5e-05 (and 2.5e-05) says as much and stays.
        assert values(store, older.id, "learning_rate") == [5e-05, f32(LRS[1]), f32(LRS[2]), 2.5e-05, f32(LRS[4]),
                                                          f32(LRS[5])]
        assert values(store, older.id, "epoch") == [step / 16 for step in range(1, 7)]
        assert set(store.last_metrics(older.id)) == {"loss", "learning_rate", "epoch"}  # not the newer run's tag
        assert {step: value for step, _t, value in store.metric_series(newer.id, "loss")} == \
            {step: f32(value) for step, value in exact.items()}
        assert set(store.last_metrics(newer.id)) == {"loss", "eval/accuracy"}  # not the older run's tags
        assert values(store, newer.id, "eval/accuracy") == [f32(step / 10) for step in range(1, 5)]
        assert values(store, gone.id, "loss") == [3.252, 3.225, 3.234]
        assert store.metric_revisions_after(older.id, 0) == []  # nobody read them as printed: nothing to follow
    assert took < 10, took


def test_event_files_are_not_read_past_the_rebuilds_time_for_reading(tmp_path: Path) -> None:
    from traindeck.backend.runs.record.tensorboard import record_again

    writer = SummaryWriter(str(tmp_path / "out" / "runs" / "exp"))
    for step in range(1, 4):
        writer.add_scalar("train/loss", LOSSES[step - 1], step)
    writer.close()
    printed = [("loss", step, time.time(), round(LOSSES[step - 1], 3), None) for step in range(1, 4)]
    with RunStore(tmp_path / "runs.db") as store:
        store.add_run(RunRecord(id="r1", run_dir=str(tmp_path), created_at=time.time() - 10))
        spent = record_again(store, "r1", printed, argv=["train.py", "--output_dir", "out"], cwd=str(tmp_path),
                             since=time.time() - 11, until=time.time(), deadline=time.monotonic())
        assert spent is not None and spent.cut and (spent.exact, spent.rows) == (0, 0)
        assert values(store, "r1", "loss") == [3.252, 3.225, 3.234]  # as printed
        store.add_run(RunRecord(id="r2", run_dir=str(tmp_path), created_at=time.time() - 10))
        again = record_again(store, "r2", printed, argv=["train.py", "--output_dir", "out"], cwd=str(tmp_path),
                             since=time.time() - 11, until=time.time(), deadline=time.monotonic() + 30)
        assert again is not None and not again.cut and again.exact == 1
        assert values(store, "r2", "loss") == [f32(v) for v in LOSSES[:3]]

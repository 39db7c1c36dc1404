"""The TensorBoard reader on real event files (TensorBoard's own writer): a tag the script also prints is read
once, even when the event file is written before the printed line reaches the run store, as the HF Trainer
does (it writes and flushes `train/loss`, then prints {'loss': ...})."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

from traindeck.backend.runs.record.tensorboard import TensorBoardReader  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(writer: EventFileWriter, step: int, **values: float) -> None:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)
                                         for tag, v in values.items()])
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.flush()


def reader_on(logdir: Path, clock: Clock) -> TensorBoardReader:
    return TensorBoardReader([logdir], since=0.0, clock=clock, hold_s=10.0)


def test_a_tag_written_before_its_printed_twin_is_not_charted_twice(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    clock = Clock()
    reader = reader_on(tmp_path, clock)
    write(writer, 10, **{"train/loss": 2.3012, "train/grad_norm": 6.4})
    assert reader.poll(set()).rows == []  # nothing printed yet: both tags wait
    clock.now += 2.0
    write(writer, 20, **{"train/loss": 2.2987, "train/grad_norm": 5.1})
    # The Trainer's printed {'loss': ..., 'grad_norm': ...} has reached the store now.
    assert reader.poll({"loss", "grad_norm"}).rows == []
    clock.now += 30.0
    write(writer, 30, **{"train/loss": 2.2901})
    assert reader.poll({"loss", "grad_norm"}, final=True).rows == []
    assert reader.written == set()
    writer.close()


def test_a_tag_nothing_prints_is_written_after_the_hold_with_every_value(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    clock = Clock()
    reader = reader_on(tmp_path, clock)
    write(writer, 1, **{"eval/accuracy": 0.1})
    assert reader.poll(set()).rows == []
    clock.now += 4.0
    write(writer, 2, **{"eval/accuracy": 0.2})
    assert reader.poll({"loss"}).rows == []
    clock.now += 6.0  # the hold is over: every value read so far, in order
    rows = reader.poll({"loss"}).rows
    assert [(name, step, value) for name, step, _t, value, _r in rows] == [
        ("eval/accuracy", 1, pytest.approx(0.1)), ("eval/accuracy", 2, pytest.approx(0.2))]
    write(writer, 3, **{"eval/accuracy": 0.3})
    assert [(n, s) for n, s, *_ in reader.poll({"loss"}).rows] == [("eval/accuracy", 3)]  # decided: at once
    assert reader.written == {"eval/accuracy"}
    writer.close()


def test_a_run_that_ends_within_the_hold_keeps_its_tensorboard_only_values(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    clock = Clock()
    reader = reader_on(tmp_path, clock)
    write(writer, 5, **{"train/loss": 0.5})
    writer.close()
    rows = reader.poll(set(), final=True).rows
    assert [(n, s) for n, s, *_ in rows] == [("train/loss", 5)]


def test_a_tag_whose_printed_twin_already_exists_is_left_out_at_once(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    reader = reader_on(tmp_path, Clock())
    write(writer, 5, **{"eval/loss": 0.4, "train/total_flos": 1e9})
    assert reader.poll({"eval_loss"}).rows == []
    assert reader.tags["eval/loss"] is None
    writer.close()


def test_an_earlier_runs_file_still_written_in_the_same_folder_is_not_read(tmp_path: Path) -> None:
    # An earlier run, still going, logs to the folder this run logs to: its file is modified after this run's start
    # but was created (the stamp its writer puts in its name) before it.
    started = time.time()
    earlier = EventFileWriter(str(tmp_path / "other"))
    write(earlier, 7, **{"train/loss": 9.0})
    earlier.close()
    old = Path(earlier.get_logdir()).glob("events.out.tfevents.*").__next__()
    stamp, rest = old.name.removeprefix("events.out.tfevents.").split(".", 1)
    moved = tmp_path / f"events.out.tfevents.{int(stamp) - 600}.{rest}"
    old.rename(moved)
    assert moved.stat().st_mtime >= started - 1.0  # modified since the run started (the reader's since): only its name tells it apart
    mine = EventFileWriter(str(tmp_path))
    write(mine, 1, **{"train/loss": 0.5})
    mine.close()
    reader = TensorBoardReader([tmp_path], since=started - 1.0, clock=Clock(), hold_s=10.0)
    rows = reader.poll(set(), final=True).rows
    assert [(n, s, v) for n, s, _t, v, _r in rows] == [("train/loss", 1, pytest.approx(0.5))]

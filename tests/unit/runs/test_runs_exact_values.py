"""Printed values made exact from their TensorBoard twins, on real event files (torch's SummaryWriter), printed
lines parsed as the supervisor parses them, and a real run store: the values stored, the last metrics and a live
view's series become TensorBoard's for the steps it has; a same-named tag holding another quantity stays apart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.trainer_values import LOSSES, LRS, f32

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from traindeck.backend.logparse import Line, Metric, OutputParser  # noqa: E402
from traindeck.backend.runs.control import view as watch  # noqa: E402
from traindeck.backend.runs.control.watched_run import WatchedRun  # noqa: E402
from traindeck.backend.runs.record.exact_values import (  # noqa: E402
    Shown,
    half_unit,
    more_exact,
    same_number,
    twin_names,
)
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402
from traindeck.backend.runs.record.tensorboard import TensorBoardReader, TensorBoardRecorder  # noqa: E402

RUN = "r1"


class Printed:
    """Lines printed by a script, parsed and recorded as the supervisor records them (time.time() when read)."""

    def __init__(self, store: RunStore) -> None:
        self.store, self.parser = store, OutputParser()

    def line(self, text: str) -> None:
        metrics = [item for item in self.parser.feed(Line(text)) + self.parser.flush() if isinstance(item, Metric)]
        self.store.add_metrics(RUN, [(m.name, m.step, time.time(), float(m.value), m.rank) for m in metrics])


def trainer_log(writer: SummaryWriter, printed: Printed, step: int, flush: bool = True) -> None:
    """What transformers 5's Trainer does at a log step: the event file first (TensorBoardCallback, flushed), then
    the printed dict (PrinterCallback: each float as .4g)."""
    logs = {"loss": LOSSES[step - 1], "learning_rate": LRS[step - 1], "epoch": step / 16}
    for key, value in logs.items():
        writer.add_scalar(f"train/{key}", value, step)
    if flush:
        writer.flush()
    printed.line(str({k: f"{v:.4g}" for k, v in logs.items()}))


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    with RunStore(tmp_path / "runs.db") as opened:
        opened.add_run(RunRecord(id=RUN, run_dir=str(tmp_path), created_at=time.time()))
        yield opened


def recorder_on(store: RunStore, logdir: Path) -> TensorBoardRecorder:
    return TensorBoardRecorder(store, RUN, TensorBoardReader([logdir], since=0.0))


def values(store: RunStore, name: str) -> list[float]:
    return [value for _step, _t, value in store.metric_series(RUN, name)]


def test_printed_trainer_values_become_tensorboards_exact_values(store: RunStore, tmp_path: Path) -> None:
    logdir = tmp_path / "runs" / "exp"
    writer = SummaryWriter(str(logdir))
    printed = Printed(store)
    recorder = recorder_on(store, logdir)
    for step in range(1, 6):
        trainer_log(writer, printed, step)
    recorder.poll()
    assert [step for step, _t, _v in store.metric_series(RUN, "loss")] == [None] * 5  # printed without steps
    assert values(store, "loss") == [f32(v) for v in LOSSES[:5]]  # 3.252 -> 3.2518253..., both 3.23s their own
    assert store.last_metrics(RUN)["loss"] == f32(LOSSES[4])
    # float32 holds 5e-05 as 4.99999987e-05: the printed 5e-05 says as much and stays; 4.167e-05 does not.
    assert values(store, "learning_rate") == [5e-05, f32(LRS[1]), f32(LRS[2]), 2.5e-05, f32(LRS[4])]
    assert values(store, "epoch") == [step / 16 for step in range(1, 6)]  # exact in print and in float32 alike
    assert not {"train/loss", "train/learning_rate", "train/epoch"} & set(store.last_metrics(RUN))  # one series

    printed.line("{'loss': '3.23', 'learning_rate': '8.333e-06', 'epoch': '0.375'}")  # its event not read yet
    recorder.poll()
    assert store.last_metrics(RUN)["loss"] == 3.23  # the printed value, until the event is there
    for key, value in (("loss", LOSSES[5]), ("learning_rate", LRS[5]), ("epoch", 6 / 16)):
        writer.add_scalar(f"train/{key}", value, 6)
    writer.close()
    recorder.poll(final=True)
    assert store.last_metrics(RUN)["loss"] == f32(LOSSES[5])
    assert recorder.written == 0 and recorder.revised == 6 + 4  # every loss, 4 of the learning rates


def test_values_printed_with_steps_match_by_step(store: RunStore, tmp_path: Path) -> None:
    """A line with its step (the Trainer's bar, a script's own print) is matched to the value of that step; a step
    TensorBoard was not given keeps its printed value."""
    writer = SummaryWriter(str(tmp_path))
    printed = Printed(store)
    recorder = recorder_on(store, tmp_path)
    exact = {step: 1.0 / 3 + step / 7 for step in range(1, 9)}
    for step, value in exact.items():
        if step % 2 == 0:  # TensorBoard every other step; the print every step
            writer.add_scalar("train/loss", value, step)
            writer.flush()
        printed.line(f"step {step} loss {value:.4f}")
    recorder.poll()
    stored = {step: value for step, _t, value in store.metric_series(RUN, "loss")}
    assert sorted(stored) == list(range(1, 9))
    for step, value in exact.items():
        assert stored[step] == (f32(value) if step % 2 == 0 else round(value, 4)), step
    writer.close()


def test_a_same_named_tag_holding_another_quantity_becomes_a_series_of_its_own(store: RunStore,
                                                                               tmp_path: Path) -> None:
    """The script prints each batch's loss and writes a running mean as train/loss: not the same numbers, so the
    printed values stay and train/loss is charted as itself, every value of it."""
    writer = SummaryWriter(str(tmp_path))
    printed = Printed(store)
    recorder = recorder_on(store, tmp_path)
    batch = [2.3026, 2.1874, 1.9953, 1.8121, 1.7402]  # the first mean is the first loss: one agreement of three
    for step in range(1, 6):
        writer.add_scalar("train/loss", sum(batch[:step]) / step, step)
        writer.flush()
        printed.line(f"step {step} loss {batch[step - 1]:.4f}")
        recorder.poll()
    assert values(store, "loss") == batch
    assert [step for step, _t, _v in store.metric_series(RUN, "train/loss")] == [1, 2, 3, 4, 5]
    assert values(store, "train/loss") == [f32(sum(batch[:s]) / s) for s in range(1, 6)]
    assert recorder.revised == 0
    writer.close()


def test_a_live_view_takes_the_exact_values_of_rows_it_read_before(store: RunStore, tmp_path: Path) -> None:
    """The dashboard reads only rows newer than its mark: a row revised after it was read comes back as a
    revision, and the held series and the latest value take the exact value."""
    writer = SummaryWriter(str(tmp_path))
    printed = Printed(store)
    recorder = recorder_on(store, tmp_path)
    model = WatchedRun()
    model.open(RUN)

    def read() -> set[str]:
        generation = model.begin_poll()
        assert generation is not None
        change = model.apply(generation, watch.read_view(store, RUN, **model.read_arguments()))
        assert change is not None
        return change.series

    trainer_log(writer, printed, 1)
    read()
    read()  # the loss series read whole
    for step in (2, 3):
        trainer_log(writer, printed, step)
    assert "loss" in read()
    assert model.metrics["loss"] == 3.234 and list(model.series["loss"].points()[1]) == [3.252, 3.225, 3.234]
    recorder.poll()
    assert "loss" in read()  # revised
    assert model.metrics["loss"] == f32(LOSSES[2])
    assert list(model.series["loss"].points()[1]) == [f32(v) for v in LOSSES[:3]]
    assert model.metrics["learning_rate"] == f32(LRS[2])
    writer.close()


def test_the_digits_a_printed_value_shows_decide_what_it_can_be_the_rounding_of() -> None:
    assert half_unit(3.252) == pytest.approx(0.0005) and half_unit(5e-05) == pytest.approx(5e-06)
    assert half_unit(117400000.0) == pytest.approx(50_000)  # "1.174e+08" from .4g
    assert half_unit(0.0) == 0.0
    assert half_unit(1.8, Shown(5, 4)) == pytest.approx(0.00005)  # "1.8000" among .4f values
    assert half_unit(0.619, Shown(5, 4)) == pytest.approx(0.00005)  # "0.6190": 4 digits, 4 decimals
    assert half_unit(1.8, Shown(4, 3)) == pytest.approx(0.0005)  # "1.8" among .4g values (4 digits)
    assert same_number(3.252, f32(3.2518253326416016), True) and not same_number(3.25, 3.2449, False)
    assert same_number(117400000.0, 117374976.0, True)
    assert not more_exact(5e-05, f32(5e-05), True) and more_exact(3.252, f32(3.2518253), True)
    assert twin_names("train/loss")[:2] == ("train/loss", "loss")
    assert twin_names("eval/loss")[:2] == ("eval/loss", "eval_loss")

"""Up to eight runs side by side and one metric's curves of several runs: real run directories and a real store."""

from __future__ import annotations

import pytest
from fixtures.history_runs import T0, make_run

from traindeck.backend.runs import compare_many, history_table, overlay
from traindeck.backend.runs.control.compare import RunNotFound
from traindeck.backend.runs.control.history import run_figures
from traindeck.backend.runs.record.run_store import RunStore


@pytest.fixture
def store():
    with RunStore() as s:
        yield s


def _loss(steps: int, sps: float, offset: float = 0.0) -> list[tuple[str, int | None, float, float, int | None]]:
    return [("loss", s, T0 + 30 + s * sps, 3.0 - s / 300 + offset, 0) for s in range(10, steps + 1, 10)]


def test_three_runs_side_by_side_with_their_settings_and_commands(store):
    a = make_run(store, "gpt2", stage=2, micro_batch=8, seconds_per_step=0.5, port=29501)
    b = make_run(store, "gpt2", stage=3, micro_batch=8, seconds_per_step=0.8, port=29502, started=T0 + 3600)
    c = make_run(store, "gpt2", stage=3, micro_batch=4, seconds_per_step=0.4, port=29503, started=T0 + 7200)
    result = compare_many(store, [a.id, b.id, c.id])
    assert result.labels == ("A", "B", "C")
    assert [r.run_id for r in result.runs] == [a.id, b.id, c.id]
    settings = {row.what: row.values for row in result.differences}
    assert settings["deepspeed.zero_optimization.stage"] == ("2", "3", "3")
    assert settings["deepspeed.train_micro_batch_size_per_gpu"] == ("8", "8", "4")
    assert not any("port" in key or "main_process_port" in key for key in settings)  # normalised away
    assert result.same > 10
    step_time = next(row for row in result.figures if row.what == "Seconds per step")
    assert step_time.values == ("0.5 s", "0.8 s", "0.4 s")
    assert step_time.changes == ("", "1.60x (higher)", "0.80x (lower)")
    throughput = next(row for row in result.figures if row.what == "Throughput")
    assert throughput.values == ("32 samples/s", "20 samples/s", "20 samples/s")
    assert len(result.command) >= 8 and all(len(row.values) == 3 for row in result.command)
    assert [row.values for row in result.command if row.differs] == []  # ports and run dirs normalised
    assert "stage" in result.unified_diff and result.unified_diff.count("+++ ") >= 2


def test_the_pair_comparison_is_the_same_as_before_and_limits_hold(store):
    a = make_run(store, "one")
    b = make_run(store, "two", stage=3, started=T0 + 60)
    assert compare_many(store, [a.id, b.id]).differences[0].values == ("2", "3")
    with pytest.raises(ValueError):
        compare_many(store, [a.id])
    with pytest.raises(ValueError):
        compare_many(store, [a.id, b.id] * 5)
    with pytest.raises(RunNotFound):
        compare_many(store, [a.id, "nope"])


def test_overlay_cuts_every_run_to_the_last_step_they_all_reached(store):
    long = make_run(store, "long", steps=216, metrics=_loss(216, 0.5) + [("acc", 10, T0 + 40, 0.5, 0)])
    short = make_run(store, "short", steps=100, metrics=_loss(100, 0.5, offset=0.1), started=T0 + 600)
    whole = overlay(store, [long.id, short.id])
    assert whole.metric == "loss" and whole.metrics == ("loss",)  # acc is not logged by both
    assert [c.label for c in whole.curves] == ["A: long", "B: short"]
    assert [c.steps[-1] for c in whole.curves] == [210, 100]
    assert whole.common_step == 100 and whole.steps_differ
    cut = overlay(store, [long.id, short.id], equal_steps=True)
    assert [c.steps[-1] for c in cut.curves] == [100, 100]
    assert cut.curves[0].values[-1] == pytest.approx(3.0 - 100 / 300)
    assert [c.last_step for c in cut.curves] == [210, 100]


def test_history_table_says_the_step_of_a_final_value_when_runs_ended_apart(store):
    long = make_run(store, "long", steps=216, metrics=_loss(216, 0.5))
    short = make_run(store, "short", steps=100, metrics=_loss(100, 0.5), started=T0 + 600)
    runs = [run_figures(store, store.get_run(r.id)) for r in (short, long)]
    table = history_table(runs)
    assert table.final_steps_differ
    assert [r.final_text(table.final_steps_differ) for r in table.rows] == ["2.667 at step 100", "2.3 at step 210"]
    same = history_table([runs[0], run_figures(store, store.get_run(make_run(store, "x", steps=100).id))])
    assert not same.final_steps_differ

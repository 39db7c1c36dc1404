"""History's "which was best" table over a real run store: sweeps grouped, swept values, final and best values."""

from __future__ import annotations

from pathlib import Path

from fixtures.history_runs import T0, make_run

from traindeck.backend.runs.control.history import RunHistory
from traindeck.backend.runs.control.history_table import default_metric, higher_is_better, history_table
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.record.sweep_mark import SWEEP_FILE, SweepMark, read_sweep_mark, write_sweep_mark


def _run(store: RunStore, name: str, started: float, values: list[float], sweep: SweepMark | None = None,
         metric: str = "loss"):  # type: ignore[no-untyped-def]
    run = make_run(store, name, started=started, samples=0,
                   metrics=[(metric, step, started + step, v, 0) for step, v in enumerate(values, 1)])
    if sweep is not None:
        write_sweep_mark(run.run_dir, sweep)
    return run


def test_two_interleaved_sweeps_are_grouped_each_with_its_own_best():
    with RunStore() as store:
        a1 = _run(store, "a-lr=1", T0, [3.0, 2.0], SweepMark("A", "a", 2, {"lr": "1"}))
        b1 = _run(store, "b-stage=2", T0 + 10, [3.0, 1.0], SweepMark("B", "b", 3, {"zero_stage": "2"}))
        a2 = _run(store, "a-lr=2", T0 + 20, [3.0, 1.5, 1.7], SweepMark("A", "a", 2, {"lr": "2"}))
        lone = _run(store, "lone", T0 + 30, [0.5])
        b2 = _run(store, "b-stage=3", T0 + 40, [3.0, 0.9], SweepMark("B", "b", 3, {"zero_stage": "3"}))
    history = RunHistory()
    try:
        runs = history.rows()
    finally:
        history.close()
    table = history_table(runs)
    assert table.metric == "loss" and not table.higher_is_better
    assert table.params == ("lr", "zero_stage")  # the oldest sweep's names first
    order = [r.run.run_id for r in table.rows]
    assert order == [b2.id, b1.id, lone.id, a2.id, a1.id]  # each sweep at the place of its newest run
    rows = {r.run.run_id: r for r in table.rows}
    assert rows[a2.id].params == ("2", "") and rows[b1.id].params == ("", "2") and rows[lone.id].params == ("", "")
    assert (rows[a2.id].final, rows[a2.id].best) == (1.7, 1.5)  # final is the last value, best the lowest
    assert [i for i, r in rows.items() if r.is_best] == [b2.id, a2.id]
    assert rows[b1.id].group_label == "b: zero_stage (2 of 3 runs)" and rows[a1.id].group_label == "a: lr (2 runs)"
    assert rows[lone.id].group == "" and not rows[lone.id].is_best
    assert rows[a2.id].sort_time == T0 + 20 and T0 + 19 < rows[a1.id].sort_time < T0 + 20 < rows[lone.id].sort_time
    keys = dict(zip(order, table.param_sort_keys(), strict=True))
    assert keys[a2.id][0] == 2.0 and keys[a1.id][0] == 1.0  # numeric values sort as numbers


def test_a_sweeps_group_compares_its_best_runs_first_and_counts_those_left_out():
    from traindeck.backend.runs.control.history_table import MAX_COMPARED

    count = MAX_COMPARED + 3
    with RunStore() as store:
        runs = [_run(store, f"s-lr={i}", T0 + i, [3.0, 1.0 + i / 10], SweepMark("S", "s", count, {"lr": str(i)}))
                for i in range(count)]
        store.finish_run(runs[0].id, "failed", ended_at=T0 + 50, exit_code=1)  # the lowest loss, but no result
        lone = _run(store, "lone", T0 + 100, [0.5])
        single = _run(store, "p-x=1", T0 + 200, [2.0], SweepMark("P", "p", 3, {"x": "1"}))
    history = RunHistory()
    try:
        table = history_table(history.rows())
    finally:
        history.close()
    group = table.sweeps["S"]
    assert group.compare_ids == tuple(r.id for r in runs[1:MAX_COMPARED + 1])  # best (lowest) first, failed last
    assert group.left_out == 3 and "3 more left out" in group.detail and group.key == "sweep:S"
    assert group.label == f"sweep s: lr ({count} runs), best: s-lr=1 (lowest loss reached)" and group.state == "finished"
    assert set(group.run_ids) == {r.id for r in runs}
    # A sweep with one run shown stays a plain row (nothing to compare it with), as does a run of no sweep.
    grouped = {i for g in table.sweeps.values() for i in g.run_ids}
    assert "P" not in table.sweeps and single.id not in grouped and lone.id not in grouped


def test_metric_direction_default_and_runs_without_a_sweep_file(tmp_path: Path):
    assert higher_is_better("eval_accuracy") and higher_is_better("train_samples_per_second")
    assert not higher_is_better("eval_loss") and not higher_is_better("perplexity")
    assert default_metric(["accuracy", "eval_loss"]) == "eval_loss" and default_metric(["acc"]) == "acc"
    assert default_metric([]) == "loss"
    with RunStore() as store:
        hi = _run(store, "hi", T0, [0.2, 0.9, 0.8], SweepMark("S", "s", 2, {"lr": "1"}), metric="accuracy")
        lo = _run(store, "lo", T0 + 5, [0.1, 0.85], SweepMark("S", "s", 2, {"lr": "2"}), metric="accuracy")
        assert store.metric_extremes(hi.id) == {"accuracy": (0.2, 0.9)}
    history = RunHistory()
    try:
        table = history_table(history.rows())
    finally:
        history.close()
    assert table.metric == "accuracy" and table.higher_is_better and table.metrics == ("accuracy",)
    assert [r.run.run_id for r in table.rows if r.is_best] == [hi.id]
    assert history_table([]).metric == "loss"
    # A run folder without a sweep file, or with a broken one: no sweep.
    assert read_sweep_mark(tmp_path) is None
    (tmp_path / SWEEP_FILE).write_text("{not json")
    assert read_sweep_mark(tmp_path) is None
    assert read_sweep_mark(lo.run_dir) == SweepMark("S", "s", 2, {"lr": "2"})

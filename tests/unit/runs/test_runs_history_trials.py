"""History's table over a real run store with a trial's candidates in it: the trial's runs gathered under one group
that says its size and winner (from the trial's record), named by their set-up, its measured candidates to compare;
every other run as before."""

from __future__ import annotations

import shutil
from dataclasses import replace

from fixtures.history_runs import T0, make_run
from fixtures.trial_runs import TRIAL_ID, plant_trial

from traindeck.backend.runs.control.history import RunHistory
from traindeck.backend.runs.control.history_table import history_table
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.trials import history_rows, trial_summaries


def _read():  # type: ignore[no-untyped-def]
    history = RunHistory()
    try:
        return history_rows(history)
    finally:
        history.close()


def test_a_trials_runs_are_one_group_with_its_size_winner_and_measured_candidates():
    with RunStore() as store:
        trial = plant_trial(store)
        lone = make_run(store, "lone", started=T0 + 90, samples=0)  # between the trial's candidates
    runs, trials = _read()
    assert set(trials) == {TRIAL_ID}
    assert trials[TRIAL_ID].winner == "ZeRO-2 cpu mb 4" and trials[TRIAL_ID].candidates == 5
    table = history_table(runs, trials=trials)
    ids = {i: r.id for i, r in trial.runs.items()}
    # The trial's runs together at its newest run's place (newest first), the lone run after them.
    assert [r.run.run_id for r in table.rows] == [ids[3], ids[2], ids[1], ids[0], lone.id]
    group = table.groups[TRIAL_ID]
    assert group.label == f"trial {TRIAL_ID} — 3 of 5 candidates measured, winner: ZeRO-2 cpu mb 4"
    assert group.run_ids == (ids[3], ids[2], ids[1], ids[0]) and group.state == "finished"
    # Measured (fastest first), then the one measured but too tight; not the failed one.
    assert group.compare_ids == (ids[1], ids[0], ids[2])
    rows = {r.run.run_id: r for r in table.rows}
    assert [rows[ids[i]].name for i in range(4)] == ["ZeRO-2 mb 2", "ZeRO-2 cpu mb 4", "ZeRO-3 mb 4",
                                                     "ZeRO-3 cpu+params mb 8"]
    assert [i for i in range(4) if rows[ids[i]].is_winner] == [1]
    assert all(rows[ids[i]].trial == TRIAL_ID for i in range(4))
    assert rows[lone.id].trial == "" and rows[lone.id].name == "lone" and not rows[lone.id].is_winner
    assert rows[lone.id].sort_time == T0 + 90 < group.sort_time == T0 + 180


def test_a_trial_whose_record_is_gone_is_still_one_group_of_the_runs_that_did_not_fail():
    with RunStore() as store:
        trial = plant_trial(store)
    shutil.rmtree(trial.folder.path)
    runs, trials = _read()
    assert trials == {} and trial_summaries([TRIAL_ID]) == {}
    group = history_table(runs, trials=trials).groups[TRIAL_ID]
    assert group.label == f"trial {TRIAL_ID} — 4 candidates"
    assert set(group.compare_ids) == {trial.runs[i].id for i in (0, 1, 2)}


def test_a_stopped_trial_says_it_was_stopped_not_that_it_has_no_winner():
    with RunStore() as store:
        plant_trial(store)
    runs, trials = _read()
    stopped = {TRIAL_ID: replace(trials[TRIAL_ID], state="stopped", winner="", winner_run_id=None, measured=())}
    assert history_table(runs, trials=stopped).groups[TRIAL_ID].label == \
        f"trial {TRIAL_ID} — 0 of 5 candidates measured, stopped"
    early = {TRIAL_ID: replace(trials[TRIAL_ID], state="stopped")}
    assert history_table(runs, trials=early).groups[TRIAL_ID].label == \
        f"trial {TRIAL_ID} — 3 of 5 candidates measured, winner: ZeRO-2 cpu mb 4 (stopped early)"

"""`traindeck runs list` marks a trial's candidates (a real run store and trial, as the trial's driver leaves them):
the table names each by its trial and set-up, the JSON adds "trial" and keeps every field it had."""

from __future__ import annotations

import json

import pytest
from fixtures.history_runs import T0, make_run
from fixtures.trial_runs import TRIAL_ID, plant_trial

from traindeck.backend.cli import main
from traindeck.backend.runs.record.run_store import RunStore

FIELDS = {"id", "name", "state", "exit_code", "launcher", "preset", "script", "progress", "created_at",
          "started_at", "ended_at", "log"}


def test_runs_list_names_a_trials_candidates_by_trial_and_set_up(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with RunStore() as store:
        trial = plant_trial(store)
        lone = make_run(store, "lone", started=T0 + 90, samples=0)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["runs", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert f" trial:{TRIAL_ID}/zero2-cpu-mb4 " in lines[trial.runs[1].id]
    assert f" trial:{TRIAL_ID}/zero3-cpu+params-mb8 " in lines[trial.runs[3].id]
    assert lines[lone.id].split()[1] == "lone"

    assert main(["runs", "list", "--json"]) == 0
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert all(FIELDS <= set(r) for r in listed.values())  # added to, nothing renamed
    candidate = listed[trial.runs[1].id]
    assert candidate["name"] == "tiny-zero2-cpu-mb4"  # its own name, as before
    assert candidate["trial"] == {"id": TRIAL_ID, "index": 1, "candidate": "zero2-cpu-mb4", "label": "ZeRO-2 cpu mb 4",
                                  "setup": {"stage": 2, "offload": "cpu", "micro_batch": 4, "checkpointing": False,
                                            "nvme_path": ""}}
    assert listed[lone.id]["trial"] is None

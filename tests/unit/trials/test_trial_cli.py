"""`traindeck trial show|use` over a trial's folder as its driver leaves it: the table and JSON, and the winner made
a preset that `config check` passes. (The real trial, with real runs, is tests/launch/test_trials.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindeck.backend.cli import main
from traindeck.backend.presets import load_preset, preset_to_mapping
from traindeck.backend.trials import Result, TrialFolder, TrialSpec, TrialState, read_trial_mark
from traindeck.backend.trials.record import write_trial_mark


def _candidate(stage: int, offload: str, micro: int) -> dict:  # type: ignore[type-arg]
    return {"stage": stage, "offload": offload, "micro_batch": micro, "checkpointing": False, "nvme_path": ""}


def _trial(trial_id: str, results: list[Result]) -> TrialFolder:
    spec = TrialSpec(id=trial_id, name="tiny", script="tiny.py", script_args=["--deepspeed_config", "{ds_config}"],
                     base_preset=preset_to_mapping(load_preset("cpu-demo")),
                     candidates=[r.candidate for r in results], world_size=2, warmup=2, steps=5)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    folder.write_state(TrialState(trial_id, state="finished", results=results, started_at=100.0, ended_at=160.0))
    return folder


def _results() -> list[Result]:
    return [
        Result(_candidate(2, "none", 2), "measured", "r0", 20.0, 400.0, 8, None, 300 * 2**20, started_at=100.0,
               measured_at=118.0, ended_at=119.0),
        Result(_candidate(2, "none", 4), "failed", "r1", reason="host_oom: rank 0 used 1500 MiB of host memory, "
               "over the trial's limit of 1024 MiB; stopped", kind="host_oom", started_at=119.0, ended_at=125.0),
        Result(_candidate(3, "cpu+params", 4), "measured", "r2", 16.0, 1000.0, 16, None, 310 * 2**20,
               started_at=125.0, measured_at=145.0, ended_at=146.0),
        Result(_candidate(3, "none", 4), "too_tight", "r3", 8.0, 2000.0, 16, None, 990 * 2**20,
               reason="peak host memory per rank 990 MiB leaves less than 10% of 1024 MiB", started_at=146.0,
               measured_at=158.0, ended_at=159.0),
    ]


def test_show_prints_each_candidate_the_time_and_the_winner_last(capsys: pytest.CaptureFixture[str]) -> None:
    _trial("20260101-000000-aaaaaa", _results())
    assert main(["trial", "show", "20260101"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "trial 20260101-000000-aaaaaa: finished"
    rows = {line.split()[1]: line for line in out if line[:3].strip().isdigit()}
    assert rows["zero3-cpu+params-mb4"].split()[2:4] == ["1000.0", "16.0"]
    assert "failed: host_oom: rank 0 used 1500 MiB" in rows["zero2-none-mb4"]
    assert out[-3] == "trial time: 60.0 s; its candidates' start + warm-up + steps: 56.0 s; overhead +7.1%"
    assert out[-2] == ("#3 zero3-none-mb4 was faster (2000.0 samples/s) but too tight: peak host memory per rank "
                       "990 MiB leaves less than 10% of 1024 MiB")
    assert out[-1].startswith("winner: 20260101-000000-aaaaaa #2 zero3-cpu+params-mb4 (1000.0 samples/s, 16.0 ms")

    assert main(["trial", "show", "last", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["winner"] == 2 and shown["ranking"] == [2, 0]
    assert [c["state"] for c in shown["candidates"]] == ["measured", "failed", "measured", "too_tight"]
    first = shown["candidates"][0]
    assert {k: first[k] for k in ("stage", "offload", "micro_batch", "run_id", "step_ms", "samples_per_s",
                                  "peak_gpu_bytes", "peak_host_bytes", "reason")} == {
        "stage": 2, "offload": "none", "micro_batch": 2, "run_id": "r0", "step_ms": 20.0, "samples_per_s": 400.0,
        "peak_gpu_bytes": None, "peak_host_bytes": 300 * 2**20, "reason": None}


def test_use_makes_the_winner_a_preset_that_config_check_passes(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _trial("20260101-000000-bbbbbb", _results())
    assert main(["trial", "use", "20260101-000000-bbbbbb", "--preset", "fastest"]) == 0
    assert capsys.readouterr().out.strip() == "fastest"
    preset = load_preset("fastest")
    zero = (preset.deepspeed or {})["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"]["device"] == "cpu"
    assert (preset.deepspeed or {})["train_micro_batch_size_per_gpu"] == 4
    assert preset.env == {"DS_ACCELERATOR": "cpu"} and preset.launcher == "deepspeed"
    assert "trial 20260101-000000-bbbbbb" in preset.description
    assert main(["presets", "export", "fastest", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["config", "check", str(tmp_path / "ds_config.json"), "--world-size", "2", "--plain-script"]) == 0, \
        capsys.readouterr()
    # A second `use` with the same name is refused in one line, not overwritten behind the user's back.
    assert main(["trial", "use", "20260101-000000-bbbbbb", "--preset", "fastest"]) == 2
    assert "fastest" in capsys.readouterr().err


def test_use_without_a_winner_and_an_unknown_trial_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    _trial("20260101-000000-cccccc", [Result(_candidate(2, "none", 2), "failed", "r9", reason="x")])
    assert main(["trial", "use", "20260101-000000-cccccc", "--preset", "none-here"]) == 2
    assert capsys.readouterr().err.strip() == ("traindeck: trial 20260101-000000-cccccc has no winner (no candidate "
                                               "was measured with room to spare)")
    assert main(["trial", "show", "nosuch"]) == 2
    assert "no trial 'nosuch'" in capsys.readouterr().err


def test_a_candidates_run_folder_names_its_trial(tmp_path: Path) -> None:
    write_trial_mark(tmp_path, "20260101-000000-dddddd", 3, _candidate(3, "cpu", 4))
    assert read_trial_mark(tmp_path) == {"trial_id": "20260101-000000-dddddd", "index": 3,
                                         "candidate": _candidate(3, "cpu", 4)}
    assert read_trial_mark(tmp_path / "none") is None


class _NotStarted:
    """What launch_run returns for a plan with errors: nothing started."""

    def __init__(self, error: str) -> None:
        self.record = None
        self.plan = type("Plan", (), {"errors": [error]})()


def _planned(trial_id: str) -> TrialFolder:
    from traindeck.backend.trials import TrialOptions, plan_trial

    spec = plan_trial(TrialOptions(script="tiny.py", stages="2,3", offload="none", micro_batch="2", nproc=2),
                      load_preset("cpu-demo"), trial_id)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    return folder


def test_a_candidate_that_cannot_start_is_failed_and_the_trial_goes_on_to_its_end() -> None:
    from traindeck.backend.trials import run_trial

    folder = _planned("20260101-000000-eeeeee")
    asked: list[tuple[str, int]] = []

    def launch(request, name):  # type: ignore[no-untyped-def]
        asked.append((name, request.preset.deepspeed["zero_optimization"]["stage"]))
        return _NotStarted("python not found: /nope/python")

    from traindeck.backend.runs import RunRecord, RunStore

    with RunStore() as store:  # another run on the machine: each candidate says its figures may be slower
        store.add_run(RunRecord(id="20260101-000000-busy", run_dir="/nonexistent", created_at=1.0))
    state = run_trial(folder, launch)
    assert asked == [("tiny-zero2-none-mb2", 2), ("tiny-zero3-none-mb2", 3)]
    assert {r.note for r in state.results} == {"other runs were running when it started (20260101-000000-busy): its "
                                               "figures may be slower"}
    assert state.state == "finished" and folder.state().state == "finished"
    assert [(r.state, r.kind, r.reason) for r in state.results] == [
        ("failed", "start_failed", "could not start: python not found: /nope/python")] * 2


def test_a_trial_stopped_before_its_first_candidate_runs_none() -> None:
    from traindeck.backend.trials import run_trial

    folder = _planned("20260101-000000-ffffff")
    folder.request_stop()
    state = run_trial(folder, lambda request, name: pytest.fail("nothing may start"))
    assert state.state == "stopped"
    assert {(r.state, r.reason) for r in state.results} == {("skipped", "the trial was stopped before it ran")}


def test_a_module_or_a_command_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`trial` takes run's options, -m and --command included, but tries scripts only: said, not misread as a path."""
    assert main(["trial", "-m", "pkg.train"]) == 2
    assert main(["trial", "--command", "--", "llamafactory-cli", "train", "x.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["traindeck: a trial runs a script; a module (-m / --command) is not tried yet: give the script "
                   "path the module or command runs",
                   "traindeck: a trial runs a script; a command (-m / --command) is not tried yet: give the script "
                   "path the module or command runs"]

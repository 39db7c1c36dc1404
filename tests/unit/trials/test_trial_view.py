"""What the trial's results window and `trial show` say, read from a trial's folder as its driver leaves it: a
stopped trial's wording, the time left while a candidate runs (from its ranks' real step files), the plot's ranges
and memory unit, the dialog's candidate line and its DeepSpeed-config warning."""

from __future__ import annotations

import json

import pytest

from traindeck.backend.cli import main
from traindeck.backend.core.paths import runs_dir
from traindeck.backend.presets import load_preset, preset_to_mapping
from traindeck.backend.trials import Result, TrialFolder, TrialOptions, TrialSpec, TrialState, plan_trial
from traindeck.backend.trials.view import (
    candidates_line,
    config_warning,
    eta_seconds,
    padded_range,
    read_trial_view,
    running_steps,
)

MIB = 2**20


def _candidate(stage: int, offload: str, micro: int) -> dict:  # type: ignore[type-arg]
    return {"stage": stage, "offload": offload, "micro_batch": micro, "checkpointing": False, "nvme_path": ""}


def _trial(trial_id: str, state: str, results: list[Result], ended_at: float | None = 160.0,
           current: int | None = None) -> TrialFolder:
    spec = TrialSpec(id=trial_id, name="tiny", script="tiny.py", script_args=["--deepspeed_config", "{ds_config}"],
                     base_preset=preset_to_mapping(load_preset("cpu-demo")),
                     candidates=[r.candidate for r in results], world_size=2, warmup=2, steps=5)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    folder.write_state(TrialState(trial_id, state=state, results=results, started_at=100.0, ended_at=ended_at,
                                  current=current))
    return folder


def test_a_trial_stopped_before_any_candidate_was_measured_says_so_in_show_and_the_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    # What the driver writes when Stop comes while the single candidate runs (3 of its 7 steps done).
    _trial("20260101-000000-stop01", "stopped", [
        Result(_candidate(2, "none", 2), "skipped", "r0", reason="the trial was stopped while it ran (3 of 7 steps "
               "done)", started_at=101.0, ended_at=131.0, steps_ms=[12.0])])
    assert main(["trial", "show", "20260101-000000-stop01"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "trial time: 60.0 s (stopped before its end)"  # no overhead: a candidate was cut short
    assert out[-1] == "winner: none (trial 20260101-000000-stop01 was stopped before any candidate was measured)"
    view = read_trial_view("20260101-000000-stop01")
    assert view.progress_line == "Trial 20260101-000000-stop01 stopped before any candidate was measured"
    assert view.time_line == out[-2] and view.winner_lines == [out[-1]]


def test_a_trial_stopped_after_one_was_measured_counts_the_measured_and_names_its_winner(
        capsys: pytest.CaptureFixture[str]) -> None:
    _trial("20260101-000000-stop02", "stopped", [
        Result(_candidate(2, "none", 2), "measured", "r0", 20.0, 400.0, 8, None, 300 * MIB, started_at=100.0,
               measured_at=118.0, ended_at=119.0),
        Result(_candidate(3, "none", 2), "skipped", "r1", reason="the trial was stopped while it ran (1 of 7 steps "
               "done)", started_at=119.0, ended_at=130.0),
        Result(_candidate(3, "cpu", 2), "skipped", reason="the trial was stopped before it ran")])
    assert main(["trial", "show", "20260101-000000-stop02"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "overhead" not in "\n".join(out)
    assert out[-1] == ("winner: 20260101-000000-stop02 #0 zero2-none-mb2 (400.0 samples/s, 20.0 ms a step; run r0) "
                       "(the trial was stopped: the best of those measured); make it a preset: traindeck trial use "
                       "20260101-000000-stop02 --preset NAME")
    view = read_trial_view("20260101-000000-stop02")
    assert view.progress_line == "Trial 20260101-000000-stop02 stopped: 1 of 3 candidates measured"
    # The window has a button for `trial use`: its winner line leaves the CLI hint out.
    assert view.winner_lines == [out[-1].split("; make it a preset")[0]]


def test_a_finished_trial_keeps_its_overhead_line_and_its_count() -> None:
    _trial("20260101-000000-done01", "finished", [
        Result(_candidate(2, "none", 2), "measured", "r0", 20.0, 400.0, 8, None, 300 * MIB, started_at=100.0,
               measured_at=150.0, ended_at=151.0)])
    view = read_trial_view("20260101-000000-done01")
    assert view.progress_line == "Trial 20260101-000000-done01 finished: 1 of 1 candidates done"
    assert view.time_line == ("trial time: 60.0 s; its candidates' start + warm-up + steps: 50.0 s; overhead "
                              "+20.0%")


def _step_files(run_id: str, steps: list[tuple[int, float]], ranks: int = 2) -> None:
    """The ranks' step files as the step timing writes them: one JSON line a step, `t` when it ended."""
    folder = runs_dir() / run_id / "steps"
    folder.mkdir(parents=True)
    for rank in range(ranks):
        lines = [json.dumps({"step": step, "t": t + 0.01 * rank, "step_ms": 900.0, "host_rss": 400 * MIB})
                 for step, t in steps]
        (folder / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_time_left_before_the_first_candidate_ends_comes_from_its_own_steps() -> None:
    # Candidate 0 of 2 started at 1000; its first step ended at 1020 (start-up), then one step a second: 4 of its
    # 2 + 5 steps are done at 1023.
    folder = _trial("20260101-000000-eta001", "running", [
        Result(_candidate(2, "none", 2), "running", "20260101-000001-run0", started_at=1000.0),
        Result(_candidate(3, "none", 2), "pending")], ended_at=None, current=0)
    _step_files("20260101-000001-run0", [(1, 1020.0), (2, 1021.0), (3, 1022.0), (4, 1023.0)])
    spec, state = folder.spec(), folder.state()
    running = running_steps(state, spec)
    assert running is not None and running.done_steps == 4
    assert eta_seconds(state, spec, None, now=1023.5) is None  # nothing to tell it without the steps
    left = eta_seconds(state, spec, running, now=1023.5)
    # The running one: 3 steps left at 1 s (done at ~1026.01, 2.5 s from now); the pending one as long as this one
    # takes in all: its start-up (19 s beside its first step) + 7 steps of 1 s.
    assert left == pytest.approx(2.51 + 19.0 + 7.0, abs=0.05)
    assert read_trial_view(folder.id).eta_s is not None


def test_the_time_left_after_one_ended_adds_the_running_ones_own_steps_to_the_average() -> None:
    # Candidate 0 took 30 s (measured at 1028, stopped at 1030); candidate 1 started at 1030 and is slower: after
    # a start-up of 15 s its steps take 2 s each; 3 of 7 done at 1049.
    folder = _trial("20260101-000000-eta002", "running", [
        Result(_candidate(2, "none", 2), "measured", "r0", 20.0, 400.0, 8, None, 300 * MIB, started_at=1000.0,
               measured_at=1028.0, ended_at=1030.0),
        Result(_candidate(3, "none", 2), "running", "20260101-000001-run1", started_at=1030.0),
        Result(_candidate(3, "cpu", 2), "pending")], ended_at=None, current=1)
    _step_files("20260101-000001-run1", [(1, 1045.0), (2, 1047.0), (3, 1049.0)])
    spec, state = folder.spec(), folder.state()
    left = eta_seconds(state, spec, running_steps(state, spec), now=1049.0)
    # The running one: 4 steps of 2 s + the 2 s a stop took; the pending one: the finished ones' average, 30 s.
    # (The old estimate, half an average for the running one, said 45 s: 0.01 s beside its 1.5 x 30.)
    assert left == pytest.approx(4 * 2.0 + 0.01 + 2.0 + 30.0, abs=0.05)


def test_the_plot_ranges_are_padded_and_start_throughput_at_zero() -> None:
    assert padded_range([]) == (0.0, 1.0)  # no point: no negative samples/s or memory
    low, high = padded_range([17.187], from_zero=True)
    assert low == 0.0 and high == pytest.approx(17.187 * 1.1)
    # A 0.2% spread of memory stays a small one: at least 10% of the value either side.
    low, high = padded_range([381.0, 381.8])
    assert high - low >= 0.2 * 381.8 and low <= 381.0 - 38 and high >= 381.8 + 38


def test_the_window_plots_memory_in_the_tables_unit() -> None:
    _trial("20260101-000000-unit01", "finished", [
        Result(_candidate(2, "none", 2), "measured", "r0", 20.0, 400.0, 8, None, 390 * MIB, started_at=100.0,
               measured_at=118.0, ended_at=119.0)])
    view = read_trial_view("20260101-000000-unit01")
    assert view.rows[0][5] == "390M" and view.memory_unit == "MiB" and view.points[0].peak == 390.0
    assert view.x_range[0] <= 351.0 and view.x_range[1] >= 429.0 and view.y_range[0] == 0.0


def test_the_candidate_line_names_them() -> None:
    one = plan_trial(TrialOptions(script="tiny.py", stages="3", offload="none", micro_batch="2", nproc=2, steps=1,
                                  warmup=1), load_preset("cpu-demo"), "x")
    assert candidates_line(one) == "1 candidate to measure: zero3-none-mb2; 1 warm-up + 1 measured step each"
    many = plan_trial(TrialOptions(script="tiny.py", stages="0,1,2,3", offload="none,cpu", micro_batch="1,2",
                                   nproc=2), load_preset("cpu-demo"), "x")
    line = candidates_line(many, limit=3)
    assert line.startswith(f"{len(many.candidates)} candidates to measure: zero0-none-mb1, zero0-none-mb2, "
                           f"zero1-none-mb1 and {len(many.candidates) - 3} more; 3 warm-up + 20 measured steps each")


def test_the_config_warning_is_given_only_where_the_config_would_not_reach_the_script() -> None:
    # accelerate hands the config over through its own config file: no argument is needed.
    assert config_warning("accelerate", []) is None and config_warning(None, []) is None
    for launcher in ("deepspeed", "torchrun", "python"):
        assert config_warning(launcher, ["--deepspeed_config", "{ds_config}"]) is None
        assert config_warning(launcher, ["--deepspeed={ds_config}"]) is None
        said = config_warning(launcher, ["--epochs", "1"])
        assert said is not None and "do not pass the DeepSpeed config" in said and launcher in said
        own = config_warning(launcher, ["--deepspeed_config", "mine.json"])
        assert own is not None and "every candidate would train with that file" in own

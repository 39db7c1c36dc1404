"""A run stopped for a reason of traindeck's own (a trial's candidate, stopped once its steps are measured) reads as
such at its end: the state detail and the diagnosis say the reason, not a stop on request or a failure; `runs show`
says which trial the run is a candidate of. A real supervised run, stopped the way the trial's driver stops it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from fixtures.trial_runs import TRIAL_ID, plant_trial
from support.runhelp import launch, leftovers, wait_finished, wait_until

from traindeck.backend.cli import main
from traindeck.backend.runs import compare_runs
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose
from traindeck.backend.runs.record.run_store import RunStore

REASON = f"measured by trial {TRIAL_ID} (stopped after 5 steps)"


def test_a_stop_with_a_reason_is_diagnosed_as_that_reason_not_as_a_request_or_a_kill() -> None:
    ends = [ProcessEnd(11, "rank", 0, 100.0, 0), ProcessEnd(12, "rank", 1, 100.5, -15)]
    made = diagnose(Evidence(launcher_returncode=-2, ends=ends, stop_requested=True, stop_detail="after SIGTERM",
                             stop_reason=REASON))
    assert made.kind == "stopped"
    assert made.summary == f"Measured by trial {TRIAL_ID} (stopped after 5 steps); stopped after SIGTERM."
    # A user's stop reads as before.
    plain = diagnose(Evidence(launcher_returncode=-2, ends=ends, stop_requested=True, stop_detail="after SIGTERM"))
    assert plain.summary == "Stopped on request after SIGTERM."


@pytest.mark.launch
def test_a_run_stopped_by_its_trial_says_it_was_measured(tmp_path: Path) -> None:
    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent("""
        import time
        print("step 1 of 100", flush=True)
        time.sleep(120)
    """))
    run = launch(script, launcher="python", name="candidate")
    try:
        wait_until(lambda: "step 1" in Path(run.run_dir, "output.log").read_text(errors="replace"), 60)
    finally:
        with RunStore() as store:
            stop_run(store, run.id, grace_s=2.0, reason=REASON)
    done = wait_finished(run.id, 60)
    assert done.state == "stopped" and leftovers(done) == []
    assert done.state_detail == REASON
    assert done.diagnosis is not None and done.diagnosis["kind"] == "stopped"
    assert done.diagnosis["summary"].startswith(f"Measured by trial {TRIAL_ID} (stopped after 5 steps); stopped ")
    assert "on request" not in done.diagnosis["summary"]


def test_runs_show_says_which_trial_a_run_is_a_candidate_of(capsys: pytest.CaptureFixture[str]) -> None:
    with RunStore() as store:
        trial = plant_trial(store)
    run_id = trial.runs[1].id
    assert main(["runs", "show", run_id]) == 0
    out = capsys.readouterr().out
    assert f"trial     candidate #1 ZeRO-2 cpu mb 4 of trial {TRIAL_ID} (`traindeck trial show {TRIAL_ID}`)" in out
    assert main(["runs", "show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["trial"]["id"] == TRIAL_ID and shown["trial"]["candidate"] == "zero2-cpu-mb4"
    assert shown["trial"]["label"] == "ZeRO-2 cpu mb 4"


# A candidate's script as the trial sees it: each rank's step timings in its step file (the site hook's format), the
# first step slow (DeepSpeed loads its ops then), then it goes on training until it is stopped.
CANDIDATE = textwrap.dedent("""
    import json, os, time
    os.makedirs("steps", exist_ok=True)
    t = time.time()
    for step, ms in enumerate((1500.0, 400.0, 231.0, 233.0, 232.0, 234.0), start=1):
        t += ms / 1000
        for rank in (0, 1):
            with open(f"steps/rank{rank}.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "t": t, "step_ms": ms - rank, "forward_ms": ms / 3}) + "\\n")
    print("step 6 of 100", flush=True)
    time.sleep(120)
""")


@pytest.mark.launch
def test_a_trials_measured_candidate_reads_as_measured_and_history_agrees_with_its_figure(tmp_path: Path) -> None:
    from traindeck.backend.presets import load_preset
    from traindeck.backend.runs.control.history import run_figures
    from traindeck.backend.trials import TrialFolder, TrialOptions, plan_trial, run_trial

    trial_id = "20260101-000000-ffffff"
    spec = plan_trial(TrialOptions(script="tiny.py", stages="2", offload="none", micro_batch="2", nproc=2, warmup=2,
                                   steps=4), load_preset("cpu-demo"), trial_id)
    folder = TrialFolder(trial_id)
    folder.create(spec)
    script = tmp_path / "candidate.py"
    script.write_text(CANDIDATE)

    class Started:
        def __init__(self) -> None:
            self.record = launch(script, launcher="python", name="candidate")

    state = run_trial(folder, lambda request, name: Started())
    result = state.results[0]
    assert result.state == "measured" and result.step_ms == 232.5  # steps 3 to 6, the slowest rank's median
    done = wait_finished(str(result.run_id), 60)
    assert done.state == "stopped"
    assert done.state_detail == f"measured by trial {trial_id} (stopped after 6 steps)"
    assert done.diagnosis is not None and done.diagnosis["summary"].startswith(
        f"Measured by trial {trial_id} (stopped after 6 steps); stopped ")
    with RunStore() as store:
        figures = run_figures(store, done)
        compared = {row.what: row for row in compare_runs(store, done.id, done.id).figures}
    assert figures.seconds_per_step == pytest.approx(result.step_ms / 1000, rel=0.01)
    assert compared["State"].a == f"stopped: measured by trial {trial_id} (stopped after 6 steps)"

"""A rebuilt run store gets each run's step timings back from the step files its ranks left in the run folder
(steps/rank<R>.jsonl), so `traindeck steps` still shows the run's step anatomy after its store was corrupted.
The step files are the first 25 steps of each rank of a real 2-rank torchrun run, as its site hook wrote them
(tests/fixtures/step_files); the run folder, the store and its corruption are real."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.paths import run_store_path
from traindeck.backend.runs.record.folder_record import write_end, write_identity
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore, _steps_again
from traindeck.backend.steps import StepFiles

STEP_FILES = Path(__file__).parents[2] / "fixtures" / "step_files"
STEPS = 25


def timed_run(tmp_path: Path) -> RunRecord:
    """A finished run's folder: command.json, run.json, end.json, and each of two ranks' step file."""
    run_dir = create_run_dir()
    argv = [sys.executable, "loop.py"]
    atomic_write_text(run_dir.command, json.dumps({"argv": argv, "cwd": str(tmp_path), "launcher": "torchrun",
                                                   "env": {}}))
    created = time.time()
    write_identity(run_dir.path, run_dir.run_id, name="timed", preset=None, script="loop.py", created_at=created)
    shutil.copytree(STEP_FILES, run_dir.path / "steps")
    write_end(run_dir.path, run_dir.run_id, "succeeded", exit_code=0, ended_at=time.time(), diagnosis=None,
              state_detail="")
    return RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=created, name="timed",
                     script="loop.py", argv=argv, cwd=str(tmp_path), launcher="torchrun")


def test_a_rebuilt_store_takes_the_step_timings_back_from_the_ranks_step_files(tmp_path: Path) -> None:
    run = timed_run(tmp_path)
    kept, _reports = StepFiles(run.run_dir).read_new()
    assert sorted({(r.rank, r.step) for r in kept}) == [(rank, step) for rank in (0, 1)
                                                          for step in range(1, STEPS + 1)]
    with RunStore() as store:
        store.add_run(run)
        store.add_steps(run.id, kept)  # what the supervisor put there while the run ran
    with open(run_store_path(), "r+b") as handle:
        handle.write(b"this is not sqlite at all")

    shown = subprocess.run([sys.executable, "-m", "traindeck", "steps", run.id], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    [said] = shown.stderr.splitlines()
    assert f"rebuilt 1 run from their folders (0 events, 0 metric points, {2 * STEPS} step timings)" in said, said
    assert "the queue and resource samples start afresh" in said
    table = shown.stdout.splitlines()
    assert table[0] == f"run {run.id} (timed, succeeded)"
    assert [(rank.rstrip("*"), steps) for rank, steps, *_ in map(str.split, table[2:4])] == \
        [("0", str(STEPS)), ("1", str(STEPS))], shown.stdout
    with RunStore() as store:
        assert store.steps(run.id) == sorted(kept, key=lambda r: (r.rank, r.step))  # every field, as written
        assert _steps_again(store, run, deadline=time.monotonic()) == (0, False)  # none read past the time for it

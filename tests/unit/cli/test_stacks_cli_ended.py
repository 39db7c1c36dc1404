"""`traindeck stacks` on a run that ended says so in words (the walk-through read "run X is succeeded")."""

from __future__ import annotations

import subprocess
import sys
import time

from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def test_stacks_of_an_ended_run_say_it_already_ended(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with RunStore() as store:
        store.add_run(RunRecord(id="20260101-090000-abcd", run_dir=str(tmp_path), created_at=time.time() - 60,
                                name="done"))
        store.finish_run("20260101-090000-abcd", "succeeded", ended_at=time.time())
    proc = subprocess.run([sys.executable, "-m", "traindeck", "stacks", "abcd"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("traindeck: run 20260101-090000-abcd already ended (succeeded): stacks can only "
                                  "be taken while it runs"), proc.stderr

"""`traindeck runs bundle ID`: the zip carries the run's event journal (events.jsonl) beside its logs, masked as
they are, and leaves out a run-directory file that is a symbolic link rather than follow it. The real CLI over a
real run store and run folder (no run started)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from traindeck.backend.runs.record.folder_record import EVENTS_FILE, read_events
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

TOKEN = "plain-service-secret-8d41"  # shaped like nothing: only its variable's name says it is a secret


def test_the_bundle_carries_the_event_journal_masked_and_follows_no_link(tmp_path: Path) -> None:
    run_dir = create_run_dir()
    run_id = run_dir.run_id
    (run_dir.path / "output.log").write_text("step 1 loss 0.5\n")
    with RunStore() as store:
        store.add_run(RunRecord(id=run_id, run_dir=str(run_dir.path), created_at=time.time(), name="journal",
                                state="failed"))
        store.add_event(run_id, "stall", "no output for 5 min")
        store.add_event(run_id, "note", f"the service refused {TOKEN}")  # a value only this shell knows
    assert [kind for _, kind, _ in read_events(run_dir.path) or []] == ["stall", "note"]
    outside = tmp_path / "private.txt"
    outside.write_text("a file of someone else's, not the run's\n")
    (run_dir.path / "git.diff").symlink_to(outside)

    target = tmp_path / "report.zip"
    env = {**os.environ, "SERVICE_TOKEN": TOKEN}
    done = subprocess.run([sys.executable, "-m", "traindeck", "runs", "bundle", run_id, "-o", str(target)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(target) as archive:
        files = {Path(name).name: archive.read(name) for name in archive.namelist()}
    assert EVENTS_FILE in files and EVENTS_FILE in done.stdout
    journal = files[EVENTS_FILE].decode()
    assert "no output for 5 min" in journal and "the service refused ***" in journal
    assert TOKEN not in journal
    assert "git.diff" not in files and b"someone else's" not in b"".join(files.values())
    assert "output.log" in files

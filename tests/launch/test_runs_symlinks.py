"""A symbolic link planted where a run writes its logs (output.log, supervisor.log) is never written through: the
run fails to start, its record says why, and the file the link points at keeps its content and its mode."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.planted import assert_untouched, precious_file
from support.runhelp import job_env, wait_finished

from traindeck.backend.launch.plan import LaunchPlan
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.liveness import supervisor_argv


def _plan(run_dir: RunDir, marker: Path) -> LaunchPlan:
    # The job would leave `marker` behind: its absence shows the job never ran.
    code = f"open({str(marker)!r}, 'w').close(); print('job output')"
    return LaunchPlan(launcher="python", argv=[sys.executable, "-c", code], env=job_env(),  # type: ignore[arg-type]
                      cwd=str(run_dir.path), files={})


@pytest.mark.parametrize("log_name", ["output.log", "supervisor.log"])
def test_a_linked_run_log_fails_the_start_and_is_not_written_through(tmp_path: Path, log_name: str) -> None:
    target = precious_file(tmp_path)
    marker = tmp_path / "job-ran"
    run_dir = new_run_dir()
    link = run_dir.path / log_name
    link.symlink_to(target)
    with pytest.raises(RuntimeError, match="refusing to write through a symbolic link"):
        start_run(_plan(run_dir, marker), run_dir, name="linked")
    with RunStore() as store:
        record = store.get_run(run_dir.run_id)
    assert record is not None and record.state == "failed"
    refusal = f"refusing to write through a symbolic link: {link}"
    assert refusal in record.state_detail
    assert record.diagnosis is not None and record.diagnosis["kind"] == "start_failed"
    assert refusal in record.diagnosis["summary"] and refusal in record.diagnosis["evidence"]
    time.sleep(1.0)  # a supervisor started anyway would have written by now
    assert_untouched(target)
    assert link.is_symlink() and not marker.exists()


def test_the_supervisor_refuses_an_output_log_linked_after_the_start(tmp_path: Path) -> None:
    """The link appears between start_run creating output.log and the supervisor opening it."""
    target = precious_file(tmp_path)
    marker = tmp_path / "job-ran"
    run_dir = new_run_dir()
    plan = _plan(run_dir, marker)
    run_dir.output.symlink_to(target)
    with RunStore() as store:
        store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="raced",
                                preset=None, launcher="python", script="-c", argv=plan.argv, cwd=plan.cwd))
        instructions = {"run_id": run_dir.run_id, "store": str(store.path), "argv": plan.argv, "cwd": plan.cwd,
                        "env": plan.env, "stall_min_s": 120.0}
    with (run_dir.path / "supervisor.log").open("ab") as log:
        proc = subprocess.run(supervisor_argv(run_dir.path), input=json.dumps(instructions).encode(),
                              stdout=subprocess.PIPE, stderr=log, cwd=run_dir.path, env=job_env(),
                              start_new_session=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip().isdigit()
    done = wait_finished(run_dir.run_id, 60)
    refusal = f"refusing to write through a symbolic link: {run_dir.output}"
    assert done.state == "failed" and done.diagnosis is not None
    assert refusal in json.dumps(done.diagnosis)
    assert refusal in (run_dir.path / "supervisor.log").read_text()
    assert_untouched(target)
    assert not marker.exists()

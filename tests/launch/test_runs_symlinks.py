"""A symbolic link planted where a run writes its logs (output.log, supervisor.log) is never written through: the
run fails to start, its record says why, and the file the link points at keeps its content and its mode."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.planted import assert_untouched, precious_file
from support.runhelp import get, job_env, launch, wait_finished, wait_until

from traindeck.backend.launch.plan import LaunchPlan
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run, stop_run
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


# The script starts a Python whose stack file is a planted link: `sh` plants it at stacks/<its pid>.txt, then
# becomes that Python (exec keeps the pid), which the site hook arms as the script's child.
PLANTING = """
import os, subprocess, sys
target = sys.argv[1]
inner = "import time\\ndef waits():\\n    print('inner ready', flush=True)\\n    time.sleep(120)\\nwaits()"
stacks = os.path.join(os.environ["TRAINDECK_RUN_DIR"], "stacks")
subprocess.run(["sh", "-c", 'ln -s "$1" "$2/$$.txt" && exec "$3" -c "$4"', "sh", target, stacks, sys.executable,
                inner])
"""


@pytest.mark.slow
def test_a_stack_file_planted_as_a_link_is_not_written_through_when_stacks_are_taken(tmp_path: Path) -> None:
    """The site hook opens stacks/<pid>.txt without following a link: the linked process is not armed (and so
    never signalled), the file the link points at keeps its content and mode; the script's own stack file is
    created private."""
    target = precious_file(tmp_path)
    script = tmp_path / "planting.py"
    script.write_text(PLANTING)
    run = launch(script, str(target), launcher="python", name="planted")
    try:
        wait_until(lambda: "inner ready" in Path(run.run_dir, "output.log").read_text(errors="replace"), 60)
        links = [p for p in Path(run.run_dir, "stacks").iterdir() if p.is_symlink()]
        assert len(links) == 1
        inner = int(links[0].stem)
        out = subprocess.run([sys.executable, "-m", "traindeck", "stacks", run.id, "--json"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        by_pid = {r["pid"]: r for r in report["ranks"]}
        assert "did not arm stack dumps" in by_pid[inner]["error"], by_pid
        assert by_pid[run.launcher_pid or get(run.id).launcher_pid]["where"].startswith("planting.py:"), by_pid
        assert_untouched(target)
        assert links[0].is_symlink() and psutil.pid_exists(inner)
        own = Path(run.run_dir, "stacks", f"{get(run.id).launcher_pid}.txt")
        assert stat.S_IMODE(own.stat().st_mode) == 0o600
        assert get(run.id).state == "running"
    finally:
        with RunStore() as store:
            stop_run(store, run.id, grace_s=2.0)
        wait_finished(run.id, 60)
    assert_untouched(target)

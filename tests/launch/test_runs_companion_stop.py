"""Save, then stop (issue 14) where the stop comes from: a foreground `traindeck run` interrupted with Ctrl+C says
that the companion saves first (and what a second Ctrl+C does), and under the DeepSpeed launcher with 2 ranks
(CPU, gloo) Stop saves a checkpoint on both ranks before the run ends, both ranks exit, nothing is left."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import SCRIPTS, events, leftovers, ranks, wait_finished, wait_until

from traindeck.backend.cli.run_follow import interrupt_message
from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.record.savestop import stop_kind

pytestmark = pytest.mark.timeout(900)

# A loop with the companion and nothing else (no torch): saves a "checkpoint" file when asked to stop.
LOOP = """
import sys, time
import traindeck_report as td

guard = td.SaveStop(hold_s=45)
for step in range(1, 100000):
    print(f"step {step}", flush=True)
    td.progress(step, 100000)
    time.sleep(0.05)
    if guard.check() == "stop":
        with open(sys.argv[1], "w") as handle:
            handle.write(str(step))
        time.sleep(1.5)  # a real save takes a while
        guard.saved(sys.argv[1], step)
        print(f"saved at step {step} and stopping", flush=True)
        break
"""


def test_interrupt_message_says_the_companion_saves_first() -> None:
    held = interrupt_message("r1", 1, 10.0, 45.0)
    assert "saving a checkpoint before stopping run r1" in held and "after 45 s" in held
    assert "Ctrl+C again to stop now without saving" in held
    plain = interrupt_message("r1", 1, 10.0, 0.0)
    assert "SIGINT to every process" in plain and "saving" not in plain
    assert interrupt_message("r1", 2, 0.0, 0.0) == "traindeck: forcing the stop (SIGKILL)"


def test_foreground_ctrl_c_with_the_companion_saves_before_stopping(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    saved = tmp_path / "saved.txt"
    proc = subprocess.Popen([sys.executable, "-m", "traindeck", "run", str(script), str(saved)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        store = RunStore()
        record = wait_until(lambda: (runs := store.list_runs()) and (runs[0].progress or {}).get("current", 0) >= 3
                            and runs[0], timeout=120)
        assert stop_kind(record.run_dir) == "save-then-stop"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert f"saving a checkpoint before stopping run {record.id}" in err, err
    assert "Ctrl+C again to stop now" in err and "SIGINT to every process" not in err
    done = wait_finished(record.id, 60)
    assert done.state == "stopped"
    step = int(saved.read_text())
    assert f"saved at step {step} and stopping" in out
    assert "stop_signal" not in [kind for kind, _text in events(record.id)]  # the script ended by itself
    assert leftovers(done) == []


def test_stop_under_the_deepspeed_launcher_saves_on_both_ranks_then_both_exit(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="needs the train extra (deepspeed)")
    save = tmp_path / "ckpt"
    run_dir = new_run_dir()
    plan = build_plan(LaunchRequest(
        script=str(SCRIPTS / "ds_tiny_checkpoints.py"), launcher="deepspeed", nproc=2, cwd=str(tmp_path),
        script_args=["--save_dir", str(save), "--steps", "100000", "--companion", "--step_sleep", "0.1"]),
        run_dir.path)
    assert plan.ok, plan.errors
    record = start_run(plan, run_dir, name="ds-companion-stop")
    log = Path(record.run_dir, "output.log")

    def stepping() -> bool:
        text = log.read_text(errors="replace") if log.exists() else ""
        current = RunStore().get_run(record.id)
        assert current is not None and not current.finished, text[-3000:]
        return stop_kind(record.run_dir) == "save-then-stop" and text.count("step 3 loss") >= 2

    wait_until(stepping, 600, 1.0)
    assert not save.exists()  # no save without a request
    stopped = subprocess.run([sys.executable, "-m", "traindeck", "stop", record.id], capture_output=True, text=True,
                             timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "save a checkpoint and stop" in stopped.stdout
    done = wait_finished(record.id, 120)
    text = log.read_text(errors="replace")
    assert done.state == "stopped", text[-3000:]
    assert "without a signal" in (done.diagnosis or {}).get("summary", ""), done.diagnosis
    assert "stop_signal" not in [kind for kind, _text in events(record.id)]
    # Both ranks agreed on the step (one all_reduce), saved it together and ended the loop there.
    saved_lines = sorted(line.split("]: ")[-1].split("] ")[-1] for line in text.splitlines() if "and stopping" in line)
    assert len(saved_lines) == 2 and saved_lines[0] == saved_lines[1], text[-3000:]
    step = int(saved_lines[0].split()[3])
    tag = save / f"global_step{step}"
    assert (save / "latest").read_text().strip() == f"global_step{step}"
    assert tag.is_dir() and any(tag.iterdir())
    assert sorted(ranks(done)) == [0, 1], done.processes
    exits = [text for kind, text in events(record.id) if kind == "rank_exit"]
    assert sorted(text.split()[1] for text in exits) == ["0", "1"], exits  # both ranks ended by themselves
    assert all(text.endswith("exit code 0") for text in exits), exits
    assert leftovers(done) == []


def test_a_companion_that_saves_and_ends_at_once_is_still_a_stop(tmp_path: Path) -> None:
    """The companion reads the stop request itself; saving instantly, the script can end between two supervisor
    ticks, before the supervisor has seen the request. That run was stopped (asked first), not finished."""
    script = tmp_path / "instant.py"
    script.write_text(LOOP.replace("time.sleep(1.5)", "pass").replace("time.sleep(0.05)", "time.sleep(0.01)"))
    saved = tmp_path / "saved.txt"
    run_dir = new_run_dir()
    plan = build_plan(LaunchRequest(script=str(script), launcher="python", cwd=str(tmp_path),
                                    script_args=[str(saved)]), run_dir.path)
    assert plan.ok, plan.errors
    record = start_run(plan, run_dir, name="instant-save")
    wait_until(lambda: stop_kind(record.run_dir) == "save-then-stop"
               and ((RunStore().get_run(record.id) or record).progress or {}).get("current", 0) >= 3, 120)
    run_dir.request_stop(10.0)  # what `traindeck stop` writes
    done = wait_finished(record.id, 60)
    assert saved.exists()
    assert done.state == "stopped", (done.state, done.state_detail, events(record.id))
    assert "without a signal" in (done.diagnosis or {}).get("summary", ""), done.diagnosis
    assert leftovers(done) == []

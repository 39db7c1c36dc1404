"""A DeepSpeed launcher signalled by someone other than traindeck (another job's `pkill -f` on every launcher of
the same Python, a scheduler, a user's `kill`): the real launcher (runner -> launch.py -> 2 CPU ranks) is sent
SIGTERM by pid, and the run reads failed, killed from outside, never "succeeded" nor a bare exit code. A stop asked
through traindeck still reads "stopped" (test_runs_launchers.py::test_deepspeed_stop_ends_every_rank)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from support.runhelp import BEHAVE, get, launch, leftovers, ranks, wait_finished, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.train]
deepspeed = pytest.importorskip("deepspeed", reason="needs the train extra")


def _launch_py(launcher_pid: int) -> psutil.Process:
    """The run's own deepspeed.launcher.launch process, found by its command line under the run's launcher."""
    def found() -> psutil.Process | None:
        tree = [psutil.Process(launcher_pid), *psutil.Process(launcher_pid).children(recursive=True)]
        return next((p for p in tree if "deepspeed.launcher.launch" in " ".join(p.cmdline())), None)

    return wait_until(found, timeout=60)


def _signalled_from_outside(run_id: str, ranks_up: int) -> None:
    record = wait_until(lambda: len(ranks(r := get(run_id))) >= ranks_up and (r.progress or {}).get("current", 0) >= 2
                        and r, timeout=180)
    assert record.launcher_pid is not None
    os.kill(_launch_py(record.launcher_pid).pid, signal.SIGTERM)


def test_a_launcher_sigtermed_from_outside_is_said_so() -> None:
    run = launch(BEHAVE, "--steps", "2000", "--step-time", "0.05", launcher="deepspeed", nproc=2)
    _signalled_from_outside(run.id, 2)
    done = wait_finished(run.id, 120)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert "Main process received SIGTERM, exiting" in log, log[-3000:]
    assert done.state == "failed", (done.diagnosis, log[-3000:])
    diagnosis = done.diagnosis
    assert diagnosis is not None and diagnosis["kind"] == "signalled_from_outside", (diagnosis, log[-3000:])
    assert "received SIGTERM from outside traindeck" in diagnosis["summary"], diagnosis
    assert "Main process received SIGTERM, exiting" in " | ".join(diagnosis["evidence"]), diagnosis
    assert "pkill -f" in diagnosis["advice"] and "may" in diagnosis["advice"], diagnosis
    assert "received SIGTERM from outside traindeck" in (done.state_detail or ""), done.state_detail
    assert leftovers(done) == []


def test_a_launcher_sigtermed_after_a_rank_finished_is_not_a_success() -> None:
    # Rank 1 finishes its work (exit 0) at step 2 by design; rank 0 trains on; then the launcher is signalled.
    run = launch(BEHAVE, "--steps", "2000", "--step-time", "0.05", "--die-rank", "1", "--die-at", "2", "--end", "ok",
                 launcher="deepspeed", nproc=2)
    wait_until(lambda: "exits successfully" in Path(get(run.id).run_dir, "output.log").read_text(errors="replace"),
               timeout=180)
    _signalled_from_outside(run.id, 1)
    done = wait_finished(run.id, 120)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert "behave: rank 1 done" in log and "exits successfully" in log, log[-3000:]
    assert done.state == "failed", (done.diagnosis, log[-3000:])
    diagnosis = done.diagnosis
    assert diagnosis is not None and diagnosis["kind"] == "signalled_from_outside", (diagnosis, log[-3000:])
    assert "the run did not finish" in diagnosis["summary"], diagnosis
    assert leftovers(done) == []


def test_torchrun_sigtermed_from_outside_is_said_so() -> None:
    run = launch(BEHAVE, "--steps", "2000", "--step-time", "0.05", launcher="torchrun", nproc=2)
    record = wait_until(lambda: len(ranks(r := get(run.id))) == 2 and (r.progress or {}).get("current", 0) >= 2
                        and r, timeout=180)
    assert record.launcher_pid is not None
    tree = [psutil.Process(record.launcher_pid), *psutil.Process(record.launcher_pid).children(recursive=True)]
    agent = next(p for p in tree if "torch.distributed.run" in " ".join(p.cmdline())
                 or p.cmdline()[1:2] == ["torchrun"] or p.name() == "torchrun")
    os.kill(agent.pid, signal.SIGTERM)
    done = wait_finished(run.id, 120)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "failed", (done.diagnosis, log[-3000:])
    diagnosis = done.diagnosis
    assert diagnosis is not None and diagnosis["kind"] == "signalled_from_outside", (diagnosis, log[-3000:])
    assert diagnosis["summary"].startswith("torchrun received SIGTERM from outside traindeck"), diagnosis
    assert leftovers(done) == []

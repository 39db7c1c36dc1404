"""A person's signals to processes from the process table (real child processes): only their own, never PID 1 or
traindeck itself, the tree on request, a PID reused since the plan left alone, and every outcome one line. Also what
the table shows of a process: a zombie's unknown memory, the command's basename, the tree order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from traindeck.backend.monitor import (
    MachineProcessSampler,
    ProcessTable,
    plan_signal,
    send_signal,
    short_command,
)
from traindeck.backend.monitor.snapshots import MachineProcess, MachineSnapshot

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# A parent that starts a grandchild, prints its PID and sleeps: a tree of two.
PARENT = [sys.executable, "-c", "import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', "
          "'import time; time.sleep(60)'])\nprint(p.pid, flush=True)\nimport time; time.sleep(60)"]


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()


def _spawn(children: list[subprocess.Popen], argv: list[str], **kwargs) -> subprocess.Popen:
    child = subprocess.Popen(argv, **kwargs)
    children.append(child)
    # Popen returns once exec has begun, when /proc/PID/cmdline can still be empty for a moment (the kernel closes
    # the exec-error pipe before it lays out the new arguments): wait for them, as the table only ever sees
    # processes that have run a while.
    deadline = time.monotonic() + 10
    while not psutil.Process(child.pid).cmdline() and time.monotonic() < deadline:
        time.sleep(0.01)
    return child


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rfind(b")") + 2:].split()[0].decode()


def _ends(pid: int, limit_s: float = 30.0) -> bool:
    """Whether the process (not this test's child: nobody here reaps it) ends or turns zombie within `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_sigterm_to_my_own_child_ends_it_and_says_so(children):
    child = _spawn(children, SLEEP)
    plan = plan_signal(child.pid, "SIGTERM")
    assert plan.allowed and [t.pid for t in plan.targets] == [child.pid]
    assert "time.sleep(60)" in plan.targets[0].command
    line = send_signal(plan)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert line.startswith(f"SIGTERM sent to PID {child.pid}")


def test_the_tree_option_reaches_the_descendants_deepest_first(children):
    parent = _spawn(children, PARENT, stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    alone = plan_signal(parent.pid, "SIGKILL")
    assert [t.pid for t in alone.targets] == [parent.pid]
    plan = plan_signal(parent.pid, "SIGKILL", tree=True)
    assert [t.pid for t in plan.targets] == [grandchild, parent.pid]
    line = send_signal(plan)
    assert parent.wait(timeout=30) == -signal.SIGKILL
    assert _ends(grandchild)
    assert line.startswith("SIGKILL sent to PIDs")


def test_pid_one_traindeck_itself_and_what_it_runs_under_are_refused():
    for pid in (1, os.getpid(), os.getppid()):
        plan = plan_signal(pid, "SIGKILL")
        assert not plan.allowed and "not signalled from here" in (plan.refused or "")
        assert send_signal(plan) == plan.refused
    assert psutil.pid_exists(os.getpid())


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="starting another user's process needs root")
def test_another_users_process_is_refused_even_to_root(children):
    other = _spawn(children, ["sleep", "60"], user=65534, group=65534)  # an executable any user may run
    assert psutil.Process(other.pid).uids().real == 65534
    plan = plan_signal(other.pid, "SIGKILL")
    assert not plan.allowed and "belongs to another user" in (plan.refused or "")
    assert send_signal(plan) == plan.refused
    assert other.poll() is None  # untouched


def test_a_process_that_ended_is_one_clear_line(children):
    child = _spawn(children, SLEEP)
    plan = plan_signal(child.pid, "SIGTERM")
    child.kill()
    child.wait()  # reaped: the PID names nothing now (or, later, another process: checked by its start time)
    assert send_signal(plan) == f"PID {child.pid} had already ended"
    assert plan_signal(child.pid, "SIGTERM").refused == f"PID {child.pid} has already ended"


def test_a_zombie_shows_no_memory_rather_than_zero_bytes(children):
    zombie = _spawn(children, [sys.executable, "-c", "pass"])
    live = _spawn(children, SLEEP)
    while _state(zombie.pid) != "Z":  # ended, not yet waited for by this test (its parent)
        os.sched_yield()
    by_pid = {p.pid: p for p in MachineProcessSampler().sample().processes}
    assert by_pid[zombie.pid].zombie and by_pid[zombie.pid].rss_bytes is None
    assert not by_pid[live.pid].zombie and (by_pid[live.pid].rss_bytes or 0) > 1024 * 1024
    assert send_signal(plan_signal(zombie.pid, "SIGTERM")) == f"PID {zombie.pid} had already ended"


def test_the_command_shows_the_programs_basename_and_a_scripts(children, tmp_path):
    assert short_command(["/work/main/.venv/bin/python", "-u", "/a/b/train.py", "--deepspeed", "/c/ds.json"]) == \
        "python -u train.py --deepspeed /c/ds.json"
    assert short_command(["/usr/bin/python3.11", "-X", "dev", "-m", "torch.distributed.run", "/a/t.py"]) == \
        "python3.11 -X dev -m torch.distributed.run /a/t.py"
    assert short_command(["/bin/bash", "/tmp/x/run.sh", "a"]) == "bash run.sh a"
    assert short_command(["/usr/sbin/sshd", "-D", "/etc/x"]) == "sshd -D /etc/x"
    assert short_command([]) == ""
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(60)\n")
    child = _spawn(children, [sys.executable, str(script), "--steps", "5"])
    mine = next(p for p in MachineProcessSampler().sample().processes if p.pid == child.pid)
    assert mine.command == f"{os.path.basename(sys.executable)} sleeper.py --steps 5"
    assert str(script) in mine.cmdline and mine.uid == os.getuid()


def _p(pid: int, ppid: int, cpu: float) -> MachineProcess:
    return MachineProcess(pid=pid, ppid=ppid, user="ann", name="python", cmdline=f"python {pid}", cpu_percent=cpu,
                          rss_bytes=1, gpu_memory_bytes=None, run_id=None)


def test_the_tree_puts_ranks_under_their_launcher_in_the_columns_order():
    table = ProcessTable()
    table.show(MachineSnapshot(t=0.0, processes=(_p(1, 0, 0.0), _p(10, 1, 1.0), _p(11, 10, 50.0), _p(12, 10, 90.0),
                                                 _p(20, 1, 5.0), _p(13, 12, 2.0)),
                               cpu_count=2, gpu_memory_known=False, took_s=0.0))
    assert [p.pid for p in table.rows] == [12, 11, 20, 13, 10, 1]
    table.set_tree(True)
    assert [(p.pid, d) for p, d in zip(table.rows, table.depths, strict=True)] == \
        [(1, 0), (20, 1), (10, 1), (12, 2), (13, 3), (11, 2)]
    assert [p.pid for p in table.descendants(10)] == [11, 12, 13]
    table.set_filter("python 1")
    assert [(p.pid, d) for p, d in zip(table.rows, table.depths, strict=True)] == \
        [(1, 0), (10, 1), (12, 2), (13, 3), (11, 2)]
    table.set_filter("python 12")  # a row whose parent is filtered out stands at the top level
    assert [(p.pid, d) for p, d in zip(table.rows, table.depths, strict=True)] == [(12, 0)]

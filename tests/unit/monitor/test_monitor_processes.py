"""The run-process sampler against real processes: a launcher, ranks holding known memory, a rank's helper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from fixtures.monitor_run_tree import run_tree

from traindeck.backend.core.procfs import parent_map
from traindeck.backend.monitor.processes import RunProcessSampler

MIB = 1024 * 1024


def test_ranks_are_found_by_environment_and_their_rss_shows_what_they_hold():
    with run_tree(ranks=2, mib=200, helper=True) as tree:
        snap = RunProcessSampler(tree["launcher"]).sample()
        by_pid = {p.pid: p for p in snap.processes}
        assert set(by_pid) == {tree["launcher"], *tree["ranks"], *tree["helpers"]}

        launcher = by_pid[tree["launcher"]]
        assert launcher.role == "launcher" and launcher.rank is None
        assert "monitor_run_tree.py" in launcher.cmdline

        ranks = [by_pid[pid] for pid in tree["ranks"]]
        assert [(r.role, r.rank, r.local_rank) for r in ranks] == [("rank", 0, 0), ("rank", 1, 1)]
        for rank in ranks:
            assert rank.ppid == tree["launcher"]
            assert 200 * MIB <= rank.rss_bytes < 260 * MIB  # the 200 MiB it filled plus the interpreter
            assert rank.locked_bytes == 0

        # The helper inherited RANK=0 from its rank: it is a helper, not a third rank.
        (helper,) = [by_pid[pid] for pid in tree["helpers"]]
        assert helper.role == "helper" and helper.rank is None and helper.ppid == tree["ranks"][0]

        assert snap.ranks == tuple(ranks)
        assert snap.max_rank_rss_bytes == max(r.rss_bytes for r in ranks)
        assert snap.ranks_rss_bytes == sum(r.rss_bytes for r in ranks) >= 400 * MIB
        assert snap.tree_rss_bytes > snap.ranks_rss_bytes


def test_cpu_percent_is_unknown_first_then_measured_between_samples():
    busy = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        sampler = RunProcessSampler(proc.pid)
        # The loop's own CPU time over the two samples, as the kernel counts it: under load (other tests, other
        # work on 2 cores) a busy loop gets far less than a core, so the sampler is held to this, not to a share.
        busy = psutil.Process(proc.pid)
        t0, cpu0 = time.monotonic(), sum(busy.cpu_times()[:2])
        first = sampler.sample().processes[0]
        assert first.cpu_percent is None
        time.sleep(0.5)
        second = sampler.sample().processes[0]
        expected = (sum(busy.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0) * 100
        assert second.cpu_percent is not None and second.cpu_percent > 5, second.cpu_percent
        assert abs(second.cpu_percent - expected) <= max(10.0, 0.5 * expected), (second.cpu_percent, expected)
    finally:
        proc.kill()
        proc.wait()


def test_io_counters_count_what_a_process_writes(tmp_path):
    target = tmp_path / "out.bin"
    code = (
        "import os, sys\n"
        f"with open({str(target)!r}, 'wb') as f:\n"
        "    f.write(os.urandom(8 * 1024 * 1024)); f.flush(); os.fsync(f.fileno())\n"
        "print('written', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        (snap,) = RunProcessSampler(proc.pid).sample().processes
        assert snap.write_bytes is not None and snap.write_bytes >= 8 * MIB
    finally:
        proc.stdin.close()
        proc.wait()


def test_locked_memory_is_read_from_vmlck():
    with run_tree(ranks=1, mib=1, lock_mib=4) as tree:
        if tree["locked_mib"] != [4]:
            pytest.skip("mlock is not allowed here (RLIMIT_MEMLOCK)")
        snap = RunProcessSampler(tree["launcher"]).sample()
        (rank,) = snap.ranks
        # mlock works on whole pages: the buffer's unaligned ends add at most a page on each side.
        assert 4 * MIB <= rank.locked_bytes <= 4 * MIB + 8192
        assert snap.ranks_locked_bytes == rank.locked_bytes


def test_children_started_later_are_found_and_finished_ones_dropped():
    code = (
        "import subprocess, sys\n"
        "sys.stdin.readline()\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)\n"
        "print(kid.pid, flush=True)\n"
        "sys.stdin.readline()\n"
        "kid.stdin.close(); kid.wait()\n"
        "print('gone', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        # After the first (full) scan, only the cheap children-file walk, here on every sample.
        sampler = RunProcessSampler(proc.pid, walk_every_s=0, rescan_every_s=3600)
        assert [p.pid for p in sampler.sample().processes] == [proc.pid]
        proc.stdin.write("\n")
        proc.stdin.flush()
        kid = int(proc.stdout.readline())
        assert [p.pid for p in sampler.sample().processes] == [proc.pid, kid]
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "gone"
        assert [p.pid for p in sampler.sample().processes] == [proc.pid]
    finally:
        proc.stdin.close()
        proc.wait()


def test_a_finished_launcher_gives_an_empty_snapshot():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    snap = RunProcessSampler(proc.pid).sample()
    assert snap.processes == () and snap.ranks == () and snap.ranks_rss_bytes == 0
    assert snap.max_rank_rss_bytes is None


def test_full_scan_parent_map_agrees_with_the_kernel():
    parents = parent_map()
    assert parents[os.getpid()] == os.getppid()


FAKE_ACCELERATE = r"""
import json, os, subprocess, sys
held = b"\x01" * (150 * 1024 * 1024)  # what a launcher that imported torch holds
env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
script = subprocess.Popen([sys.executable, "-c", "import sys; data = b'\x01' * (40 * 1024 * 1024); "
                           "print('ready', flush=True); sys.stdin.read()"],
                          env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
script.stdout.readline()
print(json.dumps({"script": script.pid}), flush=True)
sys.stdin.read()
script.stdin.close()
script.wait()
"""


def test_a_one_process_accelerate_run_counts_its_script_not_the_launcher(tmp_path, capsys):
    """`accelerate launch` with one process starts the script without RANK: "all ranks" is the script's memory, and
    the launcher's is said apart. A stand-in `accelerate.commands.launch` module (found first on sys.path) holds
    150 MiB, as the real one does once it has imported torch."""
    package = tmp_path / "accelerate" / "commands"
    package.mkdir(parents=True)
    (tmp_path / "accelerate" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "launch.py").write_text(FAKE_ACCELERATE)
    launcher = subprocess.Popen([sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1",
                                 "train.py"], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        script_pid = json.loads(launcher.stdout.readline())["script"]
        snap = RunProcessSampler(launcher.pid).sample()
        by_pid = {p.pid: p for p in snap.processes}
        assert set(by_pid) == {launcher.pid, script_pid}
        assert snap.ranks == (by_pid[script_pid],)
        assert snap.ranks_rss_bytes == by_pid[script_pid].rss_bytes < 100 * MIB
        assert snap.launchers == (by_pid[launcher.pid],)
        assert snap.launcher_rss_bytes == by_pid[launcher.pid].rss_bytes >= 150 * MIB
        from traindeck.backend.cli import main as cli_main

        assert cli_main(["monitor", "--once", "--run", str(launcher.pid)]) == 0
        summary = capsys.readouterr().out.splitlines()[-1]
        assert summary.startswith("  ranks: 1  RSS ") and "launcher RSS " in summary, summary
    finally:
        assert launcher.stdin is not None
        launcher.stdin.close()
        launcher.wait(30)


def test_a_launcher_that_has_not_started_its_ranks_has_no_rank_memory():
    """The DeepSpeed launcher's first seconds: its runner and launch.py, no rank yet: nothing is a rank (not the
    launchers' memory under "all ranks"); a plain `python train.py` is its own rank."""
    from traindeck.backend.monitor.snapshots import RunProcess, RunSnapshot

    def process(pid: int, cmdline: str, role: str) -> RunProcess:
        return RunProcess(pid, None, "python", cmdline, role, None, None, None, 300 * MIB, None, None, None)

    starting = RunSnapshot(0.0, 10, (process(10, "/venv/bin/python -m deepspeed.launcher.runner --num_gpus 2 t.py",
                                                 "launcher"),
                                         process(11, "/venv/bin/python -u -m deepspeed.launcher.launch --world_info=x",
                                                 "helper")))
    assert starting.ranks == () and starting.ranks_rss_bytes == 0 and starting.max_rank_rss_bytes is None
    assert starting.launcher_rss_bytes == 600 * MIB
    plain = RunSnapshot(0.0, 20, (process(20, "/venv/bin/python train.py --steps 3", "launcher"),))
    assert plain.ranks == plain.processes and plain.launcher_rss_bytes is None
    console = RunSnapshot(0.0, 30, (process(30, "/venv/bin/python /venv/bin/accelerate launch t.py", "launcher"),))
    assert console.ranks == ()

"""Failure cascades: the rank that ended first and its own error are the cause; what the others said after it (a
lost peer, a timed-out collective, the launcher's SIGTERM) is listed as follow-ons. Which memory ran out (host RAM,
the run's cgroup limit, a GPU). Which processes are ranks. Hand-made evidence, real cgroup-like file trees and real
processes; the replays of real runs are in test_runs_replays.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis import failures
from traindeck.backend.runs.diagnosis.cgroups import memory_limit, owner_of, parse_proc_cgroup
from traindeck.backend.runs.diagnosis.diagnose import Evidence, ProcessEnd, diagnose

GiB = 2**30


def ends(*items: tuple[int, int | None, float]) -> list[ProcessEnd]:
    out = [ProcessEnd(1000 + rank, "rank", rank, t, code) for rank, code, t in items]
    out.append(ProcessEnd(999, "launcher", None, 100.0, 1))
    return out


GLOO_CLOSED = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
               "peer [127.0.0.1]:16322")
CASCADE = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "train.py", line 9, in <module>',
    "[rank1]: RuntimeError: injected failure in rank 1",
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "train.py", line 12, in <module>',
    GLOO_CLOSED,
    "[2026-11-24 02:30:30,548] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 1000",
    "[2026-11-24 02:30:30,571] [ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'train.py', "
    "'--local_rank=1'] exits with return code = 1",
]


def test_the_rank_that_ended_first_is_blamed_with_its_own_error_not_the_last_error_line() -> None:
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, 1, 10.4)), log_tail=CASCADE))
    assert d.kind == "exception" and d.rank == 1, d
    assert d.summary == "Rank 1 raised RuntimeError: injected failure in rank 1."
    assert "[rank1]: RuntimeError: injected failure in rank 1" in d.evidence
    assert any(f.startswith("rank 0: RuntimeError:") and "Connection closed by peer" in f for f in d.follow_ons), d
    assert any(f.startswith("launcher: ") and "exits with return code = 1" in f for f in d.follow_ons), d
    assert not any("Connection closed" in e for e in d.evidence)


def test_a_consequence_of_the_first_rank_is_never_the_cause_even_when_it_ended_first() -> None:
    # Rank 0's gloo error made it exit a moment before rank 1's slow teardown ended: its error is still only what
    # rank 1's failure looked like from rank 0.
    d = diagnose(Evidence(1, ends=ends((0, 1, 10.0), (1, 1, 10.3)), log_tail=CASCADE))
    assert d.kind == "exception" and d.rank == 1, d
    assert any("rank 0 ended first" in e for e in d.evidence)


def test_a_signal_death_first_wins_over_a_later_ranks_error() -> None:
    lines = ["[rank0]: RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"]
    d = diagnose(Evidence(1, ends=ends((1, -signal.SIGKILL, 10.0), (0, 1, 11.0)), log_tail=lines,
                          kernel_log_readable=True, total_ram=64 * GiB, min_available_ram=40 * GiB))
    assert d.kind == "killed" and d.rank == 1 and "without printing an error of its own" in d.summary, d
    assert d.follow_ons and d.follow_ons[0].startswith("rank 0: RuntimeError: DefaultCPUAllocator")


def test_an_allocator_failure_is_a_host_memory_failure_of_the_rank_that_raised_it() -> None:
    lines = ["[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
             "memory: you tried to allocate 17592186044416 bytes. Error code 12 (Cannot allocate memory)", GLOO_CLOSED]
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, 1, 10.5)), log_tail=lines))
    assert (d.kind, d.rank, d.memory) == ("cpu_alloc", 1, "host"), d
    assert d.summary == "Rank 1 ran out of host memory: the CPU allocator refused an allocation of 16384.0 GiB."
    assert "add RAM" not in d.advice and "batch size" in d.advice
    memory_error = diagnose(Evidence(1, log_tail=["Traceback (most recent call last):", "MemoryError"]))
    assert memory_error.kind == "cpu_alloc" and memory_error.memory == "host"


def test_cuda_oom_names_the_device() -> None:
    lines = ["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
             "capacity of 79.15 GiB of which 1.2 GiB is free."]
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, -15, 11.0)), log_tail=lines))
    assert (d.kind, d.rank, d.memory) == ("cuda_oom", 1, "cuda")
    assert "on GPU 1 (79.15 GiB)" in d.summary
    assert d.follow_ons == ["rank 0 was killed by SIGTERM 1.0 s after rank 1 ended (the launcher ends the other ranks "
                            "when one fails)"]


def test_a_kernel_kill_at_a_cgroup_limit_is_that_limit_not_the_hosts_ram(tmp_path: Path) -> None:
    limit = _v2_tree(tmp_path, "/system.slice/slurmstepd.scope/job_4242/step_0", "/system.slice/slurmstepd.scope/"
                     "job_4242", 12 * GiB)
    message = ("Memory cgroup out of memory: Killed process 1001 (python) total-vm:20000kB "
               "[oom_memcg=/system.slice/slurmstepd.scope/job_4242]")
    d = diagnose(Evidence(1, ends=ends((1, -9, 10.0), (0, -15, 11.0)), kernel_oom_pids={1001: message},
                          kernel_log_readable=True, memory_limit=limit))
    assert (d.kind, d.rank, d.memory) == ("cgroup_oom", 1, "cgroup"), d
    assert "at the run's memory limit (12.0 GiB, set by Slurm job 4242)" in d.summary
    assert "not because the host ran out of RAM" in d.summary
    assert "add RAM" not in d.advice and "--mem" in d.advice
    assert d.evidence[0] == message


def test_a_sigkill_counted_by_the_runs_cgroup_is_that_limit(tmp_path: Path) -> None:
    limit = _v2_tree(tmp_path, "/docker/0123456789abcdef0123", "/docker/0123456789abcdef0123", 4 * GiB)
    d = diagnose(Evidence(1, ends=ends((1, -9, 10.0), (0, -15, 11.0)), oom_kills_during_run=1,
                          cgroup_oom_kills_during_run=1, memory_limit=limit))
    assert (d.kind, d.memory) == ("cgroup_oom", "cgroup") and "the container 0123456789ab" in d.summary, d
    host = diagnose(Evidence(1, ends=ends((1, -9, 10.0), (0, -15, 11.0)), oom_kills_during_run=1))
    assert (host.kind, host.memory) == ("host_oom", "host") and "add RAM" in host.advice


def test_a_global_oom_kill_with_a_loose_limit_is_the_host(tmp_path: Path) -> None:
    d = diagnose(Evidence(1, ends=ends((1, -9, 10.0)), kernel_log_readable=True, kernel_oom_pids={
        1001: "Out of memory: Killed process 1001 (python) total-vm:20000kB"}))
    assert (d.kind, d.memory) == ("host_oom", "host")


def test_a_timeout_with_nobody_else_failing_is_a_collective_timeout_of_that_rank() -> None:
    lines = ["[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
             "waiting 20000ms for recv operation to complete"]
    d = diagnose(Evidence(1, ends=ends((0, 1, 30.0), (1, -15, 31.0)), log_tail=lines))
    assert (d.kind, d.rank) == ("collective_timeout", 0), d
    assert any(e.startswith("rank(s) 1 printed no error and were still running when rank 0 timed out") for e in
               d.evidence), d.evidence
    assert d.follow_ons == ["rank 1 was killed by SIGTERM 1.0 s after rank 0 ended (the launcher ends the other "
                            "ranks when one fails)"]


def test_consequences_are_sorted_from_causes() -> None:
    for line in (GLOO_CLOSED, "RuntimeError: ... typically caused by a remote worker crashing",
                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
                 "[E ProcessGroupNCCL.cpp:456] Watchdog caught collective operation timeout: WorkNCCL(...)"):
        hit = failures.classify(line)
        assert hit is not None and hit.consequence, line
    for line in ("RuntimeError: injected failure in rank 1", "MemoryError",
                 "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"):
        hit = failures.classify(line)
        assert hit is not None and not hit.consequence, line


# ---- cgroups -------------------------------------------------------------------------------------------------
def _v2_tree(root: Path, path: str, limited: str, limit: int, oom_kills: int = 0):  # type: ignore[no-untyped-def]
    here = root / path.strip("/")
    here.mkdir(parents=True, exist_ok=True)
    for directory in [root, *[root / "/".join(path.strip("/").split("/")[:i]) for i in range(1, 1 + path.count("/"))]]:
        (directory / "memory.max").write_text("max\n")
    (root / limited.strip("/") / "memory.max").write_text(f"{limit}\n")
    (here / "memory.events").write_text(f"low 0\nhigh 0\nmax 3\noom {oom_kills}\noom_kill {oom_kills}\n")
    found = memory_limit(2, path, root=root)
    assert found is not None
    return found


def test_the_limit_is_the_tightest_on_the_way_up_and_named_by_who_set_it(tmp_path: Path) -> None:
    found = _v2_tree(tmp_path, "/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0",
                     "/system.slice/slurmstepd.scope/job_7", 3 * GiB, oom_kills=2)
    assert found.limit_bytes == 3 * GiB and found.set_by == "/system.slice/slurmstepd.scope/job_7"
    assert found.owner == "Slurm job 7" and found.oom_kills == 2
    v1 = tmp_path / "v1"
    (v1 / "memory" / "user.slice" / "train.service").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory" / "user.slice" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory" / "user.slice" / "train.service" / "memory.limit_in_bytes").write_text(f"{GiB}\n")
    (v1 / "memory" / "user.slice" / "train.service" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    old = memory_limit(1, "/user.slice/train.service", root=v1)
    assert old is not None and (old.limit_bytes, old.owner, old.oom_kills) == (GiB, "systemd unit train.service", 1)
    unlimited = memory_limit(1, "/user.slice", root=v1)
    assert unlimited is not None and unlimited.limit_bytes is None


def test_a_cgroup_without_the_memory_controller_counts_its_ancestors_oom_kills(tmp_path: Path) -> None:
    _v2_tree(tmp_path, "/system.slice/app.service", "/system.slice", 4 * GiB, oom_kills=5)
    (tmp_path / "system.slice/app.service/traindeck/run-1").mkdir(parents=True)  # a run's cgroup: no memory.* files
    found = memory_limit(2, "/system.slice/app.service/traindeck/run-1", root=tmp_path)
    assert found is not None and found.limit_bytes == 4 * GiB and found.oom_kills == 5


def test_owners_and_proc_cgroup_lines() -> None:
    assert owner_of("/kubepods/burstable/pod1234/0123456789abcdef") == "the Kubernetes pod"
    assert owner_of("/user.slice/user-1000.slice/run-r1.scope") == "systemd unit run-r1.scope"
    assert owner_of("/") == "the container or VM this runs in"
    assert parse_proc_cgroup("0::/a/b\n") == (2, "/a/b")
    assert parse_proc_cgroup("4:memory:/x/y\n1:cpu:/\n0::/\n") == (1, "/x/y")


# ---- ranks are ranks -----------------------------------------------------------------------------------------
CHILD_OF_RANK = """
import os, subprocess, sys
os.environ["TRAINDECK_RANK_TAGS_PID"] = str(os.getpid())  # what the run's sitecustomize does in a rank
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(child.pid, flush=True)
sys.stdin.readline()
"""


def test_a_rank_is_a_rank_and_its_children_never_are_even_orphaned() -> None:
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2"}
    rank = subprocess.Popen([sys.executable, "-c", CHILD_OF_RANK], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert rank.stdout is not None and rank.stdin is not None
    child = int(rank.stdout.readline())
    try:
        assert procs.rank_number(rank.pid, os.getpid()) == 1
        assert procs.rank_number(child, rank.pid) is None  # same RANK as its parent
        rank.stdin.write("\n")
        rank.stdin.flush()
        rank.wait(timeout=10)
        time.sleep(0.2)
        # The parent is gone (the compiler's ninja exited, a rank died): the stamp still tells a rank's child.
        assert procs.rank_number(child, 1) is None
    finally:
        os.kill(child, signal.SIGKILL)
        if rank.poll() is None:
            rank.kill()
        rank.wait()


@pytest.mark.parametrize("line", [CASCADE[2], GLOO_CLOSED])
def test_rank_tags_split_the_log(line: str) -> None:
    own, untagged = failures.split_by_rank([line, "launcher line"])
    assert untagged == ["launcher line"] and list(own) == [failures.rank_of_line(line)]


# ---- runs show ----------------------------------------------------------------------------------------------
def test_runs_show_prints_follow_ons_and_the_memory_that_ran_out(tmp_path: Path) -> None:
    from traindeck.backend.runs.record.layout import create_run_dir
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    run_dir = create_run_dir()
    run_dir.output.write_text("")
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, 1, 10.4)), log_tail=[
        "[rank1]: RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes",
        GLOO_CLOSED]))
    with RunStore() as store:
        store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="cascade",
                                started_at=time.time()))
        store.finish_run(run_dir.run_id, "failed", exit_code=1, diagnosis=d.to_json(), state_detail=d.summary)
    text = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", "cascade"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    assert "memory: host RAM" in text
    assert "then (consequences, not the cause):" in text and "- rank 0: RuntimeError: [../third_party/gloo" in text
    data = json.loads(subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", "cascade", "--json"],
                                     capture_output=True, text=True, timeout=60, check=True).stdout)
    assert data["diagnosis"]["memory"] == "host" and data["diagnosis"]["kind"] == "cpu_alloc"
    assert data["diagnosis"]["follow_ons"][0].startswith("rank 0: RuntimeError:")


def test_an_oom_kill_after_another_rank_failed_by_itself_is_a_follow_on() -> None:
    d = diagnose(Evidence(1, ends=ends((1, 1, 10.0), (0, -9, 12.0)), log_tail=CASCADE[:3], kernel_log_readable=True,
                          kernel_oom_pids={1000: "Out of memory: Killed process 1000 (python)"}))
    assert (d.kind, d.rank) == ("exception", 1), d
    assert "rank 0: Out of memory: Killed process 1000 (python)" in d.follow_ons


RANK_WITH_A_BUILD = """
import subprocess, sys, time
# Like ninja during a DeepSpeed op build: it starts the compiler and is gone before the compiler ends, so the
# compiler (RANK=1 inherited) is orphaned to the supervisor while the rank still lives.
subprocess.Popen([sys.executable, "-c",
                  "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)'])"])
time.sleep(7)
print("rank 1 done", flush=True)
"""
LAUNCHER = """
import os, subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=dict(os.environ, RANK="1", LOCAL_RANK="1",
                                                                     WORLD_SIZE="2"))
sys.exit(rank.wait())
"""


@pytest.mark.launch
def test_a_ranks_orphaned_compiler_is_never_listed_as_a_second_rank() -> None:
    from support.runhelp import start, wait_finished

    from traindeck.backend.launch.environ import training_env

    run = start([sys.executable, "-c", LAUNCHER, RANK_WITH_A_BUILD], env=training_env())
    done = wait_finished(run.id, 120)
    assert done.state == "succeeded", done.diagnosis
    listed = [(p["role"], p["rank"]) for p in done.processes]
    assert listed.count(("rank", 1)) == 1, done.processes

"""Hang forensics: `traindeck stacks` dumps every rank's stack of a real 2-rank gloo run without stopping it and
names the rank that is not where the others are. The dump parsing and the grouping are also tested on texts that
faulthandler wrote for real (taken from this very mechanism, in a subprocess)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from support.runhelp import SCRIPTS, events, get, launch, leftovers, wait_finished, wait_until

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.diagnosis.stacks import (
    Frame,
    RankStack,
    ThreadStack,
    catches_signal,
    locate,
    parse_dump,
    summarize,
    take_stacks,
)
from traindeck.backend.runs.record.run_store import RunStore

TRAINDECK = [sys.executable, "-m", "traindeck"]


def _frames(*specs: str) -> list[Frame]:
    out = []
    for spec in specs:
        file, line, function = spec.split(":")
        out.append(Frame(file, int(line), function))
    return out


LIB = "/venv/lib/python3.11/site-packages/torch/distributed"


def _rank(rank: int, *frames: str) -> RankStack:
    stack = RankStack(1000 + rank, rank, [ThreadStack("0x1", True, _frames(*frames))])
    locate(stack)
    return stack


def test_the_rank_outside_the_collective_is_named_first() -> None:
    waiting = [f"{LIB}/distributed_c10d.py:2500:all_reduce", f"{LIB}/c10d_logger.py:81:wrapper",
               "/home/u/train.py:40:main", "/home/u/train.py:50:<module>"]
    ranks = [_rank(0, *waiting), _rank(2, *waiting), _rank(3, *waiting),
             _rank(1, "/usr/lib/python3.11/threading.py:320:wait", "/home/u/train.py:88:load_batch",
                   "/home/u/train.py:39:main", "/home/u/train.py:50:<module>")]
    assert summarize(ranks) == ("rank 1 is in train.py:88 load_batch; ranks 0, 2, 3 wait in all_reduce "
                                "(train.py:40 main)")


def test_ranks_waiting_on_an_op_build_lock_are_said_so() -> None:
    # torch.utils.cpp_extension polls the lock while another process builds the op (or a killed build left it).
    waiting = ["/venv/lib/python3.11/site-packages/torch/utils/file_baton.py:49:wait",
               "/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py:2300:_jit_compile",
               "/venv/lib/python3.11/site-packages/deepspeed/ops/op_builder/builder.py:540:jit_load",
               "/home/u/train.py:30:main", "/home/u/train.py:50:<module>"]
    ranks = [_rank(0, *waiting), _rank(1, *waiting)]
    assert summarize(ranks) == "ranks 0, 1 waiting for an op build lock, in train.py:30 main"
    assert summarize(ranks, ["DeepSpeed's cpu_adam build lock (held by PID 1234, ninja -v)",
                             "DeepSpeed's fused_adam build lock (held by nobody: removed)"]) == \
        ("ranks 0, 1 waiting for DeepSpeed's cpu_adam build lock (held by PID 1234, ninja -v) or DeepSpeed's "
         "fused_adam build lock (held by nobody: removed), in train.py:30 main")


def test_ranks_all_in_one_place_and_missing_ones() -> None:
    same = [_rank(r, "/home/u/train.py:12:step", "/home/u/train.py:50:<module>") for r in (0, 1)]
    gone = RankStack(7, 2, error="the process is gone")
    assert summarize([*same, gone]) == "ranks 0, 1 are all in train.py:12 step; rank 2: the process is gone"


def test_a_real_faulthandler_dump_is_taken_and_parsed(tmp_path: Path) -> None:
    # A process armed as the run's sitecustomize arms ranks: a worker thread, and the main thread in a named function.
    script = tmp_path / "dumper.py"
    script.write_text(textwrap.dedent("""
        import faulthandler, os, signal, sys, threading, time
        os.makedirs(os.path.join(sys.argv[1], "stacks"), exist_ok=True)
        out = open(os.path.join(sys.argv[1], "stacks", "%d.txt" % os.getpid()), "a")
        faulthandler.register(signal.SIGUSR2, file=out, all_threads=True)
        threading.Thread(target=lambda: time.sleep(60), name="reader", daemon=True).start()
        def stuck_here():
            print("ready", flush=True)
            time.sleep(60)
        stuck_here()
    """))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert catches_signal(proc.pid) is True
        first = take_stacks(tmp_path, [(proc.pid, None)], timeout_s=10)
        second = take_stacks(tmp_path, [(proc.pid, None)], timeout_s=10)  # only the new dump is read
        assert proc.poll() is None, "taking stacks must not stop the process"
    finally:
        proc.kill()
        proc.wait()
    for report in (first, second):
        (stack,) = report.ranks
        assert stack.error == "" and len(stack.threads) == 2
        assert re.fullmatch(r"dumper\.py:[89] stuck_here", stack.where) and stack.waits_in == "", stack.where
    assert re.fullmatch(rf"pid {proc.pid} is in dumper\.py:[89] stuck_here", first.summary)
    text = (tmp_path / "stacks" / f"{proc.pid}.txt").read_text()
    assert len(parse_dump(text)) == 4, "two dumps of two threads each, appended"


def test_a_process_without_the_handler_is_never_signalled(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        assert catches_signal(proc.pid) is False
        report = take_stacks(tmp_path, [(proc.pid, 0)], timeout_s=2)
        assert "did not arm stack dumps" in report.ranks[0].error
        assert proc.poll() is None, "SIGUSR2 would have killed it"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.launch
@pytest.mark.slow
@pytest.mark.train
def test_stacks_of_a_real_hung_two_rank_run_name_the_stuck_function() -> None:
    pytest.importorskip("torch", reason="needs the train extra")
    run = launch(SCRIPTS / "hang_in_load.py", launcher="python", nproc=2, name="hang", stall_min_s=8.0)
    try:
        def both_in_place() -> bool:
            log = Path(run.run_dir, "output.log").read_text(errors="replace")
            return "rank 1 loading batch 0" in log and "rank 0 waiting in all_reduce" in log
        wait_until(both_in_place, 120)
        wait_until(lambda: len([p for p in get(run.id).processes if p["role"] == "rank"]) == 2, 30)
        time.sleep(1.0)  # rank 0 is inside all_reduce by now
        out = subprocess.run([*TRAINDECK, "stacks", run.id, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        by_rank = {r["rank"]: r for r in report["ranks"]}
        assert re.fullmatch(r"hang_in_load\.py:1[34] load_batch", by_rank[1]["where"]), by_rank[1]
        assert by_rank[0]["waits_in"] == "all_reduce" and by_rank[0]["where"].startswith("hang_in_load.py:"), by_rank[0]
        # The collectives ledger leads: rank 1 never reached the all_reduce rank 0 waits in.
        assert re.match(r"rank 1 never entered all_reduce #1 \(process group 0\) that rank 0 waits in; rank 1 is in "
                        r"hang_in_load\.py:1[34] load_batch; rank 0 waits in all_reduce \(hang_in_load",
                        report["summary"]), report["summary"]
        assert report["collectives"]["behind"] == [1]
        assert Path(run.run_dir, "stacks.json").is_file()
        text = subprocess.run([*TRAINDECK, "stacks", run.id], capture_output=True, text=True, timeout=60)
        assert "== rank 1" in text.stdout and "load_batch" in text.stdout and "main thread" in text.stdout

        # The supervisor sees the stall (8 s without output) and takes the stacks itself (once per stall: a slow
        # start-up under load may have stalled, and been dumped, before the hang).
        def stall_stacks() -> str | None:
            return next((t for k, t in events(run.id) if k == "stacks" and "load_batch" in t), None)
        taken = wait_until(stall_stacks, 60)
        assert "rank 1 is in hang_in_load.py:1" in taken and "load_batch" in taken
        assert Path(run.run_dir, "stall_stacks.json").is_file()
        record = get(run.id)
        assert record.state_detail.startswith("stalled: no output or progress for ")
        assert "rank 1 is in hang_in_load.py:1" in record.state_detail
        # The run keeps running: every rank alive, still running a few seconds later.
        time.sleep(2.0)
        record = get(run.id)
        assert record.state == "running"
        assert all(psutil.pid_exists(p["pid"]) and p["returncode"] is None for p in record.processes
                   if p["role"] == "rank")
    finally:
        with RunStore() as store:
            stop_run(store, run.id, grace_s=2.0)
        done = wait_finished(run.id, 60)
    assert done.state == "stopped" and leftovers(done) == []
    assert done.diagnosis is not None
    assert re.match(r"Stopped on request .* while stalled: rank 1 never entered all_reduce #1 \(process group 0\) "
                    r".*; rank 1 is in hang_in_load\.py:1[34] load_batch; rank 0 waits in all_reduce",
                    done.diagnosis["summary"]), done.diagnosis


@pytest.mark.launch
@pytest.mark.slow
def test_without_ranks_the_script_under_a_launcher_process_is_dumped(tmp_path: Path) -> None:
    # As under accelerate's single-process launcher: no RANK anywhere, the script is the launcher's child.
    script = tmp_path / "outer.py"
    script.write_text(textwrap.dedent("""
        import subprocess, sys
        inner = "import time\\ndef read_shard():\\n    print('inner ready', flush=True)\\n    time.sleep(120)\\nread_shard()"
        subprocess.run([sys.executable, "-c", inner])
    """))
    run = launch(script, launcher="python", name="outer")
    try:
        wait_until(lambda: "inner ready" in Path(run.run_dir, "output.log").read_text(errors="replace"), 60)
        out = subprocess.run([*TRAINDECK, "stacks", run.id, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        wheres = sorted(r["where"] for r in report["ranks"])
        assert len(wheres) == 2 and wheres[0].startswith("<string>:") and wheres[0].endswith(" read_shard"), wheres
        assert wheres[1].startswith("outer.py:") and wheres[1].endswith(" <module>"), wheres
        assert get(run.id).state == "running"
    finally:
        with RunStore() as store:
            stop_run(store, run.id, grace_s=2.0)
        wait_finished(run.id, 60)

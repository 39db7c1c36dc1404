"""`traindeck monitor` as a person on SSH runs it: a real subprocess, real samplers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
from fixtures.monitor_run_tree import run_tree

from traindeck.backend.cli import main as cli_main
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def _traindeck(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=timeout
    )


def test_once_json_is_one_object_with_host_gpus_and_gpu_error():
    result = _traindeck("monitor", "--once", "--json")
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    sample = json.loads(line)
    assert {"host", "gpus", "gpu_error"} <= set(sample)
    assert "processes" not in sample
    assert isinstance(sample["gpus"], list)
    assert (sample["gpu_error"] is None) == bool(sample["gpus"])
    host = sample["host"]
    assert host["ram_total_bytes"] > 0 and host["cpu_percent"] is not None and host["per_core_percent"]
    assert host["disk_read_bytes_per_s"] is not None and host["net_rx_bytes_per_s"] is not None


def test_run_as_a_pid_lists_its_processes_with_ranks():
    with run_tree(ranks=2, mib=20) as tree:
        result = _traindeck("monitor", "--once", "--json", "--run", str(tree["launcher"]))
    assert result.returncode == 0, result.stderr
    sample = json.loads(result.stdout)
    by_pid = {p["pid"]: p for p in sample["processes"]}
    assert by_pid[tree["launcher"]]["role"] == "launcher"
    assert [by_pid[pid]["rank"] for pid in tree["ranks"]] == [0, 1]
    assert all(by_pid[pid]["rss_bytes"] >= 20 * 1024 * 1024 for pid in tree["ranks"])


def test_run_id_is_looked_up_in_the_run_store(traindeck_home):
    me = psutil.Process()
    with run_tree(ranks=1, mib=1) as tree, RunStore() as store:
        # A running run (its "supervisor" is this test process, alive) whose launcher is the tree's; one ended.
        store.add_run(RunRecord(id="20260101-120000-ab12", run_dir="/nonexistent/a", created_at=time.time(),
                                name="first", supervisor_pid=me.pid, supervisor_started=me.create_time(),
                                launcher_pid=tree["launcher"]))
        store.add_run(RunRecord(id="20260101-130000-cd34", run_dir="/nonexistent/b", created_at=time.time(),
                                state="succeeded", exit_code=0))
        result = _traindeck("monitor", "--once", "--json", "--run", "20260101-12")  # a unique prefix will do
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["root_pid"] == tree["launcher"]

    finished = _traindeck("monitor", "--once", "--run", "20260101-130000-cd34")
    assert finished.returncode == 2 and "has ended (succeeded)" in finished.stderr
    ambiguous = _traindeck("monitor", "--once", "--run", "20260101")
    assert ambiguous.returncode == 2 and "'20260101' matches 2 runs" in ambiguous.stderr  # not taken as a PID
    unknown = _traindeck("monitor", "--once", "--run", "nope")
    assert unknown.returncode == 2 and "no run matches 'nope'" in unknown.stderr


def test_human_output_is_a_compact_table(capsys):
    with run_tree(ranks=2, mib=1) as tree:
        assert cli_main(["monitor", "--once", "--run", str(tree["launcher"])]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "CPU" in first and "RAM" in first and "available" in first and "disk r" in first and "net rx" in first
    assert ("GPUs: none" in out) or ("GPU0" in out)
    assert "ROLE" in out and "launcher" in out and out.count(" rank ") == 2
    assert "ranks: 2" in out


def test_streaming_prints_a_line_per_interval_until_interrupted():
    proc = subprocess.Popen(
        [sys.executable, "-m", "traindeck", "monitor", "--json", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = time.monotonic()
        lines = [proc.stdout.readline() for _ in range(3)]
        assert all(json.loads(line)["host"] for line in lines)
        assert time.monotonic() - started < 30
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bad_interval_is_one_clear_line(capsys):
    assert cli_main(["monitor", "--once", "--interval", "0.01"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traindeck: sampling interval must be between 0.1 and 5") and "Traceback" not in err


def _running(store: RunStore, run_id: str, name: str, launcher: int) -> None:
    """A running run whose "supervisor" is this test process (alive) and whose launcher is `launcher`."""
    me = psutil.Process()
    store.add_run(RunRecord(id=run_id, run_dir=f"/nonexistent/{run_id}", created_at=time.time(), name=name,
                            supervisor_pid=me.pid, supervisor_started=me.create_time(), launcher_pid=launcher))


def test_without_run_every_live_run_is_listed_with_its_ranks_and_an_ended_one_is_not(traindeck_home):
    with run_tree(ranks=2, mib=20) as first, run_tree(ranks=1, mib=20) as second, RunStore() as store:
        _running(store, "20260101-120000-ab12", "train-zero2", first["launcher"])
        _running(store, "20260101-130000-cd34", "train-zero2-2", second["launcher"])
        store.add_run(RunRecord(id="20260101-110000-ef56", run_dir="/nonexistent/c", created_at=time.time(),
                                name="old", state="succeeded", exit_code=0))
        result = _traindeck("monitor", "--once", "--json")
        human = _traindeck("monitor", "--once")
    assert result.returncode == 0, result.stderr
    runs = {r["run_id"]: r for r in json.loads(result.stdout)["runs"]}
    assert set(runs) == {"20260101-120000-ab12", "20260101-130000-cd34"}  # the ended run is not live
    assert runs["20260101-120000-ab12"]["name"] == "train-zero2"
    by_pid = {p["pid"]: p for p in runs["20260101-120000-ab12"]["processes"]}
    assert by_pid[first["launcher"]]["role"] == "launcher"
    assert [by_pid[pid]["rank"] for pid in first["ranks"]] == [0, 1]
    assert all(by_pid[pid]["rss_bytes"] >= 20 * 1024 * 1024 for pid in first["ranks"])
    assert [p["rank"] for p in runs["20260101-130000-cd34"]["processes"] if p["role"] == "rank"] == [0]

    assert human.returncode == 0, human.stderr
    out = human.stdout
    assert "(2 live runs)" in out and "RANK" in out and "GPU MEM" in out
    rows = [line.split() for line in out.splitlines() if "·ab12" in line or "·cd34" in line]
    assert [(r[0], r[2], int(r[3])) for r in rows if r[1] == "·ab12"] == [
        ("train-zero2", "launcher", first["launcher"]), ("train-zero2", "0", first["ranks"][0]),
        ("train-zero2", "1", first["ranks"][1])]
    assert [(r[0], r[2], int(r[3])) for r in rows if r[1] == "·cd34"] == [
        ("train-zero2-2", "launcher", second["launcher"]), ("train-zero2-2", "0", second["ranks"][0])]
    assert "old" not in out


def test_piped_snapshots_say_the_gpus_once_and_the_runs_in_each(traindeck_home):
    with run_tree(ranks=1, mib=1) as tree, RunStore() as store:
        _running(store, "20260101-120000-ab12", "train", tree["launcher"])
        proc = subprocess.Popen([sys.executable, "-m", "traindeck", "monitor", "--interval", "0.2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            blocks: list[list[str]] = []
            while len(blocks) < 4:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                if not line.startswith(" "):  # a sample's first line: its time, CPU and RAM
                    blocks.append([])
                blocks[-1].append(line)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    text = "".join(line for block in blocks[:3] for line in block)  # the fourth may be cut
    assert text.count("GPUs: none") + text.count("GPU0 ") in (1, 3)  # no GPU: said once; GPUs: each sample
    for block in blocks[:3]:
        assert "swap" in block[0]
        assert sum("train ·ab12" in line for line in block) == 2  # its launcher and its rank, every sample


def test_run_labels_keep_the_end_of_long_names_and_commands_start_with_the_program():
    """Runs of one preset are numbered at the end of their names (`-2`, `-3`): a cut keeps that end. A command reads
    as htop highlights it, the interpreter's and the script's folders left out."""
    from traindeck.backend.cli.monitor_cmd import _run_label
    from traindeck.backend.monitor import short_command

    second = _run_label("20261128-030000-aaaa", "train_tiny-cpu-demo-2")
    third = _run_label("20261128-030100-bbbb", "train_tiny-cpu-demo-3")
    assert second.endswith("demo-2 ·aaaa") and third.endswith("demo-3 ·bbbb")
    assert len(second) <= 24 and second.startswith("train_ti")
    assert _run_label("20261128-030000-aaaa", "behave") == "behave ·aaaa"
    assert short_command("/work/main/.venv/bin/python -u /tmp/x/train.py --steps 3".split()).startswith(
        "python -u train.py --steps 3")

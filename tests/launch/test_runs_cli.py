"""`traindeck run / runs / logs / stop` as a user types them (real subprocesses, the stdlib stand-in script)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import BEHAVE, get, leftovers, wait_finished, wait_until

from traindeck.backend.runs.record.run_store import RunStore


def traindeck(*args: str, timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)  # type: ignore[call-overload]


def test_detach_prints_the_id_last_and_script_options_reach_the_script(tmp_path: Path) -> None:
    dump = tmp_path / "argv.json"
    result = traindeck("run", "--name", "cli-test", "--detach", str(BEHAVE), "--steps", "3", "--step-time", "0.01",
                       "--dump", str(dump), "--name", "x", "--lr", "1e-4", "--detach", "--", "-h", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    done = wait_finished(run_id, 60)
    assert done.state == "succeeded" and done.name == "cli-test"
    seen = json.loads(dump.read_text())["argv"]
    assert seen[seen.index("--dump"):] == ["--dump", str(dump), "--name", "x", "--lr", "1e-4", "--detach", "--", "-h"]


def test_runs_list_show_and_logs(tmp_path: Path) -> None:
    first = traindeck("run", "--detach", str(BEHAVE), "--steps", "2", "--step-time", "0", cwd=tmp_path)
    second = traindeck("run", "--detach", "--name", "second", str(BEHAVE), "--steps", "10", "--step-time", "0.01",
                       cwd=tmp_path)
    ids = [first.stdout.split()[-1], second.stdout.split()[-1]]
    for run_id in ids:
        wait_finished(run_id, 60)
    listed = json.loads(traindeck("runs", "list", "--json").stdout)
    assert [r["id"] for r in listed][:2] == ids[::-1]  # newest first
    shown = json.loads(traindeck("runs", "show", ids[1], "--json").stdout)
    for key in ("id", "name", "state", "exit_code", "diagnosis", "progress", "metrics", "pids", "log", "started_at",
                "ended_at"):
        assert key in shown, key
    assert shown["state"] == "succeeded" and shown["exit_code"] == 0 and shown["name"] == "second"
    assert shown["progress"]["current"] == 10 and shown["progress"]["total"] == 10
    assert {"current", "total", "rate", "eta_s"} <= set(shown["progress"])
    assert shown["metrics"]["loss"] == pytest.approx(0.1)
    assert shown["pids"][0]["role"] == "launcher"
    logs = traindeck("logs", ids[1][-4:])  # a unique suffix is enough
    assert logs.returncode == 0
    lines = logs.stdout.splitlines()
    assert lines[0] == "behave: rank 0 starting" and lines[-1] == "behave: rank 0 done"
    assert not any("\r" in line for line in lines)  # redraws collapsed
    human = traindeck("runs", "show", "second")
    assert "succeeded" in human.stdout and "loss=" in human.stdout
    table = traindeck("runs", "list")
    assert ids[1] in table.stdout.splitlines()[1]


def test_logs_rank_filter(tmp_path: Path) -> None:
    script = tmp_path / "tagged.py"
    script.write_text("for i in range(3):\n    print(f'[rank0]: zero {i}')\n    print(f'[rank1]: one {i}')\n")
    run_id = traindeck("run", "--detach", str(script), cwd=tmp_path).stdout.split()[-1]
    wait_finished(run_id, 60)
    only_one = traindeck("logs", run_id, "--rank", "1").stdout.splitlines()
    assert only_one == ["[rank1]: one 0", "[rank1]: one 1", "[rank1]: one 2"]


@pytest.mark.parametrize(("end", "code"), [("ok", 0), ("exit:3", 3), ("sigkill", 128 + 9), ("exception", 1)])
def test_foreground_exit_status_is_the_runs(tmp_path: Path, end: str, code: int) -> None:
    result = traindeck("run", str(BEHAVE), "--steps", "3", "--step-time", "0.01", "--end", end, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert "behave: rank 0 starting" in result.stdout
    assert "{'loss'" in result.stdout


def test_foreground_ctrl_c_stops_the_run_gracefully(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "traindeck", "run", str(BEHAVE), "--steps", "2000",
                             "--step-time", "0.05"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    store = RunStore()
    record = wait_until(lambda: (runs := store.list_runs()) and (runs[0].progress or {}).get("current", 0) >= 2
                        and runs[0], timeout=60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    done = get(record.id)
    assert done.state == "stopped" and done.state_detail == "stopped gracefully (SIGINT)"
    assert leftovers(done) == []


def test_killing_the_foreground_cli_does_not_touch_the_run(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "traindeck", "run", str(BEHAVE), "--steps", "40",
                             "--step-time", "0.05"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    store = RunStore()
    record = wait_until(lambda: (runs := store.list_runs()) and (runs[0].progress or {}).get("current", 0) >= 2
                        and runs[0], timeout=60)
    proc.kill()
    proc.wait()
    done = wait_finished(record.id, 60)
    assert done.state == "succeeded"
    assert done.progress is not None and done.progress["current"] == 40
    follow = traindeck("logs", record.id, "--follow")
    assert follow.stdout.splitlines()[-1] == "behave: rank 0 done"


def test_stop_command_reports_and_confirms(tmp_path: Path) -> None:
    run_id = traindeck("run", "--detach", str(BEHAVE), "--steps", "2", "--step-time", "0.01", "--end",
                       "ignore_signals", cwd=tmp_path).stdout.split()[-1]
    wait_until(lambda: b"hangs" in Path(get(run_id).run_dir, "output.log").read_bytes(), timeout=60)
    result = traindeck("stop", run_id, "--grace", "0.5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("SIGINT" in line for line in lines[1:]) and any("SIGKILL" in line for line in lines[1:])
    assert lines[-1] == "confirmed: no process of the run remains"
    assert get(run_id).state == "stopped"
    again = traindeck("stop", run_id)
    assert "already ended (stopped)" in again.stdout


def test_logs_follow_reattaches_to_a_running_run(tmp_path: Path) -> None:
    run_id = traindeck("run", "--detach", str(BEHAVE), "--steps", "30", "--step-time", "0.05",
                       cwd=tmp_path).stdout.split()[-1]
    wait_until(lambda: get(run_id).launcher_pid, timeout=30)  # reattach to a run that has started, not a fixed wait
    follow = traindeck("logs", run_id, "--follow", timeout=60)
    lines = follow.stdout.splitlines()
    assert lines[0] == "behave: rank 0 starting" and lines[-1] == "behave: rank 0 done"
    assert get(run_id).finished


def test_unknown_run_and_missing_script_are_one_line_errors(tmp_path: Path) -> None:
    missing = traindeck("runs", "show", "nope")
    assert missing.returncode == 2 and missing.stderr.startswith("traindeck: no run matches")
    no_script = traindeck("run")
    assert no_script.returncode == 2 and "which script" in no_script.stderr
    bad = traindeck("run", "does_not_exist.py", cwd=tmp_path)
    assert bad.returncode == 2 and "script not found" in bad.stderr
    assert os.listdir(Path(os.environ["TRAINDECK_HOME"]) / "data" / "runs") == []


def test_model_size_checks_memory_before_launch_and_keeps_the_estimate_for_afterwards(tmp_path: Path) -> None:
    # A 1T-parameter model under ZeRO-2 + CPU optimizer offload needs ~22 TiB of host RAM: said before launch.
    result = traindeck("run", "--preset", "cpu-demo", "--launcher", "python", "--nproc", "1", "--model-size", "1T",
                       "--detach", str(BEHAVE), "--steps", "40", "--step-time", "0.1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # 4 s: long enough for the recorder's samples on a loaded machine
    assert "memory check (ZeRO-2 + optimizer offload (CPU)): does not fit" in result.stderr
    assert "host RAM: ZeRO-2 + optimizer offload (CPU) needs about 22351.7 GiB per node" in result.stderr
    run_id = result.stdout.split()[-1]
    wait_finished(run_id, 60)
    shown = json.loads(traindeck("runs", "show", run_id, "--json").stdout)
    assert shown["estimate"]["params"] == 10**12 and shown["estimate"]["verdict"] == "does not fit"
    compared = {c["what"]: c for c in shown["estimate_vs_measured"]}
    per_rank = compared["host RAM per rank (peak RSS)"]
    assert per_rank["estimated_bytes"] == shown["estimate"]["cpu_bytes_per_node"]  # one rank here
    assert per_rank["measured_bytes"] == shown["resources"]["peak_rank_rss_bytes"] and per_rank["measured_bytes"] > 0
    assert compared["GPU memory per device (peak)"]["measured_bytes"] is None  # no GPU: not recorded, not zero
    assert "host RAM per rank (peak RSS): estimated 22351.74 GiB, measured" in traindeck("runs", "show", run_id).stdout
    bad = traindeck("run", "--preset", "cpu-demo", "--model-size", "1.5Q", str(BEHAVE), cwd=tmp_path)
    assert bad.returncode == 2 and "--model-size 1.5Q" in bad.stderr and "Traceback" not in bad.stderr

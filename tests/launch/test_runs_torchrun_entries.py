"""`traindeck run` with the torchrun launcher, and with a module (`-m`) or a command (`--command`) instead of a
script file, as a user types them (the real CLI, real launchers, 2 CPU ranks each).

torchrun trains a tiny model sharded with native FSDP2 (`fully_shard`, gloo), and with FSDP1
(`FullyShardedDataParallel`, the wrapper accelerate's FSDP plugin uses) where this torch still has it. The module and command forms run the
stdlib stand-in script (behave.py) copied into a package the test makes, under the real accelerate and deepspeed
launchers, and behind a console-script-style executable on PATH that starts torchrun itself: what matters there is
the process tree (ranks two or three levels below the launcher), their tags, progress, stop and diagnosis.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.runhelp import BEHAVE, SCRIPTS, get, leftovers, metrics, ranks, wait_finished, wait_until

from traindeck.backend.launch.ports import pick_free_port
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

pytestmark = [pytest.mark.slow, pytest.mark.train]
torch = pytest.importorskip("torch", reason="needs the train extra")

FSDP2 = SCRIPTS / "fsdp2_tiny.py"
FSDP1 = SCRIPTS / "fsdp1_tiny.py"
MULTI_GPU_ACCELERATE = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_machines: 1
machine_rank: 0
num_processes: 2
use_cpu: false
"""
# What pip writes for a `[project.scripts]` entry: the console script imports its package and calls main().
CONSOLE_SCRIPT = """\
#!{python}
import sys
from tinypkg.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""
# Like `llamafactory-cli train`: the command starts torchrun itself and waits for it.
CLI_MODULE = """\
import subprocess
import sys


def main():
    return subprocess.call([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                            "--master_port", "{port}", "-m", "tinypkg.train", *sys.argv[1:]])
"""


def traindeck_run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """`traindeck run --detach ARGS` in `cwd`; the run's id."""
    result = subprocess.run([sys.executable, "-m", "traindeck", "run", "--detach", *args], capture_output=True,
                            text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def log_of(record: RunRecord) -> str:
    return Path(record.run_dir, "output.log").read_text(errors="replace")


def command_of(record: RunRecord) -> list[str]:
    return list(json.loads(Path(record.run_dir, "command.json").read_text())["argv"])


def stop_and_confirm(run_id: str) -> RunRecord:
    """Once both ranks run and rank 0 reported progress: stop the run, and its end check confirms nothing is left."""
    wait_until(lambda: len(ranks(r := get(run_id))) == 2 and (r.progress or {}).get("current", 0) >= 2, timeout=240)
    messages: list[str] = []
    outcome = stop_run(RunStore(), run_id, grace_s=5, report=messages.append)
    assert outcome.state == "stopped" and outcome.remaining == [], messages
    assert messages[-1] == "confirmed: no process of the run remains"
    done = get(run_id)
    assert leftovers(done) == []
    return done


# ---- torchrun ---------------------------------------------------------------------------------------------------

def test_torchrun_trains_fsdp2_on_two_cpu_ranks(tmp_path: Path) -> None:
    run_id = traindeck_run("--launcher", "torchrun", "--nproc", "2", str(FSDP2), "--steps", "20", cwd=tmp_path)
    done = wait_finished(run_id, 400)
    log = log_of(done)
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    argv = command_of(done)
    assert argv[1:6] == ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port"], argv
    assert "[rank0]: fsdp2_tiny: rank 0 of 2 sharded" in log and "[rank1]: fsdp2_tiny: rank 1 of 2 sharded" in log
    assert done.progress is not None and done.progress["current"] == 20 and done.progress["total"] == 20
    assert "loss" in metrics(run_id)
    # torchrun's elastic agent is the launcher, never a rank; the two workers are ranks 0 and 1.
    launchers = [p for p in done.processes if p["role"] == "launcher"]
    assert len(launchers) == 1 and launchers[0]["rank"] is None and launchers[0]["pid"] == done.launcher_pid
    assert set(ranks(done)) == {0, 1}
    with RunStore() as store:  # each rank's optimizer steps were timed from inside the rank
        assert {s.rank for s in store.steps(run_id)} == {0, 1}
    assert leftovers(done) == []


def test_accelerate_without_a_config_trains_on_every_cpu_rank_asked_for(tmp_path: Path) -> None:
    # No config given: traindeck writes a minimal one for the probed interpreter, which has no CUDA here. accelerate
    # launch starts several processes only through torchrun (MULTI_GPU) or mpirun; MULTI_CPU alone starts one.
    run_id = traindeck_run("--launcher", "accelerate", "--nproc", "2", str(SCRIPTS / "step_timing_loop.py"),
                           "--steps", "3", "--hidden", "32", cwd=tmp_path)
    done = wait_finished(run_id, 300)
    log = log_of(done)
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    for rank in (0, 1):
        assert f"[rank{rank}]: step_timing_loop: mode=accelerate rank={rank} " in log, log[-3000:]
    assert set(ranks(done)) == {0, 1}


@pytest.mark.skipif(not hasattr(importlib.import_module("torch.distributed.fsdp"), "FullyShardedDataParallel"),
                    reason="this torch has no torch.distributed.fsdp.FullyShardedDataParallel (FSDP1)")
def test_torchrun_trains_fsdp1_on_two_cpu_ranks(tmp_path: Path) -> None:
    run_id = traindeck_run("--launcher", "torchrun", "--nproc", "2", str(FSDP1), "--steps", "20", cwd=tmp_path)
    done = wait_finished(run_id, 400)
    log = log_of(done)
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    assert command_of(done)[1:4] == ["-m", "torch.distributed.run", "--nproc_per_node"]
    # Each rank holds its half of every unit's flat parameter (1633 parameters, padded to an even split).
    for rank in (0, 1):
        assert f"[rank{rank}]: fsdp1_tiny: rank {rank} of 2 sharded FULL_SHARD: holds 817 of 1633 parameters" \
            in log, log[-3000:]
        assert f"[rank{rank}]: fsdp1_tiny: rank {rank} done" in log
    assert done.progress is not None and done.progress["current"] == 20 and done.progress["total"] == 20
    assert "loss" in metrics(run_id)
    assert set(ranks(done)) == {0, 1}
    assert leftovers(done) == []


def test_torchrun_rank_raising_is_diagnosed_at_that_rank(tmp_path: Path) -> None:
    run_id = traindeck_run("--launcher", "torchrun", "--nproc", "2", str(FSDP2), "--steps", "200", "--step-time",
                           "0.05", "--die-rank", "1", "--die-at", "5", cwd=tmp_path)
    done = wait_finished(run_id, 400)
    assert done.state == "failed"
    diagnosis = done.diagnosis
    assert diagnosis is not None and diagnosis["kind"] == "exception", (diagnosis, log_of(done)[-3000:])
    assert diagnosis["rank"] == 1, diagnosis
    assert "planted failure on rank 1" in diagnosis["summary"] + " | ".join(diagnosis["evidence"]), diagnosis
    assert leftovers(done) == []


def test_torchrun_stop_leaves_nothing(tmp_path: Path) -> None:
    run_id = traindeck_run("--launcher", "torchrun", "--nproc", "2", str(FSDP2), "--steps", "100000",
                           "--step-time", "0.05", cwd=tmp_path)
    wait_until(lambda: len(ranks(get(run_id))) == 2, timeout=240)
    stacks = subprocess.run([sys.executable, "-m", "traindeck", "stacks", run_id, "--json"], capture_output=True,
                            text=True, timeout=120)
    assert stacks.returncode == 0, stacks.stderr
    assert sorted(r["rank"] for r in json.loads(stacks.stdout)["ranks"] if r["threads"]) == [0, 1], stacks.stdout
    done = stop_and_confirm(run_id)
    assert "[rank0]: fsdp2_tiny" in log_of(done) and "[rank1]: fsdp2_tiny" in log_of(done)


# ---- module and command forms ------------------------------------------------------------------------------------

def _package(root: Path, port: int | None = None) -> None:
    """tinypkg.train (the stand-in script as a module) and, with a port, tinypkg.cli (a command starting torchrun)."""
    package = root / "tinypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(BEHAVE.read_text())
    if port is not None:
        (package / "cli.py").write_text(CLI_MODULE.format(port=port))


def _accelerate_module(root: Path, *args: str) -> str:
    _package(root)
    (root / "multi.yaml").write_text(MULTI_GPU_ACCELERATE)  # accelerate starts torchrun for MULTI_GPU (CPU: fine)
    run_id = traindeck_run("--config", "multi.yaml", "--launcher", "accelerate", "-m", "tinypkg.train", *args,
                           cwd=root)
    argv = command_of(get(run_id))
    assert argv[argv.index("--module"):][:2] == ["--module", "tinypkg.train"], argv
    return run_id


def _deepspeed_module(root: Path, *args: str) -> str:
    _package(root)
    run_id = traindeck_run("--launcher", "deepspeed", "--nproc", "2", "-m", "tinypkg.train", *args, cwd=root,
                           env={"DS_ACCELERATOR": "cpu"})
    argv = command_of(get(run_id))
    assert argv[argv.index("--module"):][:2] == ["--module", "tinypkg.train"], argv
    return run_id


def _console_script(root: Path, *args: str) -> str:
    _package(root, port=pick_free_port())
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "tinypkg-cli"
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    # The package is importable as an installed one would be; traindeck itself stays where the tests found it.
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    run_id = traindeck_run("--command", "--", "tinypkg-cli", *args, cwd=root, env=env)
    record = get(run_id)
    assert command_of(record)[0] == str(script) and record.name == "tinypkg-cli"  # the command, found on PATH
    return run_id


FORMS: dict[str, Callable[..., str]] = {
    "accelerate -m": _accelerate_module,
    "deepspeed --module": _deepspeed_module,
    "console script starting torchrun": _console_script,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_module_or_command_rank_failure_is_diagnosed(tmp_path: Path, form: str) -> None:
    run_id = FORMS[form](tmp_path, "--steps", "400", "--step-time", "0.05", "--die-rank", "1", "--die-at", "20",
                         "--end", "exception")
    done = wait_finished(run_id, 400)
    log = log_of(done)
    assert done.state == "failed"
    assert done.diagnosis is not None and done.diagnosis["kind"] == "exception", (done.diagnosis, log[-3000:])
    assert done.diagnosis["rank"] == 1, done.diagnosis
    assert "RuntimeError: boom on rank 1" in done.diagnosis["summary"] + " | ".join(done.diagnosis["evidence"])
    assert "[rank0]: behave: rank 0 starting" in log and "[rank1]: behave: rank 1 starting" in log, log[-3000:]
    assert leftovers(done) == []


@pytest.mark.parametrize("form", list(FORMS))
def test_module_or_command_stop_leaves_nothing(tmp_path: Path, form: str) -> None:
    run_id = FORMS[form](tmp_path, "--steps", "100000", "--step-time", "0.05")
    done = stop_and_confirm(run_id)
    log = log_of(done)
    assert "[rank0]: behave: rank 0 starting" in log and "[rank1]: behave: rank 1 starting" in log, log[-3000:]


def test_a_module_run_is_shown_and_rerun_as_the_same_module(tmp_path: Path) -> None:
    _package(tmp_path)
    first = traindeck_run("-m", "tinypkg.train", "--steps", "3", "--step-time", "0", cwd=tmp_path)
    done = wait_finished(first, 120)
    assert done.state == "succeeded" and done.name == "train", done.diagnosis
    assert command_of(done)[1:] == ["-m", "tinypkg.train", "--steps", "3", "--step-time", "0"]
    shown = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", first, "--json"], capture_output=True,
                           text=True, timeout=120, check=True)
    assert json.loads(shown.stdout)["script"] == "tinypkg.train"
    again = subprocess.run([sys.executable, "-m", "traindeck", "rerun", first, "--detach"], capture_output=True,
                           text=True, timeout=300, cwd="/")
    assert again.returncode == 0, again.stderr
    rerun = wait_finished(again.stdout.strip().splitlines()[-1], 120)
    assert rerun.state == "succeeded", rerun.diagnosis
    assert command_of(rerun) == command_of(done)  # not "script not found: tinypkg.train"

"""DeepSpeed's launcher gives every rank `--local_rank=N` on its command line: a script whose argparse does not take
it, and `python` run as a command (DeepSpeed puts the argument right after it, where Python reads its own options),
stop at once. `traindeck run --launcher deepspeed --nproc 1` on CPU (DS_ACCELERATOR=cpu, as the cpu-demo preset sets),
as a user types it; the diagnosis must name the argument and the launcher, and say how to accept it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import get, leftovers, wait_finished

pytestmark = [pytest.mark.slow, pytest.mark.train]
pytest.importorskip("deepspeed", reason="needs the train extra")

STRICT = """\
import argparse

parser = argparse.ArgumentParser(prog="strict.py")
parser.add_argument("--steps", type=int, default=1)
parser.parse_args()
print("strict: started")
"""


def traindeck_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "traindeck", "run", "--detach", "--launcher", "deepspeed",
                             "--nproc", "1", *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                            env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert result.returncode == 0, result.stderr
    return result


def test_a_script_that_does_not_take_local_rank_is_diagnosed_as_such(tmp_path: Path) -> None:
    (tmp_path / "strict.py").write_text(STRICT)
    run_id = traindeck_run("strict.py", "--steps", "2", cwd=tmp_path).stdout.strip().splitlines()[-1]
    done = wait_finished(run_id, 300)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "failed" and "strict: started" not in log
    d = done.diagnosis
    assert d is not None and d["kind"] == "local_rank_arg", (d, log[-3000:])
    assert d["rank"] == 0
    assert d["summary"] == ("Rank 0 stopped at once: the script's argument parser does not accept --local_rank=N, "
                            "which the deepspeed launcher passes to the script."), d["summary"]
    assert d["evidence"][0] == "strict.py: error: unrecognized arguments: --local_rank=0", d["evidence"]
    assert 'parser.add_argument("--local_rank", type=int, default=-1)' in d["advice"]
    assert "torchrun or accelerate" in d["advice"] and "--no_local_rank" in d["advice"]
    assert leftovers(done) == []


def test_python_as_a_command_is_warned_before_and_diagnosed_after(tmp_path: Path) -> None:
    started = traindeck_run("--command", "--", "python", "-c", "print(1)", cwd=tmp_path)
    # Before the run: `python` is the training interpreter, and DeepSpeed's argument will stop it.
    assert f"the command's python is the training interpreter {sys.executable}" in started.stderr, started.stderr
    assert "puts --local_rank=N before the command's own arguments" in started.stderr, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    done = wait_finished(run_id, 300)
    argv = json.loads(Path(done.run_dir, "command.json").read_text())["argv"]
    assert argv[argv.index("--no_python"):] == ["--no_python", sys.executable, "-c", "print(1)"], argv
    d = get(run_id).diagnosis
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert d is not None and d["kind"] == "local_rank_arg", (d, log[-3000:])
    assert "Python itself refused --local_rank=N, which the deepspeed launcher puts right after the command" \
        in d["summary"], d["summary"]
    assert "unknown option --local_rank=0" in d["evidence"][0], d["evidence"]
    assert "choose Script or Module instead" in d["advice"]
    assert leftovers(done) == []

"""A queued run that starts a module (`queue add -m`) or a command (`queue add --command --`) instead of a script
file, started by the real queue keeper as `traindeck run -m/--command` starts it now.

The module is the stdlib stand-in script (behave.py) copied into a package the test makes, run under the real
DeepSpeed launcher on 2 CPU ranks; the command is a console-script-style executable on PATH that runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import BEHAVE, wait_finished

from traindeck.backend.queue.entries import QueueStore

# What pip writes for a `[project.scripts]` entry: the console script imports its package and calls main().
CONSOLE_SCRIPT = """\
#!{python}
import sys
from tinypkg.train import main
if __name__ == "__main__":
    sys.exit(main())
"""


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, **(env or {})})


def queue_add(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """`traindeck queue add ARGS` in `cwd` (the keeper it starts inherits `env`); the queued run's id."""
    added = cli("queue", "add", *args, cwd=cwd, env=env)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip().splitlines()[-1]


def package(root: Path) -> None:
    (root / "tinypkg").mkdir()
    (root / "tinypkg" / "__init__.py").write_text("")
    (root / "tinypkg" / "train.py").write_text(BEHAVE.read_text())


def command_of(run_dir: str) -> list[str]:
    return list(json.loads(Path(run_dir, "command.json").read_text())["argv"])


def listed(run_id: str, cwd: Path) -> dict:  # type: ignore[type-arg]
    rows = json.loads(cli("queue", "list", "--all", "--json", cwd=cwd).stdout)["runs"]
    return next(r for r in rows if r["id"] == run_id)


@pytest.mark.slow
@pytest.mark.train
def test_a_module_queued_under_deepspeed_runs_as_a_module_on_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="needs the train extra (deepspeed)")  # its launcher, not its import here
    package(tmp_path)
    cli("queue", "pause", cwd=tmp_path)  # queued and listed first: what the Queue page shows before it starts
    run_id = queue_add("--launcher", "deepspeed", "--nproc", "2", "-m", "tinypkg.train", "--steps", "3",
                       "--step-time", "0", cwd=tmp_path, env={"DS_ACCELERATOR": "cpu"})
    row = listed(run_id, tmp_path)
    assert (row["name"], row["entry"], row["runs"]) == ("train", "module", "-m tinypkg.train --steps 3 --step-time 0")
    with QueueStore() as queue:
        entry = queue.entry(run_id)
        assert entry is not None and (entry.launch.entry, entry.launch.script) == ("module", "tinypkg.train")
    cli("queue", "resume", cwd=tmp_path, env={"DS_ACCELERATOR": "cpu"})
    done = wait_finished(run_id, 300)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    argv = command_of(done.run_dir)
    assert argv[argv.index("--module"):] == ["--module", "tinypkg.train", "--steps", "3", "--step-time", "0"], argv
    assert "[rank0]: behave: rank 0 starting" in log and "[rank1]: behave: rank 1 starting" in log, log[-3000:]


def test_a_command_queued_with_command_runs_as_it_is_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    package(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "tinypkg-cli"
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    missing = cli("queue", "add", "--command", "--", "no-such-cli", "train", cwd=tmp_path, env=env)
    assert missing.returncode == 2 and missing.stderr.strip() == "traindeck: command not found on PATH: no-such-cli"
    run_id = queue_add("--command", "--", "tinypkg-cli", "--steps", "3", "--step-time", "0", cwd=tmp_path, env=env)
    done = wait_finished(run_id, 120)
    assert done.state == "succeeded", done.diagnosis
    assert done.name == "tinypkg-cli"
    assert command_of(done.run_dir) == [str(script), "--steps", "3", "--step-time", "0"]  # found on the PATH
    assert listed(run_id, tmp_path)["runs"] == "tinypkg-cli --steps 3 --step-time 0"


def test_a_sweep_of_a_module_queues_each_run_as_that_module(tmp_path: Path) -> None:
    cli("queue", "pause", cwd=tmp_path)  # nothing starts: what is kept for each run is the point
    added = cli("queue", "add", "--sweep", "steps=2,3", "-m", "tinypkg.train", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    with QueueStore() as queue:
        launches = [(e.name, e.launch.entry, e.launch.script, e.launch.script_args) for e in queue.waiting()]
    assert launches == [("train-steps=2", "module", "tinypkg.train", ["--steps", "2"]),
                        ("train-steps=3", "module", "tinypkg.train", ["--steps", "3"])]

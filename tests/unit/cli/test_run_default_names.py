"""A run's default name: the script's stem, then the preset's name when a preset is used, for `traindeck run` and
`traindeck queue add` alike, so runs of one script on different set-ups differ in `runs list` and History; a name
the store's runs have already is numbered (`-2`, `-3`), so runs of one set-up launched one after another differ
too; a given --name wins (real CLI processes, the real store and queue)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import BEHAVE, get, wait_finished

from traindeck.backend.queue.entries import QueueStore


def traindeck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def started(tmp_path: Path, *options: str) -> str:
    result = traindeck("run", "--detach", "--launcher", "python", "--nproc", "1", *options, str(BEHAVE),
                       "--steps", "1", "--step-time", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[-1]


@pytest.mark.launch
def test_two_runs_of_one_script_from_different_presets_get_different_names(tmp_path: Path) -> None:
    runs = [started(tmp_path, "--preset", "cpu-demo"), started(tmp_path, "--preset", "single-process"),
            started(tmp_path), started(tmp_path, "--preset", "cpu-demo", "--name", "mine")]
    for run_id in runs:
        wait_finished(run_id, 60)
    assert [get(r).name for r in runs] == ["behave-cpu-demo", "behave-single-process", "behave", "mine"]
    listed = traindeck("runs", "list", cwd=tmp_path).stdout
    assert "behave-cpu-demo " in listed and "behave-single-process " in listed  # whole, not cut
    shown = traindeck("runs", "show", "behave-single-process", cwd=tmp_path)  # the name finds the run
    assert shown.returncode == 0 and runs[1] in shown.stdout, shown.stderr


def test_a_queued_run_is_named_after_its_preset_too(tmp_path: Path) -> None:
    for preset in ("cpu-demo", "zero2"):
        added = traindeck("queue", "add", "--hold", "--preset", preset, str(BEHAVE), cwd=tmp_path)
        assert added.returncode == 0, added.stderr
    named = traindeck("queue", "add", "--hold", "--preset", "zero2", "--name", "mine", str(BEHAVE), cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    with QueueStore() as queue:
        assert [e.name for e in queue.waiting()] == ["behave-cpu-demo", "behave-zero2", "mine"]
    # `queue list` shows a long name whole (a script, a preset and a swept value), where it used to cut at 32.
    long = "train_tiny-zero-infinity-nvme-lr=1e-5"
    assert traindeck("queue", "add", "--hold", "--name", long, str(BEHAVE), cwd=tmp_path).returncode == 0
    listed = traindeck("queue", "list", cwd=tmp_path)
    assert listed.returncode == 0 and long in listed.stdout, listed.stdout


@pytest.mark.launch
def test_runs_of_one_preset_launched_one_after_another_are_numbered(tmp_path: Path) -> None:
    runs = []
    for options in (("--preset", "cpu-demo"), ("--preset", "cpu-demo"), ("--preset", "cpu-demo"), (),
                    ("--preset", "cpu-demo", "--name", "mine"), ("--preset", "cpu-demo", "--name", "mine")):
        runs.append(started(tmp_path, *options))
        wait_finished(runs[-1], 60)  # one after another, as a person does
    assert [get(r).name for r in runs] == ["behave-cpu-demo", "behave-cpu-demo-2", "behave-cpu-demo-3", "behave",
                                           "mine", "mine"]  # a name given is the person's to repeat
    # The queue numbers after the runs it shares the store with, and after its own waiting runs.
    for _ in range(2):
        added = traindeck("queue", "add", "--hold", "--preset", "cpu-demo", str(BEHAVE), cwd=tmp_path)
        assert added.returncode == 0, added.stderr
    with QueueStore() as queue:
        assert [e.name for e in queue.waiting()] == ["behave-cpu-demo-4", "behave-cpu-demo-5"]
    shown = traindeck("runs", "show", "behave-cpu-demo-2", cwd=tmp_path)  # the numbered name finds its run
    assert shown.returncode == 0 and runs[1] in shown.stdout, shown.stderr


def test_queued_runs_of_one_preset_are_numbered(tmp_path: Path) -> None:
    for _ in range(3):
        added = traindeck("queue", "add", "--hold", "--preset", "zero2", str(BEHAVE), cwd=tmp_path)
        assert added.returncode == 0, added.stderr
    with QueueStore() as queue:
        assert [e.name for e in queue.waiting()] == ["behave-zero2", "behave-zero2-2", "behave-zero2-3"]

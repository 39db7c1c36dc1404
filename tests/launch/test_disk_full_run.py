"""A run whose data folder fills up (a 3 MiB tmpfs, a script printing 4 MiB): the supervisor keeps draining the
job, and once space is back the run ends as it did (succeeded, exit code 0) instead of being taken for lost, its
detail saying where the log was cut, the log's path and the disk's free space. Skipped where no tmpfs can be
mounted (not root)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.runhelp import events, get, job_env, start, wait_finished, wait_until
from support.smalldisk import fill
from support.smalldisk import small_disk as mounted

PRINTER = """
import os, sys, time
go, printed = sys.argv[1], sys.argv[2]
while not os.path.exists(go):  # the test fills the disk first
    time.sleep(0.05)
line = "x" * 1023 + "\\n"
for i in range(4096):
    sys.stdout.write(line)
sys.stdout.flush()
open(printed, "w").close()
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path, "3m") as mount:
        yield mount


def test_a_run_that_fills_the_disk_ends_as_it_did_once_space_is_back(small_disk: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINDECK_HOME", str(small_disk / "home"))
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    go, printed = tmp_path / "go", tmp_path / "printed"
    # Warn under 1 MiB free (1 GiB by default): said once, as an event the dashboard and the notify command get.
    run = start([sys.executable, str(script), str(go), str(printed)],
                env=job_env(TRAINDECK_LOW_DISK_MB="1"))
    wait_until(lambda: get(run.id).launcher_pid, timeout=30)
    # Under the threshold first: the warning comes while there is still room to write it.
    filler = small_disk / "filler"
    fill(filler, leave=512 << 10)
    wait_until(lambda: [text for kind, text in events(run.id) if kind == "low_disk"], timeout=30)
    # Then what room is left: the run's 4 MiB of output cannot all be kept.
    fill(filler)
    go.touch()
    wait_until(printed.exists, timeout=60)
    time.sleep(3.0)
    assert get(run.id).state == "running"  # the end waits for room (it was marked lost before)
    filler.unlink()
    done = wait_finished(run.id, 60)
    assert (done.state, done.exit_code) == ("succeeded", 0), (done.state_detail, done.diagnosis)
    # The cut names the log and the disk's free space, read at the run's end.
    log = small_disk / "home" / "data" / "runs" / run.id / "output.log"
    cut = re.search(rf"the log was cut at byte ([\d,]+): the disk was full \({re.escape(str(log))}, "
                    r"free (\d+\.\d) MiB at the run's end\)", done.state_detail)
    assert cut is not None, done.state_detail
    assert int(cut[1].replace(",", "")) == log.stat().st_size < 4 << 20
    low = [text for kind, text in events(run.id) if kind == "low_disk"]
    assert len(low) == 1 and low[0].startswith("the disk of the data folder has "), events(run.id)


SAVER = """
import os, sys
root = sys.argv[1]
for step in range(100, 10000, 100):  # a checkpoint folder per save, as DeepSpeed's save_checkpoint makes them
    os.makedirs(os.path.join(root, f"global_step{step}"))
    with open(os.path.join(root, f"global_step{step}", "state.pt"), "wb") as f:
        f.write(b"\\0" * 4096)
"""


def test_a_run_that_dies_saving_to_a_full_disk_is_told_with_the_path_and_its_free_space(tmp_path: Path) -> None:
    """The job's own disk fills (not the data folder's): the diagnosis names the path from the error and the
    disk's free space at the run's end, read by the supervisor."""
    with mounted(tmp_path, "2m", inodes=8) as mount:
        script = tmp_path / "saver.py"
        script.write_text(SAVER)
        run = start([sys.executable, str(script), str(mount)], env=job_env())
        done = wait_finished(run.id, 60)
        assert done.state == "failed", done.state_detail
        diagnosis = done.diagnosis or {}
        assert diagnosis.get("kind") == "disk_full", diagnosis
        assert diagnosis["summary"].startswith(f"The run could not write at {mount}/global_step"), diagnosis
        assert diagnosis["summary"].endswith(": no space left on the device."), diagnosis
        assert any(e.startswith(f"the disk holding {mount}/global_step") and e.endswith(" free now")
                   for e in diagnosis["evidence"]), diagnosis["evidence"]
        assert f"{mount}/global_step" in diagnosis["advice"]

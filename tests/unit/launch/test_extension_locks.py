"""A killed op build's `lock` file (torch's FileBaton) made every later load of that op wait forever without a word.
Judged stale only when no living process could be building there; removed by set-up and by the supervisor before a
run starts, and said. The end-to-end test uses torch's own FileBaton the way torch.utils.cpp_extension loads an op."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.runhelp import events, start, wait_finished

from traindeck.backend.launch.extension_locks import MIN_AGE_S, clear_stale_locks, stale_locks


def _lock(folder: Path, op: str = "cpu_adam", age_s: float = 600.0) -> Path:
    lock = folder / op / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def _sleeper(**kwargs: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)  # type: ignore[call-overload]


def test_a_lock_nobody_holds_is_removed_and_said(tmp_path: Path) -> None:
    lock = _lock(tmp_path)
    said = clear_stale_locks(tmp_path)
    assert not lock.exists()
    assert len(said) == 1 and "stale build lock" in said[0] and "10 min ago" in said[0] and str(lock) in said[0]
    assert clear_stale_locks(tmp_path) == []


def test_a_lock_just_made_is_kept(tmp_path: Path) -> None:
    lock = _lock(tmp_path, age_s=MIN_AGE_S / 2)
    assert stale_locks(tmp_path) == [] and lock.exists()


@pytest.mark.parametrize("how", ["environment", "working folder", "command line"])
def test_a_lock_is_kept_while_a_process_could_be_building(tmp_path: Path, how: str) -> None:
    lock = _lock(tmp_path)
    if how == "environment":  # the Python process holding the baton
        proc = _sleeper(env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path)))
    elif how == "working folder":  # ninja runs in the op's folder
        proc = _sleeper(cwd=lock.parent)
    else:  # a compiler names the op's sources and objects
        proc = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)",
                                 str(lock.parent / "cpu_adam.o")])
    try:
        time.sleep(0.3)  # its command line and environment are readable once exec'd
        assert stale_locks(tmp_path) == [] and lock.exists()
    finally:
        proc.kill()
        proc.wait()
    assert stale_locks(tmp_path) == [lock]


LOADER = textwrap.dedent("""
    import os
    from torch.utils.file_baton import FileBaton  # what torch.utils.cpp_extension takes before loading an op
    baton = FileBaton(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "cpu_adam", "lock"))
    if baton.try_acquire():
        print("op loaded", flush=True)
        baton.release()
    else:
        baton.wait()  # what a stale lock made every run do, forever
        print("waited for another build", flush=True)
""")


@pytest.mark.launch
def test_a_run_is_not_held_by_a_lock_a_killed_build_left(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    extensions = tmp_path / "torch_extensions"
    lock = _lock(extensions)
    script = tmp_path / "load_op.py"
    script.write_text(LOADER)
    run = start([sys.executable, str(script)], env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions),
                                                         PYTHONUNBUFFERED="1"))
    record = wait_finished(run.id, 120)
    output = (Path(record.run_dir) / "output.log").read_text()
    assert record.state == "succeeded", output
    assert "traindeck: removed a stale build lock" in output and str(lock) in output
    assert "op loaded" in output and not lock.exists()
    assert any(kind == "started" for kind, _ in events(run.id))

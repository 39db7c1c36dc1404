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


@pytest.mark.parametrize("how", ["working folder", "command line"])
def test_a_lock_is_kept_while_a_process_builds_that_op(tmp_path: Path, how: str) -> None:
    lock = _lock(tmp_path)
    other = _lock(tmp_path, op="fused_adam")
    if how == "working folder":  # ninja runs in the op's folder
        proc = _sleeper(cwd=lock.parent)
    else:  # a compiler names the op's sources and objects
        proc = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(60)",
                                 str(lock.parent / "cpu_adam.o")])
    try:
        time.sleep(0.3)  # its command line and working folder are readable once exec'd
        assert stale_locks(tmp_path) == [other] and lock.exists()  # another op's build holds nothing of this one
    finally:
        proc.kill()
        proc.wait()
    assert stale_locks(tmp_path) == [lock, other]


def test_who_holds_a_lock_is_said_for_ranks_waiting_on_it(tmp_path: Path) -> None:
    from traindeck.backend.launch.extension_locks import lock_holders

    lock = _lock(tmp_path)
    builder = _sleeper(cwd=lock.parent)
    try:
        time.sleep(0.3)
        said = lock_holders(tmp_path)
        assert said.startswith(f"cpu_adam lock held by PID {builder.pid} (") and said.endswith("), building it")
    finally:
        builder.kill()
        builder.wait()
    said = lock_holders(tmp_path)
    assert said.startswith("held by nobody: removed a stale build lock") and str(lock) in said
    assert not lock.exists()


def test_sharing_the_extensions_folder_holds_no_lock(tmp_path: Path) -> None:
    # The user's shell exporting TORCH_EXTENSIONS_DIR, another run using it, and the ranks waiting on the lock all
    # have it in their environment: none of them builds anything.
    lock = _lock(tmp_path)
    proc = _sleeper(env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path)))
    try:
        time.sleep(0.3)
        assert stale_locks(tmp_path) == [lock]
    finally:
        proc.kill()
        proc.wait()


BUILD = textwrap.dedent("""
    import sys
    from torch.utils.cpp_extension import load_inline
    load_inline("traindeck_lock_probe", cpp_sources="int probe() { return 7; }", functions=["probe"],
                build_directory=sys.argv[1], verbose=True)
""")


@pytest.mark.train
def test_a_real_build_killed_mid_way_leaves_a_lock_judged_stale_once_its_compilers_are_gone(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import psutil

    op = tmp_path / "torch_extensions" / "traindeck_lock_probe"
    op.mkdir(parents=True)
    script = tmp_path / "build.py"
    script.write_text(BUILD)
    build = subprocess.Popen([sys.executable, str(script), str(op)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def compiling() -> bool:
            try:
                return any(p.cwd() == str(op) for p in psutil.Process(build.pid).children(recursive=True))
            except psutil.Error:
                return False

        deadline = time.monotonic() + 120
        while not compiling():
            assert build.poll() is None and time.monotonic() < deadline, "the build never started ninja"
            time.sleep(0.05)
        assert (op / "lock").exists()
        # While ninja and the compiler run, the lock is held (even when old enough to be judged).
        assert stale_locks(op.parent, now=time.time() + 3600) == []
    finally:
        # A force stop or an OOM kill of the whole build: nothing of it runs its clean-up. ninja gives each compiler
        # its own process group, so they are killed by pid (a compiler left running keeps the lock held until its
        # end, rightly).
        tree = [build.pid]
        try:
            tree += [p.pid for p in psutil.Process(build.pid).children(recursive=True)]
        except psutil.Error:
            pass
        for pid in tree:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        build.wait()
        # A compiler ninja started between the listing and the kill is orphaned, still compiling in the op's folder
        # (under load for longer than the wait below): the whole build is what a force stop ends, so it goes too.
        for _ in range(50):
            left = [p for p in psutil.process_iter(["cwd", "cmdline"])
                    if p.info["cwd"] == str(op) or any(str(op) in arg for arg in p.info["cmdline"] or ())]
            if not left:
                break
            for proc in left:
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            time.sleep(0.1)
    deadline = time.monotonic() + 30
    while stale_locks(op.parent, now=time.time() + 3600) != [op / "lock"]:
        assert time.monotonic() < deadline, "the lock never became stale"
        assert (op / "lock").exists()
        time.sleep(0.2)


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

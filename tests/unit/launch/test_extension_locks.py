"""A killed op build's `lock` file (torch's FileBaton) made every later load of that op wait forever without a word.
Judged stale only when no living process could be building there; removed by set-up and by the supervisor before a
run starts, and said. The end-to-end tests use torch's own FileBaton the way torch.utils.cpp_extension loads an op:
a real build killed mid-way and the run after it; 2-rank runs whose ranks wait on a lock held by a living build
and then by a killed one, named per op in the stall banner and `traindeck stacks`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.runhelp import events, start, wait_finished

from traindeck.backend.launch.extension_locks import MIN_AGE_S, clear_stale_locks, stale_locks
from traindeck.backend.runs.record.run_store import RunRecord


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
    from traindeck.backend.launch.extension_locks import lock_waits

    lock = _lock(tmp_path)
    builder = _sleeper(cwd=lock.parent)
    try:
        time.sleep(0.3)
        assert lock_waits(tmp_path) == [f"DeepSpeed's cpu_adam build lock (held by PID {builder.pid}, "
                                        f"{sys.executable} -c import time; time.sleep(60))"]
    finally:
        builder.kill()
        builder.wait()
    assert lock_waits(tmp_path) == ["DeepSpeed's cpu_adam build lock (held by nobody: removed)"]
    assert not lock.exists()
    young = _lock(tmp_path, age_s=MIN_AGE_S / 2)
    assert lock_waits(tmp_path) == ["DeepSpeed's cpu_adam build lock (being taken: a build is starting)"]
    assert young.exists()


def test_the_waiters_own_extensions_folder_is_looked_in(tmp_path: Path) -> None:
    from traindeck.backend.launch.extension_locks import waited_locks

    theirs, default = tmp_path / "theirs", tmp_path / "cache" / "torch_extensions" / "py311_cpu"
    _lock(theirs), _lock(default, op="fused_adam")
    with_dir = _sleeper(env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(theirs)))
    without = _sleeper(env={k: v for k, v in dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")).items()
                            if k != "TORCH_EXTENSIONS_DIR"})
    try:
        time.sleep(0.3)
        assert waited_locks([with_dir.pid]) == ["DeepSpeed's cpu_adam build lock (held by nobody: removed)"]
        assert waited_locks([without.pid]) == ["DeepSpeed's fused_adam build lock (held by nobody: removed)"]
    finally:
        for proc in (with_dir, without):
            proc.kill()
            proc.wait()


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


@pytest.mark.launch
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

    # The next run that loads the op is not held by it: the lock is removed before its launcher starts, and said.
    then = time.time() - 600  # the killed build is a while back
    os.utime(op / "lock", (then, then))
    run = start([sys.executable, str(_loader(tmp_path))], env=dict(
        os.environ, TORCH_EXTENSIONS_DIR=str(op.parent), TRAINDECK_TEST_OP=op.name, PYTHONUNBUFFERED="1"))
    record = wait_finished(run.id, 120)
    output = (Path(record.run_dir) / "output.log").read_text()
    assert record.state == "succeeded", output
    assert f"traindeck: removed a stale build lock left by a build that was stopped 10 min ago: {op / 'lock'}" \
        in output and "op loaded" in output


LOADER = textwrap.dedent("""
    import os
    from torch.utils.file_baton import FileBaton  # what torch.utils.cpp_extension takes before loading an op
    op = os.environ.get("TRAINDECK_TEST_OP", "cpu_adam")
    baton = FileBaton(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], op, "lock"))
    if baton.try_acquire():
        print("op loaded", flush=True)
        baton.release()
    else:
        baton.wait()  # what a stale lock made every run do, forever
        print("waited for another build", flush=True)
""")


def _loader(folder: Path) -> Path:
    script = folder / "load_op.py"
    script.write_text(LOADER)
    return script


@pytest.mark.launch
def test_a_run_is_not_held_by_a_lock_a_killed_build_left(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    extensions = tmp_path / "torch_extensions"
    lock = _lock(extensions)
    run = start([sys.executable, str(_loader(tmp_path))], env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions),
                                                         PYTHONUNBUFFERED="1"))
    record = wait_finished(run.id, 120)
    output = (Path(record.run_dir) / "output.log").read_text()
    assert record.state == "succeeded", output
    assert "traindeck: removed a stale build lock" in output and str(lock) in output
    assert "op loaded" in output and not lock.exists()
    assert any(kind == "started" for kind, _ in events(run.id))


# A build under way the way torch's FileBaton takes it (the `lock` file made with O_EXCL), in the op's folder as
# ninja runs there; its lock dated an hour back (a build started long ago). Prints "holding" once it holds it.
HOLDER = textwrap.dedent("""
    import os, sys, time
    op = sys.argv[1]
    os.chdir(op)
    fd = os.open(os.path.join(op, "lock"), os.O_CREAT | os.O_EXCL)
    os.close(fd)
    then = time.time() - 3600
    os.utime(os.path.join(op, "lock"), (then, then))
    print("holding", flush=True)
    time.sleep(600)
""")

# Each rank loads the op as torch.utils.cpp_extension does: it waits on the baton while another process builds.
WAITER = textwrap.dedent("""
    import os
    from torch.utils.file_baton import FileBaton
    rank = os.environ["RANK"]
    op = os.environ.get("TRAINDECK_TEST_OP", "cpu_adam")
    baton = FileBaton(os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], op, "lock"))
    if baton.try_acquire():
        baton.release()
        print(f"rank {rank} loaded the op at once", flush=True)
    else:
        print(f"rank {rank} waiting for the op's build", flush=True)
        baton.wait()
        print(f"rank {rank} loaded the op", flush=True)
""")


def _hold(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    op = tmp_path / "torch_extensions" / "cpu_adam"
    op.mkdir(parents=True)
    script = tmp_path / "build_cpu_adam.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), str(op)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder, op / "lock"


def _waiting_run(tmp_path: Path, lock: Path, stall_min_s: float) -> RunRecord:
    """A 2-rank run whose ranks wait on `lock`, once both say so. Its stall threshold is over the supervisor's 5 s
    check interval, so that a start-up stall (torch imported in silence) is always seen to resume."""
    from support.runhelp import launch, wait_until

    script = tmp_path / "load_op.py"
    script.write_text(WAITER)
    run = launch(script, launcher="python", nproc=2, name="lock-wait", stall_min_s=stall_min_s,
                 env={"TORCH_EXTENSIONS_DIR": str(lock.parent.parent)})

    def both_waiting() -> bool:
        log = Path(run.run_dir, "output.log").read_text(errors="replace")
        return "rank 0 waiting for the op's build" in log and "rank 1 waiting for the op's build" in log
    wait_until(both_waiting, 120)
    return run


def _stop_if_running(run_id: str) -> None:
    from traindeck.backend.runs.control.lifecycle import stop_run
    from traindeck.backend.runs.record.run_store import RunStore

    with RunStore() as store:
        record = store.get_run(run_id)
        if record is not None and not record.finished:
            stop_run(store, run_id)


def _lock_stacks_event(run_id: str) -> str:
    """The stall's stacks that found the ranks at the lock (a start-up stall may have taken others before)."""
    from support.runhelp import events, wait_until

    return wait_until(lambda: next((text for kind, text in events(run_id)
                                     if kind == "stacks" and "build lock" in text), ""), 120)


@pytest.mark.launch
@pytest.mark.train
def test_ranks_waiting_on_a_held_build_lock_name_its_holder_in_the_stall_banner_and_stacks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from support.runhelp import get, wait_finished

    holder, lock = _hold(tmp_path)
    try:
        run = _waiting_run(tmp_path, lock, stall_min_s=6.0)
        try:
            said = _lock_stacks_event(run.id)
            # Its command, cut where long (where depends on the test's folders): what is shown starts it.
            command = " ".join(holder.args)  # type: ignore[arg-type]
            held = re.compile(re.escape(f"ranks 0, 1 waiting for DeepSpeed's cpu_adam build lock (held by PID "
                                        f"{holder.pid}, ") + r"(.+?)(?:\.\.\.)?\), in load_op\.py:\d+ <module>")
            for text in (said, get(run.id).state_detail):
                found = held.search(text)
                assert found and len(found.group(1)) >= 20 and command.startswith(found.group(1)), (text, command)
            assert get(run.id).state_detail.startswith("stalled: no output or progress for ")
            assert lock.exists()

            # The build is killed mid-way: its lock stays. `traindeck stacks` finds nobody holding it, removes it,
            # and the ranks go on.
            holder.kill()
            holder.wait()
            out = subprocess.run([sys.executable, "-m", "traindeck", "stacks", run.id], capture_output=True,
                                 text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith("ranks 0, 1 waiting for DeepSpeed's cpu_adam build lock (held by nobody: "
                                         "removed), in load_op.py:"), out.stdout
            assert not lock.exists()
            record = wait_finished(run.id, 120)
        finally:
            _stop_if_running(run.id)
    finally:
        holder.kill()
        holder.wait()
    output = Path(record.run_dir, "output.log").read_text(errors="replace")
    assert record.state == "succeeded", output
    assert "rank 0 loaded the op" in output and "rank 1 loaded the op" in output


@pytest.mark.launch
@pytest.mark.train
def test_a_lock_a_build_killed_under_waiting_ranks_left_is_removed_and_said_in_the_stall_banner(
        tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from support.runhelp import events, wait_finished

    holder, lock = _hold(tmp_path)
    try:
        # The build dies while the ranks wait on it (an OOM kill, a force stop), long before a stall is declared.
        run = _waiting_run(tmp_path, lock, stall_min_s=15.0)
        holder.kill()
        holder.wait()
        try:
            said = _lock_stacks_event(run.id)
            record = wait_finished(run.id, 120)
        finally:
            _stop_if_running(run.id)
    finally:
        holder.kill()
        holder.wait()
    assert said.startswith("stacks when the run stalled: ranks 0, 1 waiting for DeepSpeed's cpu_adam build lock "
                           "(held by nobody: removed), in load_op.py:"), said
    assert not lock.exists()
    output = Path(record.run_dir, "output.log").read_text(errors="replace")
    assert record.state == "succeeded", output
    assert "rank 0 loaded the op" in output and "rank 1 loaded the op" in output
    kinds = [kind for kind, _text in events(run.id)]
    assert kinds.index("stall") < kinds.index("stacks")

"""A run's cgroup: where cgroup v2 is, which recorded path is accepted as a run's, and a real cgroup's members,
kill, emptiness and removal (skipped where this process may not create a cgroup)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from traindeck.backend.runs.record.folder_record import write_cgroup
from traindeck.backend.runs.supervisor import run_cgroup
from traindeck.backend.runs.supervisor.run_cgroup import RunCgroup, for_run, place, v2_directory, v2_mounts

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
CONTAINER = "50 40 0:30 /docker/abc /sys/fs/cgroup\\040v2 rw - cgroup2 cgroup2 rw\n"


def test_cgroup_v2_mounts_are_read_from_mountinfo_v1_ones_are_not() -> None:
    assert v2_mounts(HYBRID) == [(Path("/sys/fs/cgroup/unified"), "/")]
    assert v2_mounts(CONTAINER) == [(Path("/sys/fs/cgroup v2"), "/docker/abc")]
    assert v2_mounts("") == []


def test_a_cgroup_path_maps_to_its_directory_under_the_mount_that_shows_it() -> None:
    hybrid = v2_mounts(HYBRID)
    assert v2_directory("/", hybrid) == Path("/sys/fs/cgroup/unified")
    assert v2_directory("/user.slice/a.scope", hybrid) == Path("/sys/fs/cgroup/unified/user.slice/a.scope")
    container = v2_mounts(CONTAINER)
    assert v2_directory("/docker/abc/inner", container) == Path("/sys/fs/cgroup v2/inner")
    assert v2_directory("/docker/other", container) is None  # not below what the mount shows
    assert v2_directory("/docker/abc/../x", container) is None


def test_no_cgroup_when_asked_for_none_or_when_the_id_cannot_name_one() -> None:
    off = place("20261127-101010-abcd", {run_cgroup.OPT_OUT: "off"})
    assert off.cgroup is None and not off.any and "asks for none" in off.reason
    odd = place("../../escape", {})
    assert odd.cgroup is None and "cannot name a cgroup" in odd.reason


def test_a_recorded_path_is_taken_only_for_a_cgroup_of_that_run(tmp_path: Path) -> None:
    run_id = "20261127-101010-abcd"
    fake = tmp_path / f"run-{run_id}"  # the right name, but not under a cgroup v2 mount
    fake.mkdir()
    write_cgroup(tmp_path, run_id, fake)
    assert for_run(tmp_path, run_id) is None
    assert for_run(tmp_path, "20261127-101010-ffff") is None  # another run's record
    assert for_run(None, run_id) is None
    for mount, _root in v2_mounts():
        write_cgroup(tmp_path, run_id, mount)  # the whole hierarchy: never a run's cgroup
        assert for_run(tmp_path, run_id) is None


def _created(run_id: str) -> RunCgroup:
    placement = place(run_id, {})
    if placement.cgroup is None:
        pytest.skip(f"no writable cgroup v2 here: {placement.reason or 'only a systemd scope'}")
    return placement.cgroup


@pytest.fixture
def cgroup() -> Iterator[RunCgroup]:
    made = _created(f"unit-{os.getpid()}")
    yield made
    made.empty_out(timeout_s=5.0)
    made.remove()


def test_a_real_cgroup_lists_kills_and_removes_its_whole_subtree(cgroup: RunCgroup, tmp_path: Path) -> None:
    nested = cgroup.path / "inner"
    nested.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    outer = subprocess.Popen(sleeper, preexec_fn=lambda: run_cgroup._join(os.fsencode(cgroup.path / "cgroup.procs")))
    inner = subprocess.Popen(sleeper, preexec_fn=lambda: run_cgroup._join(os.fsencode(nested / "cgroup.procs")))
    try:
        assert cgroup.members() == sorted([outer.pid, inner.pid])
        assert cgroup.populated() is True
        assert run_cgroup.is_member(inner.pid, cgroup) and not run_cgroup.is_member(os.getpid(), cgroup)
        assert not cgroup.remove()  # not while it holds processes
        assert cgroup.empty_out(timeout_s=10.0, reap=lambda: [p.poll() for p in (outer, inner)])
        assert outer.wait() == -9 and inner.wait() == -9
        assert cgroup.members() == [] and cgroup.populated() is False
        write_cgroup(tmp_path, f"unit-{os.getpid()}", cgroup.path)
        assert for_run(tmp_path, f"unit-{os.getpid()}") == cgroup  # a real one of this run is accepted
        assert cgroup.remove() and not cgroup.path.exists() and cgroup.members() == []
    finally:
        for proc in (outer, inner):
            proc.kill()
            proc.wait()


def test_a_second_cgroup_for_the_same_run_is_refused(cgroup: RunCgroup) -> None:
    again = place(f"unit-{os.getpid()}", {})
    assert again.cgroup is None and ("exists already" in again.reason or again.scope)


FAKE_SYSTEMD_RUN = """#!{python}
# Stands in for `systemd-run --user --scope`: moves itself into a cgroup named after --unit, then execs the command.
import os, sys
args = sys.argv[1:]
command = args[args.index("--") + 1:]
unit = next((a.split("=", 1)[1] for a in args if a.startswith("--unit=")), None)
if unit is not None:
    folder = os.path.join({base!r}, unit)
    os.mkdir(folder)
    with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
        handle.write("0")
os.execvp(command[0], command)
"""


def test_without_a_writable_subtree_a_user_gets_a_systemd_scope_found_after_the_start(
        cgroup: RunCgroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "systemd-run"
    tool.write_text(FAKE_SYSTEMD_RUN.format(python=sys.executable, base=str(cgroup.path)))
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(run_cgroup.os, "geteuid", lambda: 1000)  # a user ...
    monkeypatch.setattr(run_cgroup, "_create_under", lambda _own, _id: "no subtree of ours is writable")  # ... bare
    run_id = f"scope-{os.getpid()}"
    placement = place(run_id, {})
    assert placement.cgroup is None and placement.scope == run_cgroup.scope_unit(run_id)
    assert placement.prefix[0] == str(tool) and placement.prefix[-1] == "--"
    sleeper = subprocess.Popen([*placement.prefix, sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        scope = run_cgroup.scope_cgroup(sleeper.pid, placement.scope)
        assert scope is not None and scope.path == cgroup.path / placement.scope
        assert scope.members() == [sleeper.pid]
        write_cgroup(tmp_path, run_id, scope.path)
        assert for_run(tmp_path, run_id) == scope  # the scope's name is accepted as this run's
        assert scope.empty_out(timeout_s=10.0, reap=sleeper.poll) and sleeper.wait() == -9
        assert scope.remove()
    finally:
        sleeper.kill()
        sleeper.wait()

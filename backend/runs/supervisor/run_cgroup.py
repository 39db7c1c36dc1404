"""A run's own cgroup (v2): every process the launcher starts, whatever its environment or session, is in it.

The environment marker and the supervisor's tree (processes.py) miss a process that drops the marker (a child
started with an environment of its own) once the supervisor is gone (a daemon that left the session is re-parented
to init). A cgroup holds every descendant of a process placed in it, so a run whose launcher starts inside one can be
listed, killed and confirmed empty through it, as systemd scopes and Slurm's cgroup process tracking do.

Where the cgroup comes from (`place`):
- a cgroup v2 subtree this process may write (root, or a subtree delegated to the user, such as a systemd user
  service's): `<mount><own cgroup>/traindeck/run-<id>`, which the launcher joins itself before it execs
  (`Placement.join`), so it and all it starts are inside from their first instruction;
- otherwise, not root, a systemd user scope: the launcher's argv is prefixed with `systemd-run --user --scope`
  (`Placement.prefix`), which moves itself into the scope before it execs the launcher (`scope_cgroup` finds it);
- otherwise none, with the reason; TRAINDECK_RUN_CGROUP=off asks for none.

The path is kept in the run folder (folder_record.write_cgroup) so that a later traindeck, after the supervisor
died, finds the run's processes through it (`for_run`, which only accepts a run-<id> cgroup of that run under a
cgroup v2 mount). Linux only; elsewhere `place` says why not and `for_run` returns None.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traindeck.backend.runs.record.folder_record import read_cgroup

OPT_OUT = "TRAINDECK_RUN_CGROUP"  # "off" (or "0", "no"): runs get no cgroup
BASE = "traindeck"
SCOPE_PROBE_TIMEOUT_S = 5.0


# ---- where cgroup v2 is ------------------------------------------------------------------------------------------
def v2_mounts(mountinfo: str | None = None) -> list[tuple[Path, str]]:
    """(mount point, the cgroup path it shows as its root) of every cgroup2 mount, from /proc/self/mountinfo."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or right.split()[:1] != ["cgroup2"]:
            continue
        found.append((Path(_unescape(fields[4])), _unescape(fields[3])))
    return found


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def own_v2_path(pid: int | str = "self") -> str | None:
    """The process's cgroup v2 path ("0::/path" in /proc/PID/cgroup), or None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def v2_directory(cgroup_path: str, mounts: list[tuple[Path, str]] | None = None) -> Path | None:
    """The directory of a cgroup v2 path under a mount that shows it (the mount's root is a prefix of it)."""
    for mount, root in mounts if mounts is not None else v2_mounts():
        root = root.rstrip("/")
        if cgroup_path == root or cgroup_path.startswith(root + "/") or root == "":
            relative = cgroup_path[len(root):].strip("/")
            if ".." in relative.split("/"):
                continue
            return mount / relative if relative else mount
    return None


# ---- one run's cgroup --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunCgroup:
    """A run's cgroup directory: its members (recursive), kill, emptiness, removal. No call raises."""

    path: Path

    def exists(self) -> bool:
        try:
            return stat.S_ISDIR(os.lstat(self.path).st_mode)
        except OSError:
            return False

    def members(self) -> list[int]:
        """Pids of every process in the cgroup and the cgroups below it (ended ones are not listed)."""
        pids: list[int] = []
        for folder in self._folders():
            try:
                with open(folder / "cgroup.procs", "rb") as handle:
                    pids += [int(word) for word in handle.read().split()]
            except (OSError, ValueError):
                continue
        return sorted(set(pids))

    def populated(self) -> bool | None:
        """Whether any process is in it or below it (cgroup.events); None when that cannot be read."""
        try:
            text = (self.path / "cgroup.events").read_text()
        except OSError:
            return None if self.exists() else False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() != "0"
        return None

    def kill(self) -> None:
        """SIGKILL to every member: cgroup.kill where the kernel has it (5.14+), else to each pid."""
        if _write(self.path / "cgroup.kill", b"1"):
            return
        for pid in self.members():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue

    def empty_out(self, timeout_s: float = 10.0, reap: Callable[[], None] | None = None) -> bool:
        """Kill until nothing is left (a member may fork while the pids are killed one by one); True when empty."""
        deadline = time.monotonic() + timeout_s
        while True:
            if reap is not None:
                reap()
            if not self.members() and self.populated() is not True:
                return True
            if time.monotonic() > deadline:
                return False
            self.kill()
            time.sleep(0.05)

    def remove(self) -> bool:
        """Removes the (empty) cgroup and the cgroups below it, deepest first; True when it is gone."""
        for folder in reversed(self._folders()):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        return not self.exists()

    def _folders(self) -> list[Path]:
        """The cgroup and every cgroup below it, parents before children; symbolic links are never followed."""
        if not self.exists():
            return []
        folders = [self.path]
        for top, dirs, _files in os.walk(self.path, followlinks=False):
            folders += [Path(top) / name for name in sorted(dirs)]
        return folders


# ---- placing a run -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placement:
    """Where a run's launcher goes: a cgroup it joins before it execs (`cgroup`, `join`), a systemd user scope its
    argv is wrapped in (`prefix`, `scope`), or neither (`reason` says why)."""

    cgroup: RunCgroup | None = None
    prefix: tuple[str, ...] = ()
    scope: str = ""
    reason: str = ""
    join: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def any(self) -> bool:
        return self.cgroup is not None or bool(self.prefix)


def place(run_id: str, environ: dict[str, str] | None = None) -> Placement:
    """A cgroup for the run (created here when it is a subtree of ours), a systemd scope to start it in, or why
    neither can be had."""
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT, "").strip().lower() in ("off", "0", "no", "false"):
        return Placement(reason=f"{OPT_OUT}={env[OPT_OUT]} asks for none")
    if not _safe_name(run_id):
        return Placement(reason=f"the run id {run_id!r} cannot name a cgroup")
    mounts = v2_mounts()
    if not mounts:
        return Placement(reason="no cgroup v2 filesystem is mounted")
    own = own_v2_path()
    own_dir = v2_directory(own, mounts) if own is not None else None
    why = "this process's cgroup v2 is unknown" if own_dir is None else ""
    if own_dir is not None:
        created = _create_under(own_dir, run_id)
        if isinstance(created, RunCgroup):
            procs_file = os.fsencode(created.path / "cgroup.procs")
            return Placement(cgroup=created, join=lambda: _join(procs_file))
        why = created
    if os.geteuid() != 0:
        scope = _systemd_scope(run_id)
        if isinstance(scope, Placement):
            return scope
        why = f"{why}; {scope}"
    return Placement(reason=why)


def _create_under(own_dir: Path, run_id: str) -> RunCgroup | str:
    """Creates `<own_dir>/traindeck/run-<id>` (no symbolic link followed); the cgroup or why not."""
    if not os.access(own_dir / "cgroup.procs", os.W_OK) or not os.access(own_dir, os.W_OK):
        return f"this process may not create cgroups under {own_dir}"
    base, run = own_dir / BASE, own_dir / BASE / f"run-{run_id}"
    for folder in (base, run):
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            if folder == run:
                return f"{run} exists already"
        except OSError as exc:
            return f"cannot create {folder}: {exc.strerror or exc}"
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return f"{folder} is not a directory"
        except OSError as exc:
            return f"cannot read {folder}: {exc.strerror or exc}"
    if not (run / "cgroup.procs").exists():
        return f"{run} is not a cgroup"
    return RunCgroup(run)


def _join(procs_file: bytes) -> None:
    """For preexec_fn (between fork and exec: only os calls): moves the calling process into the cgroup."""
    try:
        fd = os.open(procs_file, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.write(fd, b"0")
    except OSError:
        pass
    finally:
        os.close(fd)


def scope_unit(run_id: str) -> str:
    return f"traindeck-run-{run_id}.scope"


def _systemd_scope(run_id: str) -> Placement | str:
    """A systemd user scope for the launcher, if `systemd-run --user --scope` works here; else why not."""
    tool = shutil.which("systemd-run")
    if tool is None:
        return "systemd-run is not installed"
    try:
        probe = subprocess.run([tool, "--user", "--scope", "--quiet", "--collect", "--", "true"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=SCOPE_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"systemd-run --user --scope failed: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"systemd-run --user --scope failed: {said[-1] if said else f'exit code {probe.returncode}'}"
    unit = scope_unit(run_id)
    return Placement(prefix=(tool, "--user", "--scope", "--quiet", "--collect", "--property=Delegate=yes",
                             f"--unit={unit}", "--"), scope=unit)


def scope_cgroup(pid: int, unit: str, timeout_s: float = 10.0) -> RunCgroup | None:
    """The cgroup of the scope `systemd-run` moved itself (now the launcher) into; None if it never got there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = own_v2_path(pid)
        if path is None:
            return None
        if path.rstrip("/").endswith("/" + unit):
            folder = v2_directory(path)
            return RunCgroup(folder) if folder is not None else None
        time.sleep(0.02)
    return None


def is_member(pid: int, cgroup: RunCgroup) -> bool:
    """Whether the process is in the cgroup (or below it)."""
    path = own_v2_path(pid)
    folder = v2_directory(path) if path is not None else None
    return folder is not None and (folder == cgroup.path or cgroup.path in folder.parents)


# ---- finding a run's cgroup later --------------------------------------------------------------------------------
def for_run(run_dir: str | Path | None, run_id: str) -> RunCgroup | None:
    """The run's cgroup as its folder records it, if it is still there and is that run's: a `run-<id>` or
    `traindeck-run-<id>.scope` directory of this run under a cgroup v2 mount, reached without a symbolic link."""
    if not run_dir:
        return None
    recorded = read_cgroup(run_dir, run_id)
    if recorded is None:
        return None
    path = Path(recorded)
    if not path.is_absolute() or path.name not in (f"run-{run_id}", scope_unit(run_id)):
        return None
    if os.path.realpath(path) != str(path):
        return None
    if not any(mount in path.parents for mount, _root in v2_mounts()):
        return None
    cgroup = RunCgroup(path)
    return cgroup if cgroup.exists() else None


def _write(path: Path, data: bytes) -> bool:
    """Writes a cgroup file (no symbolic link followed); False when it is absent or refuses."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _safe_name(run_id: str) -> bool:
    return bool(run_id) and all(c.isalnum() or c in "-_." for c in run_id) and run_id not in (".", "..")

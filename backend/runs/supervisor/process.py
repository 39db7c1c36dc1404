"""The supervisor: one small detached process per run, `python -m traindeck.backend.runs.supervisor.process RUN_DIR`.

It is started by `start_run` in a session of its own and reads its instructions (argv, cwd, the environment
with secrets) from stdin, so secrets never touch the disk and its own environment stays traindeck's. Then it:

- makes itself a child subreaper, so ranks orphaned by a dying launcher are re-parented to it, not to init;
- starts the sentinel (see sentinel.py), which ends the run's processes if this supervisor is ever killed;
- starts the launcher in a new session with stdout+stderr on one pipe and PR_SET_PDEATHSIG=SIGKILL;
- drains the pipe in large reads on a thread of its own, writing the raw bytes to output.log at once: the job
  never waits on us beyond the pipe buffer (raised to 1 MiB), and the log is whole;
- on a second thread follows output.log to parse progress and metrics into the run store (this may lag or skip
  ahead under a flood; the log itself never does);
- every 0.25 s: reaps children, tracks the run's processes and ranks (exit statuses included), polls for a stop
  request (the `stop` file, or SIGTERM/SIGINT/SIGHUP sent to the supervisor), asks stall_watch.py whether the
  run is stalled (then every rank's stack is taken once) or building DeepSpeed/torch ops;
- at the end makes sure nothing of the run remains and writes the final state with a diagnosis.

Size (~530 lines): one process's whole life (sentinel, process tracking, wind-down) around one shared state; the
output pump and follower are in output_drain.py, the stop (signals, their escalation, a hurried stop, leftovers) in
stop_sequence.py, the end of the run (nothing left, evidence, final state) in run_end.py.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from traindeck.backend.launch.extension_locks import clear_stale_locks
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.cgroups import memory_limit, process_cgroup
from traindeck.backend.runs.diagnosis.diagnose import (
    Diagnosis,
    Evidence,
    is_success,
)
from traindeck.backend.runs.diagnosis.evidence import (
    boot_time_offset,
    oom_kill_counters,
)
from traindeck.backend.runs.diagnosis.stall import Quiet, StallWatch
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.diary import log_to_stderr
from traindeck.backend.runs.supervisor.exits import ExitWatcher
from traindeck.backend.runs.supervisor.loss_guard import Watchdog
from traindeck.backend.runs.supervisor.output_drain import OutputFollower, OutputPump, open_output_pipe
from traindeck.backend.runs.supervisor.run_end import TrackedProcess
from traindeck.backend.runs.supervisor.shm_leftovers import free_abandoned_buffers
from traindeck.backend.runs.supervisor.stop_sequence import RunStop, StopSequence

TICK_S = 0.25
CLASSIFY_FOR_S = 10.0
THOROUGH_SCAN_S = 2.0


@dataclass
class Instructions:
    run_id: str
    store: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stall_min_s: float = 120.0

    @classmethod
    def read(cls, stream: Any) -> Instructions:
        data = json.loads(stream.read())
        return cls(run_id=data["run_id"], store=data["store"], argv=list(data["argv"]), cwd=data["cwd"],
                   env=dict(data["env"]), stall_min_s=float(data.get("stall_min_s", 120.0)))


# The supervisor's own diary: stderr is supervisor.log in the run directory (control.start_run opens it), set up in
# main() as "HH:MM:SS message" lines. Library code logs through `logger`; nothing here prints.
logger = logging.getLogger("traindeck.supervisor")


def _log(message: str, level: int = logging.INFO) -> None:
    """Kept for callers on other branches; new code calls `logger` directly."""
    logger.log(level, message)


class SafeStore:
    """The run store as the supervisor uses it: a failed write is logged, never fatal to the run."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except sqlite3.Error as exc:
                logger.warning("run store %s failed: %s", name, exc)
                return None

        return call


# ---- the supervisor ------------------------------------------------------------------------------------------
class Supervisor(RunStop):
    def __init__(self, run_dir: RunDir, spec: Instructions) -> None:
        self.run_dir, self.spec = run_dir, spec
        self.store = SafeStore(RunStore(spec.store))
        self.run_id = spec.run_id
        self.tracked: dict[int, TrackedProcess] = {}
        self.exits = ExitWatcher()
        self._zombies_unseen: dict[int, tuple[float, int | None]] = {}  # first seen dead: (when, wait status)
        self._procs: dict[int, tuple[psutil.Process, int]] = {}  # pid -> (process, start ticks) seen last scan
        self._last_thorough = 0.0
        self._stop_request: dict[str, Any] | None = None  # the stop request in effect (a newer one may hurry it)
        self.launcher: subprocess.Popen[bytes] | None = None
        self.launcher_returncode: int | None = None
        self.launcher_ended_wall: float | None = None  # wall time the launcher ended (a late stop request is compared)
        self.sentinel: subprocess.Popen[bytes] | None = None
        self.sentinel_fd: int | None = None
        self.stop: StopSequence | None = None
        self.stop_signal_received = False
        self.leftover_since: float | None = None
        self.oom_before = oom_kill_counters()
        self.cgroups: dict[tuple[int, str], int | None] = {}  # the ranks' memory cgroups -> OOM kills at first sight
        self.rendezvous: set[tuple[str, str]] = set()  # the ranks' (MASTER_ADDR, MASTER_PORT): their /dev/shm buffers
        self.boot_s_at_start = boot_time_offset()
        self.recorder: Any = None
        self.watchdog = Watchdog(self.store, self.run_id, run_dir, spec.env)
        self.stall = StallWatch(self.store, spec.run_id, run_dir.path, spec.stall_min_s, _log,
                                on_stall=self.watchdog.stalled)

    # -- start ------------------------------------------------------------------------------------------------
    def start(self) -> bool:
        me = psutil.Process()
        self.store.update_run(self.run_id, supervisor_pid=me.pid, supervisor_started=me.create_time())
        if not procs.become_child_subreaper():
            logger.warning("could not become a child subreaper; orphaned ranks are found by their environment marker")
        self._start_sentinel()
        read_fd, write_fd = open_output_pipe()
        # Not O_APPEND (splice refuses it); only the pump writes from here on, at the end of the file.
        self.log_fd = os.open(self.run_dir.output, os.O_WRONLY | os.O_CREAT, 0o600)
        os.lseek(self.log_fd, 0, os.SEEK_END)
        env = dict(self.spec.env)
        env[procs.MARKER] = self.run_id
        env["TRAINDECK_RUN_DIR"] = str(self.run_dir.path)
        self._clear_stale_build_locks(env)
        self._free_abandoned_shared_memory()
        try:
            self.launcher = subprocess.Popen(
                self.spec.argv, cwd=self.spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=write_fd,
                stderr=write_fd, start_new_session=True, preexec_fn=procs.die_with_parent)
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(write_fd)
            os.close(read_fd)
            message = f"{exc.strerror or exc}: {self.spec.argv[0]}" if isinstance(exc, OSError) else str(exc)
            os.write(self.log_fd, f"traindeck: could not start the launcher: {message}\n".encode())
            self._finish(Evidence(launcher_returncode=None, start_error=message), "failed")
            return False
        os.close(write_fd)
        launcher = psutil.Process(self.launcher.pid)
        self._track(launcher, role="launcher")
        self._note_cgroup(launcher.pid)
        stat = procs.read_stat(launcher.pid)
        if stat is not None:
            self._procs[launcher.pid] = (launcher, stat[2])
        self.store.update_run(self.run_id, started_at=time.time(), launcher_pid=self.launcher.pid)
        self.store.add_event(self.run_id, "started", f"launcher started (pid {self.launcher.pid})")
        self.pump = OutputPump(read_fd, self.log_fd)
        self.follower = OutputFollower(self.run_dir.output, self.pump, self.store, self.run_id, self.watchdog)
        self.pump.start()
        self.follower.start()
        self._start_recorder()
        return True

    def _clear_stale_build_locks(self, env: dict[str, str]) -> None:
        """A killed op build's lock makes every later load of that op wait forever, silently (extension_locks.py)."""
        folder = env.get("TORCH_EXTENSIONS_DIR")
        if not folder:
            return
        try:
            said = clear_stale_locks(Path(folder))
        except Exception:  # noqa: BLE001 - a check that fails must not stop the run it guards
            logger.exception("could not look for stale build locks in %s", folder)
            return
        for line in said:
            logger.info("%s", line)
            os.write(self.log_fd, f"traindeck: {line}\n".encode())

    def _free_abandoned_shared_memory(self) -> None:
        """Buffers earlier runs left in /dev/shm when their supervisor could not free them (it was killed)."""
        try:
            removed, freed = free_abandoned_buffers()
        except Exception:  # noqa: BLE001 - housekeeping must not stop the run
            logger.exception("could not look for abandoned shared-memory buffers")
            return
        if removed:
            line = (f"traindeck: freed {freed / 2**20:.0f} MiB of RAM: {removed} shared-memory buffer(s) that earlier "
                    f"DeepSpeed CPU runs left in /dev/shm (no process uses them)")
            logger.info("%s", line)
            os.write(self.log_fd, (line + "\n").encode())

    def _start_sentinel(self) -> None:
        from traindeck.backend.runs.supervisor.liveness import internal_command

        read_fd, write_fd = os.pipe()
        try:
            self.sentinel = subprocess.Popen(
                internal_command("sentinel", self.run_id, self.spec.store),
                stdin=read_fd, stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno(), start_new_session=True)
            self.sentinel_fd = write_fd
        except OSError as exc:
            logger.warning("could not start the sentinel: %s", exc)
            os.close(write_fd)
        finally:
            os.close(read_fd)

    def _start_recorder(self) -> None:
        try:
            from traindeck.backend.monitor.recorder import (
                RunResourceRecorder,  # written in parallel; optional
            )
        except ImportError:
            return
        try:
            self.recorder = RunResourceRecorder(Path(self.spec.store), self.run_id, self._root_pid, interval_s=1.0)
            self.recorder.start()
        except Exception as exc:  # resource sampling is a nice-to-have; never let it end the run
            logger.warning("resource recorder did not start: %r", exc)
            self.recorder = None

    def _root_pid(self) -> int | None:
        return self.launcher.pid if self.launcher is not None and self.launcher_returncode is None else None

    # -- the loop ---------------------------------------------------------------------------------------------
    def loop(self) -> None:
        last_stall_check = 0.0
        while True:
            now = time.monotonic()
            self._reap()
            alive = self._scan()
            self._check_stop_request()
            if self.stop is not None:
                self._advance_stop(alive, now)
            elif self.launcher_returncode is not None and alive:
                self._end_leftovers(alive, now)
            if now - last_stall_check >= 5.0 and self.launcher_returncode is None:
                self._check_stall(now, alive)
                last_stall_check = now
            if self.launcher_returncode is not None and not alive:
                break
            time.sleep(TICK_S)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code, _text = procs.describe_wait_status(status)
            if self.launcher is not None and pid == self.launcher.pid:
                self.launcher.returncode = code  # we reaped it; keep Popen from trying again
                self.launcher_returncode = code
                self.launcher_ended_wall = time.time()
                self.store.add_event(self.run_id, "launcher_exit", f"launcher {procs.describe_returncode(code)}")
            elif self.sentinel is not None and pid == self.sentinel.pid:
                self.sentinel.returncode = code
                logger.info("sentinel ended (%s)", procs.describe_returncode(code))
            self._ended(pid, code)

    def _ended(self, pid: int, code: int | None) -> None:
        tracked = self.tracked.get(pid)
        if tracked is None or tracked.ended_at is not None:
            return
        tracked.ended_at = time.time()
        seen = self.exits.ended(pid)
        if seen is not None:  # the exit watcher saw the moment itself, and the status if the loop came too late
            tracked.ended_at = min(tracked.ended_at, seen[0])
            if code is None and seen[1] is not None:
                code = procs.describe_wait_status(seen[1])[0]
        tracked.returncode = code
        if tracked.role == "rank":
            how = procs.describe_returncode(code) if code is not None else "ended"
            self.store.add_event(self.run_id, "rank_exit", f"rank {tracked.rank} (pid {pid}) {how}"
                                 + self._not_our_signal(code))
        if tracked.role != "helper":
            self._save_processes()

    def _not_our_signal(self, code: int | None) -> str:
        """During a stop, a rank killed by a signal traindeck has not sent (yet) got it from its launcher: the
        DeepSpeed launcher and torchrun pass a SIGINT on to their ranks as SIGTERM. Said, so that "killed by
        SIGTERM" and the run's "stopped gracefully (SIGINT)" do not read as a contradiction."""
        if self.stop is None or code is None or code >= 0:
            return ""
        sent = [int(s) for s in self.stop.PHASES[: max(self.stop.phase, 0) + 1]]
        if -code in sent:
            return ""
        names = "/".join(procs.signal_name(s) for s in sent)
        return f" (not sent by traindeck, which had sent {names}: its launcher passed the stop on)"

    def _track(self, proc: psutil.Process, role: str | None = None) -> None:
        try:
            started = proc.create_time()
            name = proc.name()
        except psutil.Error:
            return
        tracked = TrackedProcess(proc.pid, started, name, role or "helper", None)
        self.tracked[proc.pid] = tracked
        self.exits.watch(proc.pid)
        if role is None:
            self._classify(tracked, proc)
        elif role != "helper":
            self._save_processes()

    def _classify(self, tracked: TrackedProcess, proc: psutil.Process) -> None:
        """Find out whether a process is a rank (see procs.rank_number: the topmost process with its RANK).
        Asked again during a process's first seconds: between fork and exec /proc/PID/environ still shows the
        parent's environment."""
        try:
            parent = proc.ppid()
        except psutil.Error:
            parent = None
        rank = procs.rank_number(proc.pid, parent)
        if rank is None:
            return
        # One live process per rank: a newcomer with the RANK of a live rank is that rank's child whose parent
        # left (a compiler of an op build orphaned to us), not a second rank.
        if any(t.role == "rank" and t.rank == rank and t.ended_at is None and t.pid != proc.pid
               for t in self.tracked.values()):
            return
        tracked.role, tracked.rank = "rank", rank
        try:
            tracked.name = proc.name()
        except psutil.Error:
            pass
        self._note_cgroup(proc.pid)
        addr, port = procs.environ_value(proc.pid, "MASTER_ADDR"), procs.environ_value(proc.pid, "MASTER_PORT")
        if addr and port:
            self.rendezvous.add((addr, port))
        self._save_processes()

    def _note_cgroup(self, pid: int) -> None:
        """The memory cgroup a rank lives in and its OOM-kill counter now (to count the kills during the run)."""
        found = process_cgroup(pid)
        if found is None or found in self.cgroups:
            return
        limit = memory_limit(*found)
        self.cgroups[found] = limit.oom_kills if limit is not None else None

    def _save_processes(self) -> None:
        records = [t.to_json() for t in self.tracked.values() if t.role in ("launcher", "rank")]
        self.store.update_run(self.run_id, processes=records)

    def _scan(self) -> list[psutil.Process]:
        """The run's living processes (the sentinel excluded); notes new ones and ends of tracked ones.

        Runs 4x a second, so it reads /proc directly: a quick walk every tick, a thorough one every 2 s."""
        sentinel = self.sentinel.pid if self.sentinel is not None else None
        now = time.monotonic()
        thorough = now - self._last_thorough >= THOROUGH_SCAN_S
        if thorough:
            self._last_thorough = now
        pids = procs.descendant_pids(os.getpid(), thorough=thorough)
        if not thorough:  # keep what the thorough walk found below other threads until it is gone
            pids += [pid for pid in self._procs if pid not in pids]
        alive: list[psutil.Process] = []
        seen: set[int] = set()
        for pid in pids:
            if pid == sentinel or pid in seen:
                continue
            stat = procs.read_stat(pid)
            if stat is None:
                continue
            state, _ppid, start_ticks = stat
            seen.add(pid)
            known = self._procs.get(pid)
            if known is None or known[1] != start_ticks:
                if state == "Z":  # lived less than a scan; if the launcher's log names it a rank, this is its end
                    if pid not in self.tracked:
                        self._zombies_unseen.setdefault(pid, (time.time(), procs.zombie_exit_status(pid)))
                    continue
                try:
                    proc = psutil.Process(pid)
                except psutil.Error:
                    continue
                self._procs[pid] = (proc, start_ticks)
                previous = self.tracked.get(pid)
                if previous is None or previous.ended_at is not None or abs(previous.started - proc.create_time()) > 0.5:
                    self._track(proc)
            else:
                proc = known[0]
            tracked = self.tracked.get(pid)
            if tracked is not None and tracked.role == "helper" and time.time() - tracked.started < CLASSIFY_FOR_S:
                self._classify(tracked, proc)
            if state == "Z":
                if tracked is not None and tracked.ended_at is None and tracked.role == "rank":
                    raw = procs.zombie_exit_status(pid)
                    self._ended(pid, procs.describe_wait_status(raw)[0] if raw is not None else None)
                continue
            alive.append(proc)
        for pid in [pid for pid in self._procs if pid not in seen]:
            del self._procs[pid]
        for pid, tracked in list(self.tracked.items()):
            if pid not in seen and tracked.ended_at is None and tracked.role != "launcher":
                self._ended(pid, None)  # reaped by its own parent before we saw how it ended
        return alive

    def _check_stall(self, now: float, alive: list[psutil.Process]) -> None:
        quiet = Quiet(self.pump.last_output, self.follower.last_progress_change, self.follower.step_times,
                      self.follower.op_builds.building_now)
        self.stall.check(now, quiet, alive, lambda: [t.to_json() for t in self.tracked.values()
                                                     if t.role in ("launcher", "rank")])

    # -- the end ----------------------------------------------------------------------------------------------
    def wind_down(self) -> None:
        self.stall.run_ended(time.monotonic())
        self.pump.join(timeout=10.0)
        if self.pump.is_alive():  # something outside our tree still holds the pipe: stop reading it
            logger.warning("output pipe still open after every process ended; closing it")
            os.close(self.pump.read_fd)
            self.pump.join(timeout=2.0)
        self.follower.pump_done.set()
        self.pump.wake.set()
        self.follower.join(timeout=30.0)
        if self.follower.skipped_bytes:
            self.store.add_event(self.run_id, "parse_skipped",
                                 f"parsing skipped {self.follower.skipped_bytes / 2**20:.0f} MiB of a flood of output"
                                 " (all of it is in output.log)")
        if self.recorder is not None:
            try:
                self.recorder.stop()
            except Exception as exc:
                logger.warning("resource recorder did not stop cleanly: %r", exc)
        remaining = self._confirm_nothing_remains()
        evidence = self._evidence()
        self.exits.close()
        if self.stop is not None:
            state = "stopped"
        else:
            state = "succeeded" if is_success(evidence) else "failed"
        if remaining:
            self.store.add_event(self.run_id, "leftovers", f"{len(remaining)} process(es) could not be ended: "
                                 + ", ".join(str(p.pid) for p in remaining))
        else:
            self._free_shared_memory()
        self._finish(evidence, state)

    def release_sentinel(self) -> None:
        if self.sentinel_fd is not None:
            try:
                os.write(self.sentinel_fd, b"done\n")
            except OSError:
                pass
            os.close(self.sentinel_fd)
            self.sentinel_fd = None
        if self.sentinel is not None and self.sentinel.returncode is None:
            try:
                self.sentinel.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.sentinel.kill()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m traindeck.backend.runs.supervisor.process RUN_DIR  (instructions on stdin)", file=sys.stderr)
        return 2
    log_to_stderr(logger)
    run_dir = RunDir(Path(args[0]))
    spec = Instructions.read(sys.stdin)
    # Nothing more comes on stdin; holding the pipe open would tie us to whoever started us.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    # Detach for good: fork, report the child's pid on stdout and let the parent exit at once, so the CLI or
    # dashboard that started us can reap it and we are re-parented to init instead of lingering as its zombie.
    child = os.fork()
    if child:
        os.write(1, f"{child}\n".encode())
        os._exit(0)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.setswitchinterval(0.001)  # the pump gets the GIL back quickly even while the follower parses a flood
    supervisor = Supervisor(run_dir, spec)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, supervisor.request_stop_by_signal)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        if supervisor.start():
            supervisor.loop()
            supervisor.wind_down()
    except BaseException:
        logger.exception("supervisor failed:")
        # Do not leave the job unsupervised: end it and say why; the sentinel covers us if even this fails.
        try:
            supervisor.stop = supervisor.stop or StopSequence(0.0)
            procs.end_processes(lambda: [p for p in procs.descendants(os.getpid())
                                         if supervisor.sentinel is None or p.pid != supervisor.sentinel.pid],
                                grace_s=3.0, reap=supervisor._reap)
            supervisor.store.finish_run(spec.run_id, "failed", only_if_running=True,
                                        exit_code=supervisor.launcher_returncode,
                                        state_detail="the supervisor failed; see supervisor.log",
                                        diagnosis=Diagnosis(
                                            summary="traindeck's supervisor failed; the run was ended.", kind="lost",
                                            evidence=[traceback.format_exc().strip().splitlines()[-1]]).to_json())
        finally:
            supervisor.release_sentinel()
            supervisor.watchdog.close()
        return 1
    supervisor.release_sentinel()
    supervisor.watchdog.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The supervisor: one small detached process per run, `python -m traindeck.backend.runs.supervisor.process RUN_DIR`.

It is started by `start_run` in a session of its own and reads its instructions (argv, cwd, the environment
with secrets) from stdin, so secrets never touch the disk and its own environment stays traindeck's. Then it:

- makes itself a child subreaper, so ranks orphaned by a dying launcher are re-parented to it, not to init;
- starts the sentinel (see sentinel.py), which ends the run's processes if this supervisor is ever killed;
- starts the launcher in a new session with stdout+stderr on one pipe and PR_SET_PDEATHSIG=SIGKILL, inside the
  run's own cgroup where one can be had (run_cgroup.py): every process it starts is in it, whatever its
  environment or session, and is listed, stopped and confirmed gone through it;
- drains the pipe in large reads on a thread of its own, writing the raw bytes to output.log at once: the job
  never waits on us beyond the pipe buffer (raised to 1 MiB), and the log is whole;
- on a second thread follows output.log to parse progress and metrics into the run store (this may lag or skip
  ahead under a flood; the log itself never does);
- every 0.25 s: reaps children, tracks the run's processes and ranks (exit statuses included), polls for a stop
  request (the `stop` file, or SIGTERM/SIGINT/SIGHUP sent to the supervisor), asks the stall watch
  (diagnosis/stall.py) whether the run is stalled (then every rank's stack is taken once) or building
  DeepSpeed/torch ops;
- at the end makes sure nothing of the run remains and writes the final state with a diagnosis.

The supervisor holds its parts and hands each exactly what it needs: the process tracker (tracking.py: the
run's processes, ranks and ends), the stopper (stop_sequence.py: signals, their escalation, a hurried stop, the
companion's hold, leftovers), the output drain (output_drain.py: pipe -> output.log -> progress and metrics) and
the end of the run (run_end.py: nothing left, evidence, final state). What remains here is the process's own
life: the launcher, the sentinel, the recorder, the loop and the wind-down.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from traindeck.backend.core.fileio import SymlinkRefused, open_private
from traindeck.backend.core.masking import secret_values
from traindeck.backend.launch.extension_locks import clear_stale_locks
from traindeck.backend.runs import processes as procs
from traindeck.backend.runs.diagnosis.diagnose import Diagnosis, Evidence, is_success
from traindeck.backend.runs.diagnosis.stall import StallWatch
from traindeck.backend.runs.record.folder_record import write_cgroup
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor import run_cgroup
from traindeck.backend.runs.supervisor.diary import log_to_stderr
from traindeck.backend.runs.supervisor.disk_watch import DiskWatch, low_disk_bytes
from traindeck.backend.runs.supervisor.instructions import Instructions, SafeStore
from traindeck.backend.runs.supervisor.loss_guard import Watchdog
from traindeck.backend.runs.supervisor.node_sampler import STATE_FILE as NODES_STATE_FILE
from traindeck.backend.runs.supervisor.output_drain import OutputDrain, open_output_pipe
from traindeck.backend.runs.supervisor.run_end import RunEnd
from traindeck.backend.runs.supervisor.shm_leftovers import free_abandoned_buffers
from traindeck.backend.runs.supervisor.step_intake import StepIntake
from traindeck.backend.runs.supervisor.stop_sequence import Stopper
from traindeck.backend.runs.supervisor.tracking import LauncherEnd, ProcessTracker

TICK_S = 0.25

# The supervisor's own diary: stderr is supervisor.log in the run directory (control.start_run opens it), set up in
# main() as "HH:MM:SS message" lines. Library code logs through `logger`; nothing here prints.
logger = logging.getLogger("traindeck.supervisor")


def _log(message: str, level: int = logging.INFO) -> None:
    """Kept for callers on other branches; new code calls `logger` directly."""
    logger.log(level, message)


# ---- the supervisor ------------------------------------------------------------------------------------------
class Supervisor:
    """One run's supervisor: starts the launcher and the sentinel, runs the loop, winds the run down.

    `clock` is the monotonic clock of the loop and the stop's timing."""

    def __init__(self, run_dir: RunDir, spec: Instructions, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir, self.spec, self.clock = run_dir, spec, clock
        # The values of the run's secret variables: masked, beside credential shapes, in all it writes down.
        self.secrets = secret_values(spec.env)
        self.store = SafeStore(RunStore(spec.store, secret_values=self.secrets))
        self.run_id = spec.run_id
        self.launcher: subprocess.Popen[bytes] | None = None
        self.cgroup: run_cgroup.RunCgroup | None = None  # the run's own cgroup, once the launcher is in it
        self.launcher_end = LauncherEnd()
        self.sentinel: subprocess.Popen[bytes] | None = None
        self.sentinel_fd: int | None = None
        self.recorder: Any = None
        self.drain: OutputDrain | None = None
        self.watchdog = Watchdog(self.store, self.run_id, run_dir, spec.env)
        self.stall = StallWatch(self.store, spec.run_id, run_dir.path, spec.stall_min_s, _log,
                                on_stall=self.watchdog.stalled)
        self.stopper = Stopper(run_dir, self.store, self.run_id, self.launcher_end,
                               on_stop=self.stall.stop_requested, clock=clock, spared=self._multinode_runner,
                               cgroup=self._cgroup)
        self.tracker = ProcessTracker(self.store, self.run_id, exclude=self._sentinel_pid,
                                      explain_end=self.stopper.not_our_signal, members=self._cgroup_members)
        self.step_intake = StepIntake(run_dir, self.store, self.run_id)
        self.disk_watch = DiskWatch(run_dir.path, self.store, self.run_id, self.watchdog.run_name,
                                    low_disk_bytes(spec.env))
        self.end = RunEnd(run_dir, self.store, self.run_id, spec.store, self.tracker, self.launcher_end,
                          self.watchdog, sentinel_pid=self._sentinel_pid, reap=self.reap,
                          stop_detail=self.stopper.detail, secrets=self.secrets, cgroup=self._cgroup)

    def _sentinel_pid(self) -> int | None:
        return self.sentinel.pid if self.sentinel is not None else None

    def _cgroup(self) -> run_cgroup.RunCgroup | None:
        return self.cgroup

    def _cgroup_members(self) -> list[int]:
        return self.cgroup.members() if self.cgroup is not None else []

    def _multinode_runner(self) -> set[int]:
        """DeepSpeed's runner and what it started here (pdsh, ssh) in a multi-node run whose node agents stop the
        ranks on each node (their state file is there): a SIGINT or SIGTERM to the runner or its pdsh makes it
        `pkill -f` every DeepSpeed launcher of the same Python on those nodes (DeepSpeed #6807)."""
        if self.launcher is None or self.launcher_end.returncode is not None \
                or not (self.run_dir.path / NODES_STATE_FILE).exists():
            return set()
        try:
            runner = psutil.Process(self.launcher.pid)
            return {runner.pid} | {child.pid for child in runner.children(recursive=True)}
        except psutil.Error:
            return set()

    # -- start ------------------------------------------------------------------------------------------------
    def start(self) -> bool:
        me = psutil.Process()
        self.store.update_run(self.run_id, supervisor_pid=me.pid, supervisor_started=me.create_time())
        if not procs.become_child_subreaper():
            logger.warning("could not become a child subreaper; orphaned ranks are found by their environment marker")
        # Not O_APPEND (splice refuses it); only the pump writes from here on, at the end of the file. A symbolic
        # link at output.log is refused: the run fails to start rather than write into whatever it points at.
        try:
            self.log_fd = open_private(self.run_dir.output, append=False)
        except OSError as exc:
            message = str(exc) if isinstance(exc, SymlinkRefused) else f"cannot open {self.run_dir.output}: {exc}"
            logger.error("%s", message)
            self.end.finish(Evidence(launcher_returncode=None, start_error=message), "failed")
            return False
        os.lseek(self.log_fd, 0, os.SEEK_END)
        self._start_sentinel()
        read_fd, write_fd = open_output_pipe()
        env = dict(self.spec.env)
        env[procs.MARKER] = self.run_id
        env["TRAINDECK_RUN_DIR"] = str(self.run_dir.path)
        self._clear_stale_build_locks(env)
        self._free_abandoned_shared_memory()
        placement = run_cgroup.place(self.run_id)
        if placement.cgroup is not None:  # recorded before the launcher starts: a sentinel woken at once finds it
            self._record_cgroup(placement.cgroup)
        join = placement.join

        def before_exec() -> None:  # between fork and exec: into the run's cgroup first, so all it starts is too
            join()
            procs.die_with_parent()

        try:
            self.launcher = subprocess.Popen(
                [*placement.prefix, *self.spec.argv], cwd=self.spec.cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=write_fd, stderr=write_fd, start_new_session=True, preexec_fn=before_exec)
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(write_fd)
            os.close(read_fd)
            if placement.cgroup is not None:
                placement.cgroup.remove()
            message = f"{exc.strerror or exc}: {self.spec.argv[0]}" if isinstance(exc, OSError) else str(exc)
            os.write(self.log_fd, f"traindeck: could not start the launcher: {message}\n".encode())
            self.end.finish(Evidence(launcher_returncode=None, start_error=message), "failed")
            return False
        os.close(write_fd)
        self._settle_cgroup(placement, self.launcher.pid)
        self.tracker.add_launcher(psutil.Process(self.launcher.pid))
        self.store.update_run(self.run_id, started_at=time.time(), launcher_pid=self.launcher.pid)
        self.store.add_event(self.run_id, "started", f"launcher started (pid {self.launcher.pid})")
        self.drain = OutputDrain(read_fd, self.log_fd, self.run_dir.output, self.store, self.run_id, self.watchdog)
        self.drain.start()
        self._start_recorder()
        return True

    def _record_cgroup(self, cgroup: run_cgroup.RunCgroup) -> None:
        """In the run folder: a later traindeck finds the run's processes through it when this supervisor is gone."""
        try:
            write_cgroup(self.run_dir.path, self.run_id, cgroup.path)
        except OSError as exc:
            logger.warning("could not record the run's cgroup in its folder: %s", exc)

    def _settle_cgroup(self, placement: run_cgroup.Placement, pid: int) -> None:
        """Keeps the cgroup the launcher is in (a systemd scope's is recorded now that it is known) and says so, or
        why the run has none."""
        cgroup, why = placement.cgroup, placement.reason
        if placement.scope:
            cgroup = run_cgroup.scope_cgroup(pid, placement.scope)
            why = f"the launcher never showed up in {placement.scope}"
            if cgroup is not None:
                self._record_cgroup(cgroup)
        elif cgroup is not None and not run_cgroup.is_member(pid, cgroup) and run_cgroup.own_v2_path(pid) is not None:
            why = f"the launcher could not join {cgroup.path}"
            cgroup.remove()
            cgroup = None
        if cgroup is not None:
            self.cgroup = cgroup
            self.store.add_event(self.run_id, "cgroup", f"the run's processes are kept in cgroup {cgroup.path}")
            return
        logger.info("no cgroup for the run: %s", why)
        self.store.add_event(self.run_id, "cgroup", f"no cgroup for the run's processes ({why}): once the "
                             "supervisor is gone, a process that dropped the run's marker cannot be found")

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
            from traindeck.backend.launch.builders import run_nvme_paths

            # ZeRO-Infinity's nvme_path folders: their disks' reads and writes are the run's NVMe traffic.
            self.recorder = RunResourceRecorder(Path(self.spec.store), self.run_id, self._root_pid, interval_s=1.0,
                                                nvme_paths=run_nvme_paths(self.run_dir.path))
            self.recorder.start()
        except Exception as exc:  # resource sampling is a nice-to-have; never let it end the run
            logger.warning("resource recorder did not start: %r", exc)
            self.recorder = None

    def _root_pid(self) -> int | None:
        return self.launcher.pid if self.launcher is not None and self.launcher_end.returncode is None else None

    # -- the loop ---------------------------------------------------------------------------------------------
    def loop(self) -> None:
        last_stall_check = 0.0
        while True:
            now = self.clock()
            self.reap()
            alive = self.tracker.scan()
            self.stopper.check_request()
            if self.stopper.stopping:
                self.stopper.advance(alive, now)
            elif self.launcher_end.returncode is not None and alive:
                self.stopper.end_leftovers(alive, now)
            self.step_intake.poll(now)
            if self.step_intake.latest_step is not None and self.drain is not None:
                self.drain.follower.steps_timed(self.step_intake.latest_step)
            self.disk_watch.check(now)
            if now - last_stall_check >= 5.0 and self.launcher_end.returncode is None:
                self._check_stall(now, alive)
                last_stall_check = now
            if self.launcher_end.returncode is not None and not alive:
                break
            time.sleep(TICK_S)

    def reap(self) -> None:
        """Collects every child of the supervisor that has ended: the launcher's end is noted, every end tracked."""
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
                self.launcher_end.returncode = code
                self.launcher_end.ended_wall = time.time()
                self.store.add_event(self.run_id, "launcher_exit", f"launcher {procs.describe_returncode(code)}")
            elif self.sentinel is not None and pid == self.sentinel.pid:
                self.sentinel.returncode = code
                logger.info("sentinel ended (%s)", procs.describe_returncode(code))
            self.tracker.ended(pid, code)

    def _check_stall(self, now: float, alive: list[psutil.Process]) -> None:
        assert self.drain is not None
        self.stall.check(now, self.drain.quiet(), alive, self.tracker.records)

    # -- the end ----------------------------------------------------------------------------------------------
    def wind_down(self) -> None:
        assert self.drain is not None
        self.stall.run_ended(self.clock())
        self.drain.finish()
        self.step_intake.finish()
        if self.recorder is not None:
            try:
                self.recorder.stop()
            except Exception as exc:
                logger.warning("resource recorder did not stop cleanly: %r", exc)
        remaining = self.end.confirm_nothing_remains()
        evidence = self.end.evidence(stall_stacks=self.stall.hang_stacks(self.drain.last_progress_change),
                                     recorder_ran=self.recorder is not None)
        self.tracker.close()
        if self.stopper.stopping:
            state = "stopped"
        else:
            state = "succeeded" if is_success(evidence) else "failed"
        if remaining:
            self.store.add_event(self.run_id, "leftovers", f"{len(remaining)} process(es) could not be ended: "
                                 + ", ".join(str(p.pid) for p in remaining))
        else:
            self.end.free_shared_memory()
        self.end.note_nvme_leftovers()
        self.end.finish(evidence, state, note=self.drain.pump.cut_note())

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
    run_dir = RunDir(Path(args[0]))
    spec = Instructions.read(sys.stdin)
    log_to_stderr(logger, secret_values(spec.env))
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
        signal.signal(signum, supervisor.stopper.request_by_signal)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        if supervisor.start():
            supervisor.loop()
            supervisor.wind_down()
    except BaseException:
        logger.exception("supervisor failed:")
        # Do not leave the job unsupervised: end it and say why; the sentinel covers us if even this fails.
        try:
            supervisor.stopper.stop_now()
            procs.end_processes(lambda: [p for p in procs.descendants(os.getpid())
                                         if supervisor.sentinel is None or p.pid != supervisor.sentinel.pid],
                                grace_s=3.0, reap=supervisor.reap)
            if supervisor.cgroup is not None and supervisor.cgroup.empty_out(timeout_s=5.0, reap=supervisor.reap):
                supervisor.cgroup.remove()
            supervisor.store.finish_run(spec.run_id, "failed", only_if_running=True,
                                        exit_code=supervisor.launcher_end.returncode,
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

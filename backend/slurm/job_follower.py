"""The job follower: the process a Slurm run's supervisor starts in place of a launcher.

    python -m traindeck.backend.slurm.job_follower RUN_DIR STORE

It submits the run's batch script (sbatch --export=ALL, with the environment the supervisor gave it, secrets
included, so nothing is written), then until the job ends: copies the job's output file to stdout (the supervisor's
output pump and parser take it from there into output.log, progress and metrics, as for a local launcher), shows
squeue's state and reason as the run's status, records the nodes and sstat's per-step peaks in slurm.json, and turns
SIGINT/SIGTERM (the supervisor's stop, or its sentinel) into scancel. At the end it reads how the job ended
(ended.py) into scheduler_end.json for the diagnosis and exits 0 only if the job COMPLETED.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.runs.diagnosis.scheduler_end import SCHEDULER_END
from traindeck.backend.runs.processes import MARKER
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.slurm import commands
from traindeck.backend.slurm.ended import diagnosis_fields, exit_status, read_end
from traindeck.backend.slurm.jobinfo import SLURM_JSON
from traindeck.backend.slurm.script import SCRIPT_NAME

POLL_S = 2.0
USAGE_EVERY_S = 10.0
WAITING_NOTE_EVERY_S = 60.0  # a line in the log while the job waits: the run is quiet, not stalled
END_DRAIN_S = 3.0  # how long the output file may still grow after the job left the queue (shared filesystems lag)


class JobFollower:
    def __init__(self, run_dir: Path, store_path: Path) -> None:
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.store = RunStore(store_path)
        self.cancel_asked = threading.Event()
        self.wake = threading.Event()
        self.cancelled = False
        self.info: dict[str, Any] = {"job_id": None, "state": "SUBMITTING", "reason": "", "nodes": []}
        self._status = ""
        self._output: Any = None
        self._tail: list[str] = []
        self._partial = b""

    # ---- the steps ------------------------------------------------------------------------------------------------
    def run(self) -> int:
        env = {k: v for k, v in os.environ.items() if k != MARKER}  # the job's processes are Slurm's, not ours
        job, message = commands.submit(str(self.run_dir / SCRIPT_NAME), env)
        if job is None:
            self._say(f"sbatch refused the job: {message}")
            self.info["state"] = "NOT_SUBMITTED"
            self._save()
            self._write_end({"scheduler": "slurm", "job_id": None, "state": "NOT_SUBMITTED",
                             "summary": f"Slurm refused the job: {message}", "kind": "start_failed",
                             "evidence": [f"sbatch: {message}"],
                             "advice": "Check --partition, --account, --time and --gpus-per-node against `sinfo`."})
            return 2
        self.info.update(job_id=job, state="PENDING", submitted_at=time.time())
        self._save()
        self.store.add_event(self.run_id, "slurm", f"submitted as Slurm job {job}")
        self._say(f"submitted batch job {job}" + (f" ({message})" if message else ""))
        self._follow(job)
        return self._end(job)

    def _follow(self, job: str) -> None:
        last_usage = last_note = 0.0
        waiting_since = time.monotonic()
        while True:
            if self.cancel_asked.is_set() and not self.cancelled:
                self.cancelled = True
                answer = commands.cancel(job)
                text = f"scancel {job}" + ("" if answer.ok else f" failed: {answer.err}")
                self.store.add_event(self.run_id, "stop_signal", text)
                self._say(text)
            state = commands.queue_state(job)
            self._copy_output(job)
            now = time.monotonic()
            if state.problem:
                self._status_is(f"Slurm job {job}: squeue could not be asked ({state.problem})")
            elif not state.listed or state.state in commands.FINAL_STATES:
                return
            else:
                self.info.update(state=state.state, reason=state.reason)
                if state.nodes and [n["host"] for n in self.info["nodes"]] != state.nodes:
                    self.info["nodes"] = [{"host": host} for host in state.nodes]
                if state.state == "PENDING":
                    why = f": {state.reason}" if state.reason not in ("", "None") else ""
                    self._status_is(f"waiting in Slurm queue{why} (job {job})")
                    if why and now - last_note >= WAITING_NOTE_EVERY_S:
                        minutes = (now - waiting_since) / 60
                        self._say(f"job {job} waits in the queue{why}"
                                  + (f" ({minutes:.0f} min so far)" if minutes >= 1 else ""))
                        last_note = now
                else:
                    hosts = ", ".join(n["host"] for n in self.info["nodes"]) or "?"
                    self._status_is(f"{state.state.lower()} as Slurm job {job} on {hosts}")
                    if state.state == "RUNNING" and now - last_usage >= USAGE_EVERY_S:
                        self._note_usage(job)
                        last_usage = now
                self._save()
            self.wake.wait(POLL_S)
            self.wake.clear()

    def _end(self, job: str) -> int:
        deadline = time.monotonic() + END_DRAIN_S
        while time.monotonic() < deadline:  # the last lines may land after squeue stopped listing the job
            if not self._copy_output(job):
                time.sleep(0.3)
        self._copy_output(job, flush_partial=True)
        end = read_end(job, self._tail)
        for _ in range(3):  # a busy controller may not answer at once; an unread end would hide the job's state
            if end.source:
                break
            time.sleep(2.0)
            end = read_end(job, self._tail)
        self.info.update(state=end.effective_state, reason=end.reason, end=end.to_json(), ended_at=time.time())
        if end.nodes and not self.info["nodes"]:
            self.info["nodes"] = [{"host": host} for host in commands.hostnames(end.nodes)]
        self._save()
        self._write_end(diagnosis_fields(end, self.cancelled))
        how = f"read from {end.source}" if end.source else "its end could not be read"
        self._say(f"job {job} ended {end.effective_state or 'in an unknown state'} ({how})")
        if self.cancelled:
            still = commands.queue_state(job)
            listed = still.listed and still.state not in commands.FINAL_STATES
            self.store.add_event(self.run_id, "leftovers" if listed else "confirmed",
                                 f"Slurm job {job} is still {still.state} after scancel" if listed else
                                 f"Slurm job {job} ended {end.effective_state or '(state unknown)'}; nothing of it "
                                 "is left in the queue")
        return exit_status(end)

    # ---- output ---------------------------------------------------------------------------------------------------
    def _copy_output(self, job: str, flush_partial: bool = False) -> bool:
        """New bytes of the job's output file -> stdout; True if there were any. A tail of lines is kept for
        reading slurmstepd's own messages (out-of-memory kills) at the end."""
        if self._output is None:
            try:
                self._output = open(self.run_dir / f"slurm-{job}.out", "rb")  # noqa: SIM115 (held while following)
            except FileNotFoundError:
                return False
        data = self._output.read(1 << 20)
        if data:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            self._tail = (self._tail + [line.decode("utf-8", "replace") for line in lines])[-400:]
        if flush_partial and self._partial:
            self._tail.append(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        return bool(data)

    def _say(self, text: str) -> None:
        """traindeck's own line in the run's log, between the job's lines."""
        sys.stdout.buffer.write(f"traindeck-slurm: {text}\n".encode())
        sys.stdout.buffer.flush()

    # ---- state ----------------------------------------------------------------------------------------------------
    def _status_is(self, text: str) -> None:
        if text != self._status and not self.cancel_asked.is_set():  # a stop shows the supervisor's own status
            self._status = text
            self.store.update_run(self.run_id, state_detail=text)

    def _note_usage(self, job: str) -> None:
        rows = commands.step_usage(job)
        if not rows:
            return
        for node in self.info["nodes"]:
            node["steps"] = [{k: row[k] for k in ("step", "max_rss", "ave_cpu", "tasks")}
                             for row in rows if row["max_rss_node"] in ("", node["host"])]
        self.info["usage_at"] = time.time()

    def _save(self) -> None:
        try:
            atomic_write_text(self.run_dir / SLURM_JSON, json.dumps(self.info, indent=1))
        except OSError as exc:  # the follower's bookkeeping must never end the job
            print(f"traindeck-slurm: could not write {SLURM_JSON}: {exc}", file=sys.stderr)

    def _write_end(self, data: dict[str, Any]) -> None:
        try:
            atomic_write_text(self.run_dir / SCHEDULER_END, json.dumps(data, indent=1))
        except OSError as exc:
            print(f"traindeck-slurm: could not write {SCHEDULER_END}: {exc}", file=sys.stderr)

    def ask_cancel(self, _signum: int, _frame: Any) -> None:
        self.cancel_asked.set()
        self.wake.set()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m traindeck.backend.slurm.job_follower RUN_DIR STORE", file=sys.stderr)
        return 2
    follower = JobFollower(Path(args[0]), Path(args[1]))
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, follower.ask_cancel)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return follower.run()
    finally:
        follower.store.close()


if __name__ == "__main__":
    sys.exit(main())

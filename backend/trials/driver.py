"""The trial's driver: the detached process that runs a trial's candidates one after another.

Like the queue keeper it outlives whoever started it (own session, forked away from its starter, which gets its
pid on stdout), so a trial goes on with no window or command open. Each candidate is a normal supervised run
(launch_run) marked with `trial.json`; the driver counts its steps in the ranks' step records and stops it
(stop_run) once every rank has done the warm-up and the measured steps. A candidate that dies, stalls or goes
over the trial's memory limit is classified (its diagnosis kind) and the trial goes on with the next.
`trial stop` leaves a stop file: the driver stops the candidate running then and keeps what was measured.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traindeck.backend.core.detach import fork_away
from traindeck.backend.core.fileio import open_private_append
from traindeck.backend.trials.candidates import (
    Candidate,
    candidate_preset,
    next_on_ladder,
    script_args,
    trained_batch,
)
from traindeck.backend.trials.record import TrialFolder, TrialSpec, TrialState, write_trial_mark
from traindeck.backend.trials.scoring import Result, max_of, measure, tightness

TICK_S = 0.25
STOP_GRACE_S = 5.0


def driver_argv(folder: TrialFolder) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "_trial-driver", str(folder.path)]
    return [sys.executable, "-m", "traindeck.backend.trials.driver", str(folder.path)]


def start_driver(folder: TrialFolder) -> int:
    """Start the trial's driver, detached (its output goes to the trial's driver.log); returns its pid."""
    log = open_private_append(folder.log_path)
    try:
        proc = subprocess.Popen(driver_argv(folder), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                start_new_session=True,
                                env={k: v for k, v in os.environ.items() if k != "TRAINDECK_RUN_ID"})
    finally:
        os.close(log)
    out, _ = proc.communicate(timeout=60)
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0 or not text.isdigit():
        raise OSError(f"the trial's driver did not start (see {folder.log_path})")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Fork away from the starter (who gets the driver's pid on stdout), then run the trial in `argv[0]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0])
    fork_away()
    folder = TrialFolder(path.name, path.parent)
    try:
        run_trial(folder)
    except Exception as exc:  # noqa: BLE001 - the trial ends failed with the reason; the driver never hangs on
        state = folder.state()
        state.state, state.detail, state.ended_at = "failed", f"the trial's driver failed: {exc}", time.time()
        folder.write_state(state)
        _log(f"failed: {exc!r}")
        return 1
    return 0


def _log(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", file=sys.stderr, flush=True)


class _Trial:
    """The driver's loop over one trial's candidates."""

    def __init__(self, folder: TrialFolder, launch: Callable[..., Any] | None = None) -> None:
        from traindeck.backend.presets import preset_from_mapping
        from traindeck.backend.runs import RunStore

        self.folder = folder
        self.spec: TrialSpec = folder.spec()
        self.base = preset_from_mapping(self.spec.base_preset)
        self.store = RunStore()
        self.launch = launch
        self.stopping: list[str] = []  # runs the trial stopped, whose supervisors may still be ending them
        self.state = TrialState(folder.id, state="running", driver_pid=os.getpid(), started_at=time.time())
        estimates = self.spec.estimates or [None] * len(self.spec.candidates)
        self.state.results = [Result(candidate=c, estimate=e) for c, e in zip(self.spec.candidates, estimates,
                                                                              strict=False)]
        self.state.results += [Result.from_dict(s) for s in self.spec.skipped]
        self.gpu_total, self.host_total = _machine_memory()
        self.save()

    def save(self) -> None:
        self.folder.write_state(self.state)

    def run(self) -> None:
        self.probe()
        i = 0
        while i < len(self.state.results):
            result = self.state.results[i]
            if not result.finished:
                if self.folder.stop_requested():
                    result.state, result.reason = "skipped", "the trial was stopped before it ran"
                else:
                    self.state.current = i
                    self.save()
                    self.run_candidate(i, result)
                    self.state.current = None
                    self.climb_ladder(i, result)
                self.save()
            i += 1
        self.wait_stopped()
        self.state.state = "stopped" if self.folder.stop_requested() else "finished"
        self.state.ended_at = time.time()
        self.save()
        self.store.close()

    def probe(self) -> None:
        """Ask the training interpreter what it has (torch, DeepSpeed, CUDA) once, before the first candidate: a
        probe not cached yet takes seconds, which is the trial's own start, not a candidate's."""
        from traindeck.backend.runs.control.new_run import probe_for

        try:
            probe_for(self.spec.python)
        except Exception as exc:  # noqa: BLE001 - each candidate's launch probes again and says what is wrong
            _log(f"the interpreter could not be probed before the first candidate: {exc}")

    def climb_ladder(self, i: int, result: Result) -> None:
        """On a doubling ladder, a measured set-up is tried next at twice its micro-batch."""
        if not self.spec.ladder or result.state != "measured":
            return
        doubled = next_on_ladder(Candidate.from_dict(result.candidate))
        if doubled is None:
            return
        from traindeck.backend.trials.fitting import estimate_verdict

        verdict, reason = estimate_verdict(self.base, doubled, self.spec)
        nxt = Result(candidate=doubled.to_dict(), estimate=verdict)
        if verdict == "does not fit":
            nxt.state, nxt.reason = "skipped", f"the estimate does not fit: {reason}"
        self.state.results.insert(i + 1, nxt)

    # ---- one candidate ------------------------------------------------------------------------------------------
    def run_candidate(self, index: int, result: Result) -> None:
        from traindeck.backend.launch import LaunchRequest

        spec = self.spec
        candidate = Candidate.from_dict(result.candidate)
        name = f"{spec.name}-{candidate.label}"
        preset = candidate_preset(self.base, candidate, spec.world_size, spec.keep_global_batch, name)
        micro_auto = (self.base.deepspeed or {}).get("train_micro_batch_size_per_gpu") == "auto"
        args = script_args(spec.script_args, candidate, spec.checkpointing_arg, micro_auto)
        result.global_batch = trained_batch(preset.deepspeed or {}, candidate, args, spec.world_size)
        request = LaunchRequest(script=spec.script, script_args=args,
                                preset=preset, launcher=spec.launcher,  # type: ignore[arg-type]
                                nproc=spec.nproc, python=spec.python, cwd=Path(spec.cwd) if spec.cwd else None,
                                env=dict(spec.env), gpus=tuple(spec.gpus) if spec.gpus else None)
        others = [r.id for r in self.store.list_runs(state="running") if r.id not in self.stopping]
        if others:
            result.note = (f"other runs were running when it started ({', '.join(others[:3])}"
                           + (", ..." if len(others) > 3 else "") + "): its figures may be slower")
        result.started_at = time.time()
        result.state = "running"
        self.save()
        try:
            outcome = self._launch(request, name)
        except Exception as exc:  # noqa: BLE001 - a start that failed is this candidate's end, not the trial's
            result.state, result.kind, result.reason = "failed", "start_failed", f"could not start: {exc}"
            result.ended_at = time.time()
            return
        if outcome.record is None:
            result.state, result.kind = "failed", "start_failed"
            result.reason = "could not start: " + "; ".join(outcome.plan.errors)
            result.ended_at = time.time()
            return
        record = outcome.record
        result.run_id = record.id
        try:
            write_trial_mark(record.run_dir, self.folder.id, index, candidate.to_dict())
        except OSError:
            pass  # the mark groups runs in History; the measurement does not need it
        self.save()
        _log(f"candidate {index} ({candidate.label}): run {record.id}")
        self.watch(result, record.id, record.run_dir)
        result.ended_at = time.time()

    def _launch(self, request: Any, name: str) -> Any:
        if self.launch is not None:
            return self.launch(request, name)
        from traindeck.backend.runs import launch_run

        return launch_run(request, name=name, store=self.store)

    def watch(self, result: Result, run_id: str, run_dir: str) -> None:
        """Follow the candidate's run until it is measured, ends, stalls, goes over the limit or the trial stops.

        Steps are read from the ranks' step files (the records the supervisor brings into the run store about once
        a second), so the stop follows the last measured step within a tick."""
        from traindeck.backend.steps import StepFiles

        spec = self.spec
        wanted = spec.warmup + spec.steps
        files = StepFiles(run_dir)
        records: list[Any] = []
        last_done, last_change = -1, time.monotonic()
        while True:
            record = self.store.get_run(run_id)
            records += files.read_new()[0]
            steps = measure(records, spec.warmup, spec.steps, spec.world_size)
            if steps.done_steps != last_done:
                last_done, last_change = steps.done_steps, time.monotonic()
            self._figures(result, steps)
            if steps.done_steps >= wanted:
                result.measured_at = steps.last_t
                self._stop(run_id, f"measured by trial {self.spec.id} (stopped after {steps.done_steps} steps)")
                self._judge_measured(result)
                return
            if record is None or record.finished:
                self._ended(result, record, steps.done_steps)
                return
            over = self._over_limit(record)
            if over:
                self._stop(run_id, f"stopped by trial {self.spec.id}: {over[0]}")
                result.peak_host_bytes = max_of(result.peak_host_bytes, over[1])
                result.state, result.kind, result.reason = "failed", "host_oom", over[0]
                return
            if self.folder.stop_requested():
                self._stop(run_id, f"stopped with trial {self.spec.id} ({steps.done_steps} of {wanted} steps done)")
                result.state = "skipped"
                result.reason = f"the trial was stopped while it ran ({steps.done_steps} of {wanted} steps done)"
                return
            if time.monotonic() - last_change > spec.candidate_timeout_s:
                self._stop(run_id, f"stopped by trial {self.spec.id}: no new step in {spec.candidate_timeout_s:g} s")
                result.state, result.kind = "failed", "stall"
                result.reason = (f"no new step in {spec.candidate_timeout_s:g} s ({steps.done_steps} of {wanted} "
                                 "steps done)")
                return
            time.sleep(TICK_S)

    def _figures(self, result: Result, steps: Any) -> None:
        result.steps_ms = [round(v, 3) for v in steps.steps_ms]
        result.peak_gpu_bytes = max_of(result.peak_gpu_bytes, steps.peak_gpu_bytes)
        result.peak_host_bytes = max_of(result.peak_host_bytes, steps.peak_host_bytes)

    def _stop(self, run_id: str, reason: str) -> None:
        """Ask the run to stop and wait until its ranks are gone (their memory and cores free for the next
        candidate); the supervisor's own ending (the launcher's exit, the end check) goes on beside the next start,
        and the trial waits for it at its end. `reason` is what the run's end then says instead of a stop on
        request."""
        from traindeck.backend.runs import stop_run

        self.stopping.append(run_id)
        try:
            stop_run(self.store, run_id, grace_s=STOP_GRACE_S, wait=False, reason=reason)
        except KeyError:
            return
        deadline = time.monotonic() + 2 * STOP_GRACE_S + 15.0
        while time.monotonic() < deadline:
            record = self.store.get_run(run_id)
            if record is None or record.finished or not _ranks_alive(record):
                return
            time.sleep(TICK_S / 5)
        stop_run(self.store, run_id, grace_s=STOP_GRACE_S, reason=reason)

    def wait_stopped(self, timeout_s: float = 120.0) -> None:
        """Every stopped candidate's run has ended (the supervisor's ending included)."""
        deadline = time.monotonic() + timeout_s
        for run_id in self.stopping:
            while time.monotonic() < deadline:
                record = self.store.get_run(run_id)
                if record is None or record.finished:
                    break
                time.sleep(TICK_S)

    def _resources(self, result: Result) -> None:
        """The run's sampled peaks (NVML GPU memory, the largest rank's resident set) beside the ranks' own."""
        if result.run_id is None:
            return
        from traindeck.backend.monitor import resource_summary

        try:
            summary = resource_summary(self.store.path, result.run_id)
        except Exception:  # noqa: BLE001 - the step records' figures stand on their own
            return
        gpu = summary.get("peak_gpu_mem_bytes")
        host = summary.get("peak_rank_rss_bytes")
        result.peak_gpu_bytes = max_of(result.peak_gpu_bytes, gpu if isinstance(gpu, int) else None)
        result.peak_host_bytes = max_of(result.peak_host_bytes, host if isinstance(host, int) else None)

    def _judge_measured(self, result: Result) -> None:
        import statistics

        self._resources(result)
        step_ms = statistics.median(result.steps_ms) if result.steps_ms else None
        result.step_ms = round(step_ms, 3) if step_ms is not None else None
        if step_ms and result.global_batch:
            result.samples_per_s = round(result.global_batch * 1000.0 / step_ms, 3)
        room = self.spec.memory_limit or (self.host_total // max(1, self.spec.world_size) if self.host_total
                                          else None)
        tight = tightness(result.peak_gpu_bytes, self.gpu_total, result.peak_host_bytes, room, self.spec.headroom)
        result.state, result.reason = ("too_tight", tight) if tight else ("measured", None)

    def _ended(self, result: Result, record: Any, done: int) -> None:
        """The run ended before it was measured: classified by its diagnosis."""
        self._resources(result)
        diagnosis = (record.diagnosis if record is not None else None) or {}
        kind = diagnosis.get("kind") if isinstance(diagnosis, dict) else None
        summary = diagnosis.get("summary") if isinstance(diagnosis, dict) else None
        state = record.state if record is not None else "lost"
        result.state, result.kind = "failed", str(kind or state)
        wanted = self.spec.warmup + self.spec.steps
        why = summary or (record.state_detail if record is not None else "") or state
        if state == "succeeded":
            why = f"the script ended after {done} steps, before the {wanted} a measurement needs"
        result.reason = f"{result.kind}: {why}"

    def _over_limit(self, record: Any) -> tuple[str, int] | None:
        """(why, the resident set seen) when a rank uses more host memory than the trial's limit."""
        limit = self.spec.memory_limit
        if not limit:
            return None
        import psutil

        for proc in record.processes or []:
            if not isinstance(proc, dict) or proc.get("role") != "rank" or proc.get("ended_at") is not None:
                continue
            try:
                rss = psutil.Process(int(proc["pid"])).memory_info().rss
            except (psutil.Error, KeyError, TypeError, ValueError):
                continue
            if rss > limit:
                return (f"host_oom: rank {proc.get('rank')} used {rss / 2**20:.0f} MiB of host memory, over the "
                        f"trial's limit of {limit / 2**20:.0f} MiB; stopped", rss)
        return None


def _ranks_alive(record: Any) -> bool:
    """Is any rank process the supervisor recorded for the run still running? (True while it knows of none: then
    only the run's end says they are gone.)"""
    import psutil

    ranks = [p for p in record.processes or [] if isinstance(p, dict) and p.get("role") == "rank"]
    if not ranks:
        return True
    for proc in ranks:
        if proc.get("ended_at") is not None:
            continue
        try:
            found = psutil.Process(int(proc["pid"]))
            started = proc.get("started")
            same = not isinstance(started, (int, float)) or abs(found.create_time() - started) < 1.0
            if same and found.status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
    return False


def _machine_memory() -> tuple[int | None, int | None]:
    """One GPU's memory (the smallest; None without GPUs) and the host's RAM, for the headroom check."""
    try:
        from traindeck.backend.estimate import free_memory

        free = free_memory()
    except Exception:  # noqa: BLE001 - no figure: no headroom check against it
        return None, None
    gpu = min(free.gpu_total_bytes) if free.gpu_total_bytes else None
    return gpu, free.host_total_bytes


def run_trial(folder: TrialFolder, launch: Callable[..., Any] | None = None) -> TrialState:
    """Run the trial in `folder` to its end (in this process); returns its final state. `launch(request, name)`
    replaces launch_run (tests)."""
    trial = _Trial(folder, launch)
    trial.run()
    return trial.state


if __name__ == "__main__":
    sys.exit(main())

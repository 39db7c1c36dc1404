"""Stopping a trial, for `traindeck trial stop` and the dashboard's Stop: ask its detached driver, which stops the
candidate running now and writes the trial's end; when the driver is gone (killed, its machine restarted), stop the
running candidate here and end the trial in its folder, keeping every measured result."""

from __future__ import annotations

import time
from typing import Literal

from traindeck.backend.trials.record import TrialFolder, TrialState

StopOutcome = Literal["already_ended", "stopped", "stopped_without_driver", "pending"]
POLL_S = 0.5
GONE_REASON = "the trial was stopped (its driver was gone)"


def driver_alive(state: TrialState, started_pid: int | None = None) -> bool:
    """Whether the trial's driver process is still there (True before it has written its pid, while the trial has
    not ended; `started_pid`: the pid its starter knows before the driver writes its own)."""
    import psutil

    pid = state.driver_pid if state.driver_pid is not None else started_pid
    if pid is None:
        return not state.finished
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def stop_trial(folder: TrialFolder, wait_s: float = 120.0) -> StopOutcome:
    """Ask the trial to stop and wait up to `wait_s` for its end. "pending": the driver lives and has not ended the
    trial yet (it will)."""
    state = folder.state()
    if state.finished:
        return "already_ended"
    folder.request_stop()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and driver_alive(state):
        state = folder.state()
        if state.finished:
            return "stopped"
        time.sleep(POLL_S)
    state = folder.state()  # the driver may have written its end and exited since the last look
    if state.finished:
        return "stopped"
    if driver_alive(state):
        return "pending"
    end_without_driver(folder, state)
    return "stopped_without_driver"


def end_without_driver(folder: TrialFolder, state: TrialState) -> None:
    """Stop the candidate the gone driver left running and end the trial: measured results stay; what never
    finished is skipped with the reason."""
    from traindeck.backend.runs import RunStore, stop_run

    with RunStore() as store:
        for result in state.results:
            if result.state == "running" and result.run_id:
                stop_run(store, result.run_id, grace_s=5.0)
    for result in state.results:
        if not result.finished:
            result.state, result.reason = "skipped", GONE_REASON
    state.state, state.ended_at, state.current = "stopped", time.time(), None
    folder.write_state(state)

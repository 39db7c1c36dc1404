"""The queue as people look at it (`queue list`, the dashboard): each run of the queue with what it waits for."""

from __future__ import annotations

import shlex
from typing import Any

from traindeck.backend.launch.plan import target_words
from traindeck.backend.queue.entries import QueueStore
from traindeck.backend.queue.keeper import plan_starts


def queue_rows(queue: QueueStore, include_finished: bool = False) -> list[dict[str, Any]]:
    """What `queue list --json` prints: one row per run of the queue, in order (also for the dashboard). A running
    run's row has started_at (epoch seconds; null for the others)."""
    entries = queue.entries(include_finished=include_finished)
    waiting = [e for e in entries if e.state == "queued"]
    running = queue.runs.list_runs(state="running")
    started = {r.id: r.started_at or r.created_at for r in running}  # a running row says since when (epoch s)
    try:
        from traindeck.backend.queue.gpus import sample_gpus

        gpus = sample_gpus()
    except Exception:  # noqa: BLE001 - the list must show even if NVML misbehaves
        gpus = ()
    decisions = {d.entry.run_id: d for d in plan_starts(waiting, len(running), queue.running_gpus(),
                                                         queue.settings(), gpus)}
    rows = []
    for entry in entries:
        decision = decisions.get(entry.run_id)
        position = waiting.index(entry) + 1 if entry in waiting else None
        waiting_for = ""
        if decision is not None:
            waiting_for = decision.waiting_for or "its turn (starting)"
        rows.append({"id": entry.run_id, "name": entry.name, "position": position, "waiting_for": waiting_for,
                     "state": entry.state, "held": entry.held, "gpus": entry.gpus,
                     "assigned_gpus": entry.assigned_gpus, "started_at": started.get(entry.run_id),
                     "entry": entry.launch.entry, "runs": shlex.join(target_words(
                         entry.launch.script, entry.launch.entry, entry.launch.script_args))})
    return rows


def queue_state() -> dict[str, Any]:
    """The whole queue at one moment, for a client that does not hold the store open (the dashboard)."""
    from traindeck.backend.queue.keeper import keeper_running

    with QueueStore() as queue:
        settings = queue.settings()
        return {"paused": settings.paused, "pause_reason": settings.pause_reason,
                "max_running": settings.max_running, "stop_on_failure": settings.stop_on_failure,
                "keeper_running": keeper_running(queue), "runs": queue_rows(queue, include_finished=True)[-200:]}


def queue_action(action: str, run_id: str | None = None, position: int | None = None) -> str:
    """pause | resume | hold | release | remove | start | move, as the CLI does them; returns one line to show.
    Raises ValueError with that line when it cannot be done."""
    from traindeck.backend.queue.keeper import ensure_keeper
    from traindeck.backend.queue.starting import gpus_now, start_queued

    with QueueStore() as queue:
        if action in ("pause", "resume"):
            queue.update_settings(paused=action == "pause", pause_reason="")
            ensure_keeper(queue)
            return "queue paused" if action == "pause" else "queue resumed"
        entry = queue.entry(run_id or "")
        if entry is None or entry.state != "queued":
            raise ValueError(f"run {run_id} is not waiting in the queue")
        if action in ("hold", "release"):
            queue.set_held(entry.run_id, action == "hold")
            ensure_keeper(queue)
        elif action == "remove":
            if not queue.remove(entry.run_id):
                raise ValueError(f"run {run_id} started meanwhile")
        elif action == "move" and position is not None:
            queue.move(entry.run_id, position)
        elif action == "start":
            if not start_queued(queue, entry, gpus_now(queue, entry.gpus)):
                raise ValueError(f"run {run_id} started meanwhile")
        else:
            raise ValueError(f"unknown queue action {action!r}")
        return f"{action}: {entry.name}"

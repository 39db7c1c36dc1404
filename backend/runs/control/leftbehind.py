"""What `runs show` adds about what a run leaves behind: lineage, provenance, the kind of stop it supports."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traindeck.backend.runs.control.resume import load_lineage
from traindeck.backend.runs.record.provenance import load as load_provenance
from traindeck.backend.runs.record.savestop import stop_kind

if TYPE_CHECKING:
    from traindeck.backend.runs.record.run_store import RunRecord


def summary_fields(run_dir: str) -> dict[str, Any]:
    lineage = load_lineage(run_dir) if run_dir else None
    return {
        "parent": lineage.parent if lineage else None,
        "resumed_from": lineage.resumed_from if lineage else None,
        "provenance": load_provenance(run_dir) if run_dir else None,
        "stop": stop_kind(run_dir) if run_dir else "signals",
    }


def run_leftovers(store_path: str | None, run_id: str, record: RunRecord | None = None) -> dict[str, Any]:
    """Everything the dashboard's "left behind" panel shows for one run (call it off the UI thread):
    {"id", "state", "checkpoints": [Checkpoint.to_json()...], "parent", "resumed_from", "provenance", "stop"}.
    `record`: the run as the caller just read it (the Runs page polls it anyway), so the store is not opened again
    every few seconds while a run goes (a connection and its schema check: ~2 % of the page's time on screen)."""
    from traindeck.backend.runs.control.relaunch import checkpoints_of
    from traindeck.backend.runs.record.run_store import RunStore

    if record is None or record.id != run_id:
        with RunStore(store_path) as store:
            record = store.get_run(run_id)
    if record is None:
        raise LookupError(f"no run {run_id} in the run store")
    return {"id": record.id, "state": record.state, "run_dir": record.run_dir, "checkpoints": [c.to_json() for c in checkpoints_of(record)],
            **summary_fields(record.run_dir)}


def relaunch_run(store_path: str | None, run_id: str, how: str, checkpoint: str | None = None) -> str:
    """`rerun` or `resume` (from `checkpoint`, default the newest) for the dashboard; the new run's id.
    Raises ResumeError with a one-line reason, or RuntimeError with the plan's errors."""
    from traindeck.backend.runs.control.relaunch import rerun, resume
    from traindeck.backend.runs.record.run_store import RunStore

    with RunStore(store_path) as store:
        record = store.get_run(run_id)
        if record is None:
            raise LookupError(f"no run {run_id} in the run store")
        outcome = rerun(record, store=store) if how == "rerun" else resume(record, checkpoint=checkpoint,
                                                                            store=store)[0]
    if outcome.record is None:
        raise RuntimeError("; ".join(outcome.plan.errors))
    return outcome.record.id


def bundle_run(store_path: str | None, run_id: str, target: str) -> int:
    """`runs bundle` for the dashboard: writes the zip, returns its size in bytes."""
    from traindeck.backend.runs.record.bundle import write_bundle
    from traindeck.backend.runs.record.run_store import RunStore

    with RunStore(store_path) as store:
        record = store.get_run(run_id)
        if record is None:
            raise LookupError(f"no run {run_id} in the run store")
        summary: dict[str, Any] = {k: getattr(record, k) for k in (
            "id", "name", "state", "state_detail", "exit_code", "diagnosis", "progress", "launcher", "preset",
            "script", "argv", "cwd", "created_at", "started_at", "ended_at")}
        summary["metrics"] = store.last_metrics(record.id)
        try:
            from traindeck.backend.monitor.store_read import resource_summary

            summary["resources"] = resource_summary(store.path, record.id)
        except Exception as exc:  # noqa: BLE001 - numpy missing or no samples table: the bundle goes on
            summary["resources"] = {"error": str(exc)}
        summary.update(summary_fields(record.run_dir))
        size, _names = write_bundle(record.run_dir, summary, target)
    return size

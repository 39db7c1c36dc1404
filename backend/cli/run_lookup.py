"""What the run commands (`run`, `runs`, `logs`, `stop`, `monitor --run`) share: opening the run store, finding
the run a user named, and a run's progress and end as short text.

One resolver for every command, so an id, a unique prefix, the 4-letter suffix or the run's name means the same
run wherever it is typed: `monitor --run 4821` names the run with that suffix when there is one (only a number
that names no run is a PID).
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli import UserError

if TYPE_CHECKING:
    from traindeck.backend.runs import RunRecord, RunStore


def open_store() -> RunStore:
    """The run store, with runs whose supervisor is gone marked lost first (so no command shows them running).

    On a full disk nothing is marked: the store is shown as it is, said in one line. That holds whether the store
    could only be opened for reading (no room for SQLite's WAL and shared-memory files) or was opened for writing
    (those files were there, kept by another reader): a write there would fail half-way or take the last bytes."""
    from traindeck.backend.core import disk_full
    from traindeck.backend.runs import RunStore, reconcile

    store = RunStore()
    if store.read_only:  # a full disk: what the store holds is shown, and nothing is marked or written
        print(f"traindeck: {store.read_only}", file=sys.stderr)
        return store
    if disk_full(store.path.parent):
        print(f"traindeck: disk full at {store.path.parent}: the runs are shown as last saved; nothing is written "
              "until space is freed", file=sys.stderr)
        return store
    reconcile(store, report=lambda text: print(f"traindeck: {text}", file=sys.stderr))
    return store


def resolve_run(store: RunStore, text: str) -> RunRecord:
    """The run `text` names (full id, unique prefix, unique suffix, or name: the newest run of that name)."""
    run_id = store.resolve_id(text)
    record = store.get_run(run_id) if run_id else None
    if record is None:
        several = [r.id for r in store.list_runs() if r.id.startswith(text) or r.id.endswith(text)]
        if len(several) > 1:
            raise AmbiguousRun(f"{text!r} matches {len(several)} runs ({', '.join(several[:3])}"
                               f"{', ...' if len(several) > 3 else ''}); give more of the id")
        raise UserError(f"no run matches {text!r} (see `traindeck runs list`)")
    return record


class AmbiguousRun(UserError):
    """Part of an id that several runs share."""


def iso(t: float | None) -> str | None:
    """A wall-clock time as local ISO 8601 with the offset (to the second); None stays None."""
    if t is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def clock(seconds: float | None) -> str:
    """A duration as people read it ("?" when unknown)."""
    from traindeck.backend.runs import duration_text

    return duration_text(seconds) if seconds is not None else "?"


def progress_text(progress: dict[str, Any] | None, running: bool = True, stalled: bool = False) -> str:
    """'40/100 (40%) 3.2 it/s ETA 0:19'; the ETA only while the run is running (an ended run expects nothing), and
    'stalled' instead of the last rate and ETA while it is stalled."""
    if not progress:
        return ""
    current, total = progress.get("current") or 0, progress.get("total")
    unit = progress.get("unit") or "it"
    text = f"{current:g}/{total:g}" if total else f"{current:g}"
    if total:
        text += f" ({100 * current / total:.0f}%)"
    if running and stalled:
        return text + " stalled"
    if progress.get("rate"):
        text += f" {progress['rate']:.3g} {unit}/s"
    if running and progress.get("eta_s") is not None:
        text += f" ETA {clock(progress['eta_s'])}"
    return text


def signal_text(code: int) -> str:
    """A negative (Python-style) return code as the signal's name: -2 -> 'SIGINT'."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def exit_text(record: RunRecord) -> str:
    """The EXIT column: the exit code, or the signal that ended the launcher ('SIGINT'), blank while running."""
    code = record.exit_code
    if code is None:
        return "" if record.state == "running" else "-"
    return signal_text(code) if code < 0 else str(code)

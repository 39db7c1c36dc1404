"""The events the dashboard shows as desktop notifications: a run's end (succeeded, failed, stopped, lost), a stall,
a NaN loss, a nearly full disk, read from the run store's events after a mark.

The supervisor, the stall watch, the watchdog and whoever marks a run lost already write these events (and run the
user's notify command, see alerts); the dashboard only reads them, so each event is shown once however many of its
pages watch the run, and only while a window is open.
"""

from __future__ import annotations

from dataclasses import dataclass

from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.alerts import EVENTS, first_line

# run_events kind -> alert event ("finished" events say their state first: "failed: ...")
_KINDS = {"finished": "", "lost": "lost", "stall": "stalled", "nan": "nan", "low_disk": "low_disk"}
WORDS = {"succeeded": "succeeded", "failed": "failed", "stopped": "stopped", "lost": "was lost",
         "stalled": "stalled", "nan": "loss became NaN", "low_disk": "is short of disk space"}


@dataclass(frozen=True)
class Alert:
    event_id: int
    run_id: str
    run_name: str
    event: str  # one of alerts.EVENTS
    diagnosis: str  # its first line

    @property
    def summary(self) -> str:
        return f"{self.run_name or self.run_id} {WORDS.get(self.event, self.event)}"


def alert_mark(store: RunStore) -> int:
    """Where to start: events written before the dashboard opened are not news."""
    return store.events_mark()


def alerts_after(store: RunStore, mark: int) -> tuple[int, list[Alert]]:
    """The alerts after `mark`, and the new mark."""
    found: list[Alert] = []
    names: dict[str, str] = {}
    for event in store.events_after(mark, tuple(_KINDS)):
        mark = max(mark, event.id)
        kind, text = _KINDS[event.kind], event.text
        if not kind:
            state, _, text = text.partition(": ")
            kind = state
        if kind not in EVENTS:
            continue
        if event.run_id not in names:
            record = store.get_run(event.run_id)
            names[event.run_id] = record.name if record is not None else ""
        found.append(Alert(event.id, event.run_id, names[event.run_id], kind, first_line(text)))
    return mark, found

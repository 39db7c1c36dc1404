"""Which sweep a run belongs to and the values it was given: `sweep.json` in the run's folder.

The queue writes it when a sweep's run starts (backend.queue.starting); History reads it to group a sweep's runs
and to show the swept values as columns. A run that was no sweep's has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text

SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class SweepMark:
    """One run's place in a sweep."""

    sweep_id: str  # shared by the runs one sweep queued
    name: str = ""  # the sweep's base name (its runs are named `name-NAME=V-...`)
    size: int = 0  # runs the sweep queued
    values: dict[str, str] = field(default_factory=dict)  # swept name -> this run's value, as written

    def to_dict(self) -> dict[str, Any]:
        return {"sweep_id": self.sweep_id, "name": self.name, "size": self.size, "values": dict(self.values)}

    @classmethod
    def from_dict(cls, data: Any) -> SweepMark | None:
        """The mark in `data` (a dict as to_dict writes it), or None when it holds none."""
        if not isinstance(data, dict) or not isinstance(data.get("sweep_id"), str) or not data["sweep_id"]:
            return None
        values = data.get("values")
        size = data.get("size")
        return cls(sweep_id=data["sweep_id"], name=str(data.get("name") or ""),
                   size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                   values={str(k): str(v) for k, v in values.items()} if isinstance(values, dict) else {})


def write_sweep_mark(run_dir: Path | str, mark: SweepMark) -> None:
    atomic_write_text(Path(run_dir) / SWEEP_FILE, json.dumps(mark.to_dict(), indent=1, sort_keys=True) + "\n")


def read_sweep_mark(run_dir: Path | str) -> SweepMark | None:
    """The run's sweep mark, or None (no sweep, no folder, an unreadable file)."""
    try:
        text = (Path(run_dir) / SWEEP_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        return SweepMark.from_dict(json.loads(text))
    except ValueError:
        return None

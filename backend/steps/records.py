"""What a rank's step timing writes (one JSON line per optimizer step) and how it is read back, bounded.

The writer is the run's site hook (`launch/site_hook/_traindeck_steps.py`, standard library only, inside the
user's interpreter); this module is its reader. A line is either a step of one rank or the rank's report of what
its hooks could attach to. Lines that are not ours, too long or malformed are skipped, never raised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PHASES = ("forward", "backward", "communication", "optimizer", "swap", "other")
MAX_LINE = 4096  # bytes: a step line is ~300


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step of one rank: the milliseconds charged to each phase (they add up to `step_ms`) and the
    rank's memory at the step's end (None where the rank could not tell: no GPU, no /proc)."""

    rank: int
    step: int
    t: float  # wall-clock time of the step's end
    step_ms: float
    phases_ms: dict[str, float]
    gpu_allocated: int | None = None
    gpu_reserved: int | None = None
    gpu_peak_allocated: int | None = None
    gpu_peak_reserved: int | None = None
    host_rss: int | None = None
    host_pinned: int | None = None

    def phase(self, name: str) -> float:
        return self.phases_ms.get(name, 0.0)


@dataclass(frozen=True)
class HookReport:
    """What a rank's step timing attached to, and what it could not (the Step view says why a phase is missing)."""

    rank: int
    pid: int | None
    attached: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    synchronized: bool = False
    clock: str = ""  # what timed the phases: "host", "host, synchronised", "cuda events" ("" from an older hook)
    extra: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        said = f"rank {self.rank}: step timing attached to " + (", ".join(self.attached) or "nothing")
        if self.clock and self.clock != "host":
            said += f" (timed with {self.clock})"
        if self.missing:
            said += "; could not attach: " + "; ".join(self.missing)
        return said


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _ms(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


def parse_line(line: bytes | str, rank: int) -> StepRecord | HookReport | None:
    """One line of rank `rank`'s file, or None for anything else (a torn last line, a foreign line)."""
    if len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("kind") == "hooks":
        attached: list[Any] = data["attached"] if isinstance(data.get("attached"), list) else []
        missing: list[Any] = data["missing"] if isinstance(data.get("missing"), list) else []
        return HookReport(rank=rank, pid=_int(data.get("pid")), attached=tuple(str(a)[:200] for a in attached[:20]),
                          missing=tuple(str(m)[:300] for m in missing[:20]), synchronized=bool(data.get("sync")),
                          clock=str(data["clock"])[:40] if isinstance(data.get("clock"), str) else "")
    step = _int(data.get("step"))
    t = data.get("t")
    if step is None or not isinstance(t, (int, float)):
        return None
    return StepRecord(
        rank=rank, step=step, t=float(t), step_ms=_ms(data.get("step_ms")),
        phases_ms={p: _ms(data.get(p + "_ms")) for p in PHASES},
        gpu_allocated=_int(data.get("gpu_allocated")), gpu_reserved=_int(data.get("gpu_reserved")),
        gpu_peak_allocated=_int(data.get("gpu_peak_allocated")),
        gpu_peak_reserved=_int(data.get("gpu_peak_reserved")),
        host_rss=_int(data.get("host_rss")), host_pinned=_int(data.get("host_pinned")))

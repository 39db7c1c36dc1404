"""A GPU's health over time, as the Monitor's health strip draws it: the health readings (the run store's
`resource_gpu_health` rows, or live samples) cut into time spans, each with one state, and the run's steps to
tick on the same time axis.

A span's state, most serious first:
- "xid": an XID error was reported in it (a short mark at the event's time, XID_MARK_S long);
- "throttled": a clock-event reason that lowers clocks under load (power cap, thermal, hardware slowdown, power
  brake) was active; the span keeps the reasons, so a strip can colour each cause apart;
- "pcie": the PCIe link ran below its maximum generation or width while the GPU was busy (an idle link rests at a
  lower generation by design, which is not counted);
- "ok": none of the above; "unknown": nothing could be read (neither the clock-event reasons nor the link).

A reading holds until the GPU's next one (the store keeps a row only when something changed).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traindeck.backend.monitor.snapshots import BUSY_PERCENT, REASON_WORDS, THROTTLING, GpuHealth

XID_MARK_S = 2.0  # an XID is one moment: drawn this long so that it shows at any zoom of a minute or so
STATES = ("ok", "throttled", "pcie", "xid", "unknown")


@dataclass(frozen=True, slots=True)
class HealthSpan:
    """One stretch of time [start, end) in one state; `reasons` are the throttling reasons (nvidia-smi's names)
    or, for "xid", the XID numbers; `text` says it in words."""

    start: float
    end: float
    state: str
    reasons: tuple[str, ...] = ()
    text: str = ""


def health_row(health: GpuHealth, utilization_percent: float | None) -> dict[str, Any]:
    """A live reading in the store's row shape (GpuHealth as a dict with the GPU's utilisation as "util")."""
    return {**dataclasses.asdict(health), "util": utilization_percent}


def reading_state(row: Mapping[str, Any]) -> tuple[str, tuple[str, ...], str]:
    """(state, reasons, words) of one reading, XIDs left out (they are moments, see health_spans)."""
    throttled = tuple(r for r in row.get("throttle") or () if r in THROTTLING)
    if throttled:
        return "throttled", throttled, "throttled: " + ", ".join(REASON_WORDS.get(r, r) for r in throttled)
    link = row.get("pcie")
    busy = (row.get("util") or 0) >= BUSY_PERCENT
    if link and busy and (link["gen"] < link["max_gen"] or link["width"] < link["max_width"]):
        return "pcie", (), (f"PCIe link at Gen{link['gen']} x{link['width']} of Gen{link['max_gen']} "
                            f"x{link['max_width']} while busy")
    if not row.get("throttle_known") and not link:
        return "unknown", (), "health not readable"
    return "ok", (), "ok"


def health_spans(rows: Sequence[tuple[float, Mapping[str, Any]]], until: float,
                 xid_mark_s: float = XID_MARK_S) -> list[HealthSpan]:
    """One GPU's readings [(t, row)] (oldest first) as spans up to `until`: neighbours in the same state are
    merged, and each XID event (by its own time, once however many rows repeat it) cuts a mark into them."""
    spans: list[HealthSpan] = []
    for i, (t, row) in enumerate(rows):
        end = rows[i + 1][0] if i + 1 < len(rows) else max(until, t)
        if end <= t:
            continue
        state, reasons, text = reading_state(row)
        last = spans[-1] if spans else None
        if last is not None and last.state == state and last.reasons == reasons and last.end == t:
            spans[-1] = dataclasses.replace(last, end=end, text=text)
        else:
            spans.append(HealthSpan(t, end, state, reasons, text))
    events: dict[tuple[int, float], str] = {}
    for _t, row in rows:
        for event in row.get("xid") or ():
            events[(int(event["xid"]), float(event["t"]))] = str(event.get("source") or "nvml")
    for (xid, at), source in sorted(events.items(), key=lambda e: e[0][1]):
        said = f"XID {xid}" + (" (kernel log)" if source == "kernel" else "")
        spans = _cut(spans, HealthSpan(at, at + xid_mark_s, "xid", (str(xid),), said))
    return spans


def _cut(spans: list[HealthSpan], mark: HealthSpan) -> list[HealthSpan]:
    """`spans` with `mark` laid over them (what it covers is cut away)."""
    out: list[HealthSpan] = []
    for span in spans:
        if span.end <= mark.start or span.start >= mark.end:
            out.append(span)
            continue
        if span.start < mark.start:
            out.append(dataclasses.replace(span, end=mark.start))
        if span.end > mark.end:
            out.append(dataclasses.replace(span, start=mark.end))
    out.append(mark)
    return sorted(out, key=lambda s: s.start)


def spans_by_gpu(changes: Iterable[tuple[int, float, Mapping[str, Any]]], until: float) -> dict[int, list[HealthSpan]]:
    """read_gpu_health's rows (GPU, t, row) as each GPU's spans up to `until`."""
    by_gpu: dict[int, list[tuple[float, Mapping[str, Any]]]] = {}
    for gpu, t, row in changes:
        by_gpu.setdefault(gpu, []).append((t, row))
    return {gpu: health_spans(sorted(rows, key=lambda r: r[0]), until) for gpu, rows in sorted(by_gpu.items())}


class HealthTimeline:
    """Each GPU's readings as they come (recorded ones first, then live samples), a reading kept only when it
    differs from the GPU's last one, as the run store keeps them."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple[float, dict[str, Any]]]] = {}

    def add(self, gpu: int, t: float, row: Mapping[str, Any]) -> bool:
        """Keep the reading if it says something new (or is the first); True when kept."""
        rows = self.rows.setdefault(gpu, [])
        if rows and t <= rows[-1][0]:
            return False  # older than what is held (a recording read after live samples came)
        reading = dict(row)
        if rows and _same(rows[-1][1], reading):
            return False
        rows.append((t, reading))
        return True

    def spans(self, gpu: int, until: float) -> list[HealthSpan]:
        return health_spans(self.rows.get(gpu, []), until)

    def clear(self) -> None:
        self.rows.clear()


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    busy = [(r.get("util") or 0) >= BUSY_PERCENT for r in (a, b)]
    strip = [{k: v for k, v in r.items() if k != "util"} for r in (a, b)]
    return strip[0] == strip[1] and busy[0] == busy[1]


def step_at(steps: Sequence[tuple[float, int]], t: float) -> int | None:
    """The step running at time `t`: the first whose end (steps are [(end time, step)], oldest first) is not
    before t; None after the last one ended (or without steps)."""
    if not steps:
        return None
    index = bisect_left([end for end, _ in steps], t)
    return steps[index][1] if index < len(steps) else None


def span_at(spans: Sequence[HealthSpan], t: float) -> HealthSpan | None:
    """The span that holds time `t` (an XID mark over what lies under it)."""
    found = [s for s in spans if s.start <= t < s.end]
    return next((s for s in found if s.state == "xid"), found[0] if found else None)


__all__ = ["HealthSpan", "HealthTimeline", "STATES", "XID_MARK_S", "health_row", "health_spans", "reading_state",
           "span_at", "spans_by_gpu", "step_at"]

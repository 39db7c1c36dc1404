"""The loss watchdog: a loss that becomes NaN/inf, or jumps far above its recent median, is an event of the run.

The supervisor stays the run's one owner: its output follower hands each parsed metric to `Watchdog.feed`, and
its end goes through `explain` (the diagnosis of a run the watchdog stopped) and `announce_end` (the alert).
A loss is any metric named `loss` or ending in `_loss` / `/loss`. Settings come from the run's environment, as
`traindeck run --stop-on-nan` sets them (so they are in command.json for anyone to read):
TRAINDECK_STOP_ON_NAN=1 stops the run gracefully at the first NaN/inf loss; TRAINDECK_LOSS_JUMP_FACTOR (default
10) is how many times the median of the last values a loss may jump before it is reported (0 turns it off).
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from traindeck.backend.runs.diagnosis.diagnose import Diagnosis
from traindeck.backend.runs.supervisor import alerts

STOP_ON_NAN_ENV = "TRAINDECK_STOP_ON_NAN"
JUMP_FACTOR_ENV = "TRAINDECK_LOSS_JUMP_FACTOR"
DEFAULT_JUMP_FACTOR = 10.0
STOP_GRACE_S = 10.0
RECENT = 20  # values of a series the median is taken over
MIN_RECENT = 5  # fewer than this: no median worth comparing with yet


def is_loss(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base == "loss" or base.endswith("_loss")


@dataclass(frozen=True)
class LossEvent:
    kind: str  # "nan" (NaN or inf) or "jump"
    name: str
    step: int | None
    value: float
    median: float | None = None

    @property
    def text(self) -> str:
        where = f" at step {self.step}" if self.step is not None else ""
        if self.kind == "nan":
            what = "NaN" if math.isnan(self.value) else ("inf" if self.value > 0 else "-inf")
            return f"{self.name} became {what}{where}"
        return f"{self.name} jumped to {self.value:.4g}{where} ({self.value / self.median:.1f}x its recent median " \
               f"{self.median:.4g})" if self.median else f"{self.name} jumped to {self.value:.4g}{where}"


class LossCheck:
    """Pure rules over one run's loss values as they come: what each new value means, if anything."""

    def __init__(self, jump_factor: float = DEFAULT_JUMP_FACTOR) -> None:
        self.jump_factor = jump_factor
        self.recent: dict[str, deque[float]] = {}
        self.nan_seen: set[str] = set()

    def feed(self, name: str, step: int | None, value: float) -> LossEvent | None:
        if not is_loss(name):
            return None
        if not math.isfinite(value):
            if name in self.nan_seen:  # said once per series: a NaN run prints NaN every step after
                return None
            self.nan_seen.add(name)
            return LossEvent("nan", name, step, value)
        self.nan_seen.discard(name)
        recent = self.recent.setdefault(name, deque(maxlen=RECENT))
        event = None
        if self.jump_factor > 0 and len(recent) >= MIN_RECENT:
            median = statistics.median(recent)
            if median > 0 and value > self.jump_factor * median:
                event = LossEvent("jump", name, step, value, median)
        recent.append(value)
        return event


class _Store(Protocol):
    def add_event(self, run_id: str, kind: str, text: str, t: float | None = None) -> Any: ...
    def get_run(self, run_id: str) -> Any: ...


class _RunDir(Protocol):
    def request_stop(self, grace_s: float) -> None: ...


class Watchdog:
    """One run's watchdog, as its supervisor uses it (feed is called on the output follower's thread)."""

    def __init__(self, store: _Store, run_id: str, run_dir: _RunDir, env: Mapping[str, str]) -> None:
        self.store, self.run_id, self.run_dir = store, run_id, run_dir
        self.stop_on_nan = env.get(STOP_ON_NAN_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        try:
            factor = float(env.get(JUMP_FACTOR_ENV, DEFAULT_JUMP_FACTOR))
        except ValueError:
            factor = DEFAULT_JUMP_FACTOR
        self.check = LossCheck(factor)
        self.stopped_for: LossEvent | None = None  # the NaN the watchdog stopped the run for
        self._lock = threading.Lock()

    @property
    def run_name(self) -> str:
        record = self.store.get_run(self.run_id)
        return str(getattr(record, "name", "") or "")

    def feed(self, name: str, step: int | None, value: float, progress: Any = None) -> None:
        """One parsed metric. `progress`: the run's main progress (its `current` is the step of a line that
        does not say its own step, such as the Trainer's `{'loss': nan, ...}`)."""
        if step is None and progress is not None and getattr(progress, "unit", "") in ("it", "step", "steps"):
            current = getattr(progress, "current", None)
            step = int(current) if isinstance(current, (int, float)) else None
        with self._lock:
            event = self.check.feed(name, step, value)
            if event is None:
                return
            if event.kind == "jump":
                self.store.add_event(self.run_id, "loss_jump", event.text)
                return
            self.store.add_event(self.run_id, "nan", event.text)
            alerts.announce("nan", self.run_id, self.run_name, event.text)
            if self.stop_on_nan and self.stopped_for is None:
                self.stopped_for = event
                self.run_dir.request_stop(STOP_GRACE_S)
                self.store.add_event(self.run_id, "watchdog_stop", f"stopping the run: {event.text} (--stop-on-nan)")

    def stalled(self, text: str) -> None:
        alerts.announce("stalled", self.run_id, self.run_name, text)

    def explain(self, state: str, diagnosis: Diagnosis) -> Diagnosis:
        """The diagnosis to record: a run the watchdog stopped says so, with the step."""
        event = self.stopped_for
        if state != "stopped" or event is None:
            return diagnosis
        what = "NaN" if math.isnan(event.value) else "inf"
        where = f" at step {event.step}" if event.step is not None else ""
        return Diagnosis(f"stopped: {event.name} became {what}{where}", "stopped",
                         evidence=[event.text, "traindeck stopped the run (--stop-on-nan)", *diagnosis.evidence])

    def announce_end(self, state: str, diagnosis: Diagnosis | None) -> None:
        alerts.announce(state, self.run_id, self.run_name, diagnosis.summary if diagnosis else None)

    def close(self) -> None:
        alerts.wait_all()

"""What the log parsers produce: assembled lines, progress updates and metric samples (frozen, cheap to pass)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Line:
    """One display line of a run's output.

    `text` has ANSI escape sequences and other control characters removed and is decoded UTF-8 (invalid bytes
    become U+FFFD). `rank` is set when a launcher tagged the line (`[default0]:`, `[rank1]: `, ...); the tag is
    removed from `text`. `transient` means the line ended with a carriage return (or moved the cursor back up), i.e.
    it is a progress-bar redraw: a reader replaces it with the next line of the same rank instead of appending.
    """

    text: str
    rank: int | None = None
    transient: bool = False
    node: str | None = None  # multi-node runs: the host pdsh named in front of the line (`HOST: `)


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a run (or one of its bars) is: `current` of `total` items, `rate` items per second, `eta_s` seconds.

    `unit` is what is counted ("it", "step", "B", ...). `source` is the parser that saw it: "tqdm", "deepspeed",
    "trainer", "report", "generic"; or "step timing" (the supervisor's, from the optimizer steps the ranks timed,
    for a run whose output says nothing of its progress). `label` tells bars apart (a tqdm description such as "Epoch 1", "" for an
    unnamed bar); `OutputParser.progress` picks the one that stands for the whole run.
    """

    current: int
    total: int | None
    rate: float | None
    eta_s: float | None
    unit: str
    rank: int | None
    source: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class Metric:
    """One sample of a named series. `step` is the training step it belongs to when known."""

    name: str
    value: float
    step: int | None
    rank: int | None
    source: str

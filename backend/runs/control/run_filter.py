"""The run lists' filter (History's table, the Runs page's list): what the user typed, read once, then asked of each
run's words.

Plain text matches a run whose name, id, script, preset, state or tags (its sweep and swept values, its trial) hold
it, case ignored. Text written /like this/ is a regular expression searched in the same words (TensorBoard's run
filter), case ignored too; one that does not compile is reported (`error`) and filters nothing, so a half-typed
pattern never empties the list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from traindeck.backend.runs.control.history import RunFigures
from traindeck.backend.runs.record.run_store import RunRecord


@dataclass(frozen=True)
class RunFilter:
    """A parsed filter: `matches(words)` says whether a run with these words is shown."""

    text: str
    pattern: re.Pattern[str] | None = None  # /regex/ text, compiled (None for plain text or an invalid pattern)
    error: str = ""  # why a /regex/ does not compile ("" when it does, or for plain text)

    @property
    def active(self) -> bool:
        """Whether it hides anything at all: some text, and not an invalid pattern."""
        return bool(self.text.strip()) and not self.error

    @property
    def is_regex(self) -> bool:
        return is_regex_text(self.text)

    def matches(self, words: Iterable[str]) -> bool:
        if not self.active:
            return True
        if self.pattern is not None:
            return any(self.pattern.search(word) for word in words if word)
        needle = self.text.strip().casefold()
        return any(needle in word.casefold() for word in words if word)


def is_regex_text(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) >= 2 and stripped.startswith("/") and stripped.endswith("/")


def parse_filter(text: str) -> RunFilter:
    """The filter `text` stands for: a substring, or a regular expression when written /like this/."""
    if not is_regex_text(text):
        return RunFilter(text)
    body = text.strip()[1:-1]
    try:
        return RunFilter(text, re.compile(body, re.IGNORECASE))
    except re.error as error:
        return RunFilter(text, None, f"invalid regular expression: {error}")


def record_words(record: RunRecord) -> tuple[str, ...]:
    """What the filter searches in a run as the Runs page lists it."""
    return (record.name, record.id, record.script, record.preset or "", record.state)


def figures_words(run: RunFigures, tags: Iterable[str] = ()) -> tuple[str, ...]:
    """What the filter searches in a run as History lists it: its own words, and as tags its sweep (name, id,
    `name=value` of each swept value) and its trial (id, candidate); `tags`: any more (the table's group line)."""
    sweep = run.sweep
    trial = run.trial
    swept = [f"{name}={value}" for name, value in sweep.values.items()] if sweep is not None else []
    return (run.name, run.run_id, run.script, run.preset or "", run.state, *swept,
            sweep.name if sweep is not None else "", sweep.sweep_id if sweep is not None else "",
            trial.trial_id if trial is not None else "", trial.label if trial is not None else "", *tags)


def count_text(shown: int, total: int, noun: str = "run") -> str:
    """"4 of 31 runs" (or "31 runs" when all are shown)."""
    plural = "" if total == 1 else "s"
    return f"{total} {noun}{plural}" if shown == total else f"{shown} of {total} {noun}{plural}"

"""TensorBoard scalars a run writes, read with TensorBoard's own reader, as metric series in the run store.

Event files (`events.out.tfevents.*`) are looked for where checkpoints are (the working directory, which holds the
default `runs/`, and the folders named by the run's arguments), written since the run started. Each file is read
incrementally by `event_file_loader.EventFileLoader` (it resumes where the last read ended), one series per tag.

A tag the script also prints (the HF Trainer prints {'loss': ...} and writes `train/loss`) is not counted twice:
when a parsed series of the same name, of the tag's last part, or of the tag with `_` for `/` exists, the parsed
series stands for it. A tag seen before any such series is held back (its values kept, none written) for HOLD_S
seconds before that is decided: the Trainer writes and flushes the event file before it prints the same values,
and the printed line reaches the run store up to seconds later on a busy machine.

Imports TensorBoard (protobuf, numpy): used only in the sidecar process, never in the dashboard or the supervisor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.runs.record.checkpoints import walk_folders

EVENT_PREFIX = "events.out.tfevents."
SCALARS_PLUGIN = "scalars"
HOLD_S = 10.0  # a new tag waits this long for a printed series that stands for it


def event_files(roots: Iterable[Path], since: float = 0.0) -> list[Path]:
    """Event files under the roots modified at or after `since` (the run's start), oldest first."""
    found: dict[str, tuple[float, Path]] = {}
    for root in roots:
        for folder, _dirs, files in walk_folders(root, max_depth=5):
            for name in files:
                if not name.startswith(EVENT_PREFIX):
                    continue
                path = folder / name
                try:
                    mtime = path.stat().st_mtime
                except OSError:
                    continue
                if mtime >= since:
                    found[str(path)] = (mtime, path)
    return [path for _mtime, path in sorted(found.values())]


def available() -> bool:
    """Whether tensorboard is installed, without importing it: the import (~0.4 s of CPU) waits until an event
    file is there to read, not in the run's first seconds, when it competed with the job for a core."""
    import importlib.util

    try:
        return importlib.util.find_spec("tensorboard.backend.event_processing.event_file_loader") is not None
    except (ImportError, ValueError):
        return False


def scalars(events: Iterable[Any], scalar_tags: set[str] | None = None) -> Iterator[tuple[str, int, float, float]]:
    """(tag, step, wall time, value) of every scalar in the events (TB1 simple_value or TB2 scalar tensors).
    `scalar_tags`: tags known to be scalars, kept across calls (TB2 writes the plugin metadata only once a tag)."""
    from tensorboard.util import tensor_util

    known = scalar_tags if scalar_tags is not None else set()
    for event in events:
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            number: float | None = None
            if value.HasField("simple_value"):
                number = float(value.simple_value)
            elif value.HasField("tensor") and (value.metadata.plugin_data.plugin_name == SCALARS_PLUGIN
                                               or value.tag in known):
                known.add(value.tag)
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size == 1:
                        number = float(array.reshape(()))
                except (ValueError, TypeError):
                    number = None
            if number is not None:
                yield value.tag, int(event.step), float(event.wall_time), number


@dataclass
class TensorBoardReader:
    """Reads a run's event files as they grow; `poll` returns rows for RunStore.add_metrics."""

    roots: list[Path]
    since: float
    loaders: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str | None] = field(default_factory=dict)  # tag -> series name, or None: a parsed series has it
    rows_read: int = 0
    scalar_tags: set[str] = field(default_factory=set)
    rescan_s: float = 10.0  # new event files are looked for this often; known ones are read at every poll
    hold_s: float = HOLD_S
    clock: Callable[[], float] = time.monotonic
    _files: list[Path] = field(default_factory=list)
    _scanned_at: float | None = None
    # tag -> (when first seen, its rows so far): tags not yet decided, waiting for a printed series of theirs
    _held: dict[str, tuple[float, list[tuple[str, int | None, float, float, int | None]]]] = field(
        default_factory=dict)

    def poll(self, parsed_names: set[str], final: bool = False) -> list[tuple[str, int | None, float, float,
                                                                           int | None]]:
        """New scalar rows (name, step, wall time, value, None) since the last poll, except tags a parsed series
        stands for; a new tag's rows come once it is decided (at once when a parsed series has it, after hold_s,
        or at the final poll)."""
        now = self.clock()
        if final or self._scanned_at is None or now - self._scanned_at >= self.rescan_s:
            self._files = event_files(self.roots, self.since)
            self._scanned_at = now
        rows: list[tuple[str, int | None, float, float, int | None]] = []
        for path in self._files:
            key = str(path)
            if key not in self.loaders:
                from tensorboard.backend.event_processing import event_file_loader  # once there is a file

                # The legacy loader yields events as written (simple_value kept); the migrating one costs 4x here.
                self.loaders[key] = event_file_loader.LegacyEventFileLoader(key)
            try:
                events = list(self.loaders[key].Load())
            except Exception:  # noqa: BLE001 - a file being written or truncated: read again next time
                continue
            for tag, step, wall_time, value in scalars(events, self.scalar_tags):
                row = (tag, step, wall_time, value, None)
                if tag in self.tags:
                    name = self.tags[tag]
                    if name is not None:
                        rows.append(row)
                elif self._parsed_alias(tag, parsed_names):
                    self.tags[tag] = None
                else:
                    self._held.setdefault(tag, (now, []))[1].append(row)
        for tag, (seen_at, held) in list(self._held.items()):
            if self._parsed_alias(tag, parsed_names):
                self.tags[tag] = None
            elif final or now - seen_at >= self.hold_s:
                self.tags[tag] = tag
                rows.extend(held)
            else:
                continue
            del self._held[tag]
        self.rows_read += len(rows)
        return rows

    @staticmethod
    def _parsed_alias(tag: str, parsed_names: set[str]) -> bool:
        return bool({tag, tag.rsplit("/", 1)[-1], tag.replace("/", "_")} & parsed_names)

    @property
    def written(self) -> set[str]:
        return {name for name in self.tags.values() if name is not None}


def wait_for_files(roots: list[Path], since: float, timeout_s: float) -> list[Path]:
    """Event files, waiting up to timeout_s for the first (tests and one-off reads)."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = event_files(roots, since)
        if files or time.monotonic() > deadline:
            return files
        time.sleep(0.2)


def default_roots(argv: list[str], cwd: str) -> list[Path]:
    """Where to look for event files: the checkpoint search roots plus `runs/` in the working directory."""
    from traindeck.backend.runs.record.checkpoints import search_roots

    roots = search_roots(argv, cwd)
    runs = Path(cwd, "runs")
    if runs.is_dir() and os.access(runs, os.R_OK) and runs.resolve() not in roots:
        roots.append(runs.resolve())
    return roots

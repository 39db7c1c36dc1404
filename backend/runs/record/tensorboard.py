"""TensorBoard scalars a run writes, read with TensorBoard's own reader, as metric series in the run store.

Event files (`events.out.tfevents.*`) are looked for where checkpoints are (the working directory, which holds the
default `runs/`, and the folders named by the run's arguments), written since the run started. Each file is read
incrementally by `event_file_loader.EventFileLoader` (it resumes where the last read ended), one series per tag.

A tag the script also prints (the HF Trainer prints {'loss': '4.025', ...} and writes `train/loss`) is not counted
twice: when a parsed series of one of its names (exact_values.twin_names: the tag, HF's name for it, the tag with `_`
for `/`, its last part) exists, the parsed series stands for it, and its values make the printed ones exact
(exact_values: the printed 4.025 becomes TensorBoard's 4.0246710777 in the run store, step by step). A tag whose
values turn out to be another quantity than its printed namesake's becomes a series of its own. A tag seen before
any such series is held back (its values kept, none written) for HOLD_S seconds before that is decided: the Trainer
writes and flushes the event file before it prints the same values, and the printed line reaches the run store up
to seconds later on a busy machine.

`TensorBoardRecorder` is one run's reading as the sidecar does it: new values as series, revisions of printed ones.
`record_again` is the same reading once more for a run store rebuilt from the run folders (store_rebuild), whose
printed values came back rounded from output.log: the event files the run wrote (those created by its end) make
them exact again, within the rebuild's time for reading.

Imports TensorBoard (protobuf, numpy) only where an event file is there to read: in the sidecar process, and in
whichever process rebuilds a corrupt run store (once); never in the dashboard's or the supervisor's own work.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.runs.record.checkpoints import walk_folders
from traindeck.backend.runs.record.exact_values import ExactValues, Revision, ScalarRow, twin_names

if TYPE_CHECKING:  # the run store's rebuild calls record_again: this module never imports the store back
    from traindeck.backend.runs.record.run_store import RunStore

EVENT_PREFIX = "events.out.tfevents."
SCALARS_PLUGIN = "scalars"
HOLD_S = 10.0  # a new tag waits this long for a printed series that stands for it
PRUNE_EVERY_S = 60.0  # how often the recorder shortens its run's revision log
REVISIONS_KEPT_S = 600.0  # a run's revision log is pruned to this much: a live view polls far more often

MetricRow = tuple[str, int | None, float, float, int | None]  # as RunStore.add_metrics takes them
PrintedRow = tuple[int, str, int | None, float, float]  # as RunStore.metric_rows_after gives them


def event_files(roots: Iterable[Path], since: float = 0.0, until: float | None = None) -> list[Path]:
    """Event files under the roots created and modified at or after `since` (the run's start), oldest first; with
    `until` (the run's end), only those created by then. A file's creation is the time its writer puts in its name
    (whole seconds, hence the second's slack): a file created before the run started is another run's, even while
    that run, still going, writes to the same folder; one created after `until` is a later run's."""
    found: dict[str, tuple[float, Path]] = {}
    for root in roots:
        for folder, _dirs, files in walk_folders(root, max_depth=5):
            for name in files:
                if not name.startswith(EVENT_PREFIX):
                    continue
                created = created_at(name)
                if created is not None and (created < since - 1.0 or (until is not None and created > until)):
                    continue
                path = folder / name
                try:
                    mtime = path.stat().st_mtime
                except OSError:
                    continue
                if mtime >= since:
                    found[str(path)] = (mtime, path)
    return [path for _mtime, path in sorted(found.values())]


def created_at(name: str) -> float | None:
    """When an event file was created, from its name (`events.out.tfevents.<seconds>.<host>.<pid>...`, as
    TensorBoard's, torch's and TensorFlow's writers name them), or None for another name."""
    stamp = name[len(EVENT_PREFIX):].split(".", 1)[0]
    return float(stamp) if name.startswith(EVENT_PREFIX) and stamp.isdigit() else None


def available() -> bool:
    """Whether tensorboard is installed, without importing it: the import (~0.4 s of CPU) waits until an event
    file is there to read, not in the run's first seconds, when it competed with the job for a core."""
    import importlib.util

    try:
        return importlib.util.find_spec("tensorboard.backend.event_processing.event_file_loader") is not None
    except (ImportError, ValueError):
        return False


def scalars(events: Iterable[Any], scalar_tags: set[str] | None = None
            ) -> Iterator[tuple[str, int, float, float, bool]]:
    """(tag, step, wall time, value, whether it is stored as a float32) of every scalar in the events (TB1
    simple_value, a float32, or TB2 scalar tensors, of their own type). `scalar_tags`: tags known to be scalars, kept
    across calls (TB2 writes the plugin metadata only once a tag)."""
    from tensorboard.util import tensor_util

    known = scalar_tags if scalar_tags is not None else set()
    for event in events:
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            number: float | None = None
            single = True
            if value.HasField("simple_value"):
                number = float(value.simple_value)
            elif value.HasField("tensor") and (value.metadata.plugin_data.plugin_name == SCALARS_PLUGIN
                                               or value.tag in known):
                known.add(value.tag)
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size == 1:
                        number = float(array.reshape(()))
                        single = array.dtype.itemsize <= 4
                except (ValueError, TypeError):
                    number = None
            if number is not None:
                yield value.tag, int(event.step), float(event.wall_time), number, single


@dataclass
class TensorBoardRead:
    """What one poll found: rows of series of their own, and printed values to make exact."""

    rows: list[MetricRow] = field(default_factory=list)  # for RunStore.add_metrics
    revisions: list[Revision] = field(default_factory=list)  # for RunStore.revise_metrics


@dataclass
class TensorBoardReader:
    """Reads a run's event files as they grow; `poll` returns what to write to the run store."""

    roots: list[Path]
    since: float
    loaders: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str | None] = field(default_factory=dict)  # tag -> series name, or None: a parsed series has it
    rows_read: int = 0
    scalar_tags: set[str] = field(default_factory=set)
    rescan_s: float = 10.0  # new event files are looked for this often; known ones are read at every poll
    hold_s: float = HOLD_S
    clock: Callable[[], float] = time.monotonic
    exact: ExactValues = field(default_factory=ExactValues)  # the tags a parsed series has, against its values
    until: float | None = None  # event files created after this (wall time) are another run's (event_files)
    deadline: float | None = None  # (time.monotonic) no event is read past it; `cut` then says so
    cut: bool = False  # the deadline came before every event file was read whole
    parsed: set[str] = field(default_factory=set)  # names of the parsed (printed) series seen
    _files: list[Path] = field(default_factory=list)
    _scanned_at: float | None = None
    # tag -> (when first seen, its values so far): tags not yet decided, waiting for a printed series of theirs
    _held: dict[str, tuple[float, list[ScalarRow]]] = field(default_factory=dict)

    def poll(self, parsed_names: Iterable[str] = (), final: bool = False,
             printed: Iterable[PrintedRow] = ()) -> TensorBoardRead:
        """New scalar rows (name, step, wall time, value, None) since the last poll, except tags a parsed series
        stands for, and the revisions that make the parsed values exact. `parsed_names`: parsed series known (the
        names of `printed` are added); `printed`: the parsed rows recorded since the last poll, as the run store
        gives them. A new tag's rows come once it is decided (at once when a parsed series has it, after hold_s,
        or at the final poll)."""
        printed = list(printed)
        self.parsed.update(parsed_names)
        self.parsed.update(row[1] for row in printed)
        self.exact.add_printed(printed)
        now = self.clock()
        if final or self._scanned_at is None or now - self._scanned_at >= self.rescan_s:
            self._files = event_files(self.roots, self.since, self.until)
            self._scanned_at = now
        read = TensorBoardRead()
        twins: dict[str, list[ScalarRow]] = {}
        for path in self._files:
            key = str(path)
            if key not in self.loaders:
                from tensorboard.backend.event_processing import event_file_loader  # once there is a file

                # The legacy loader yields events as written (simple_value kept); the migrating one costs 4x here.
                self.loaders[key] = event_file_loader.LegacyEventFileLoader(key)
            try:
                events = list(self._load(self.loaders[key]))
            except Exception:  # noqa: BLE001 - a file being written or truncated: read again next time
                continue
            for tag, step, wall_time, value, single in scalars(events, self.scalar_tags):
                if tag in self.tags:
                    if self.tags[tag] is None:
                        twins.setdefault(tag, []).append((step, wall_time, value, single))
                    else:
                        read.rows.append((tag, step, wall_time, value, None))
                elif self._parsed_alias(tag, self.parsed):
                    self.tags[tag] = None
                    twins.setdefault(tag, []).append((step, wall_time, value, single))
                else:
                    self._held.setdefault(tag, (now, []))[1].append((step, wall_time, value, single))
        for tag, (seen_at, held) in list(self._held.items()):
            if self._parsed_alias(tag, self.parsed):
                self.tags[tag] = None
                twins[tag] = held + twins.get(tag, [])
            elif final or now - seen_at >= self.hold_s:
                self.tags[tag] = tag
                read.rows.extend((tag, step, wall, value, None) for step, wall, value, _single in held)
            else:
                continue
            del self._held[tag]
        for tag, rows in twins.items():
            self.exact.add_tensorboard(tag, rows)
        read.revisions, own = self.exact.resolve(final)
        for tag, rows in own.items():  # another quantity than the printed one of that name: a series of its own
            self.tags[tag] = tag
            read.rows.extend((tag, step, wall, value, None) for step, wall, value, _single in rows)
        self.rows_read += len(read.rows)
        return read

    def _load(self, loader: Any) -> Iterator[Any]:
        """The loader's new events, up to the deadline (checked every 1,000: reading one takes about 60 us)."""
        if self.deadline is None:
            yield from loader.Load()
            return
        for count, event in enumerate(loader.Load()):
            if count % 1000 == 0 and time.monotonic() >= self.deadline:
                self.cut = True
                return
            yield event

    @staticmethod
    def _parsed_alias(tag: str, parsed_names: set[str]) -> bool:
        return not parsed_names.isdisjoint(twin_names(tag))

    @property
    def written(self) -> set[str]:
        return {name for name in self.tags.values() if name is not None}


class TensorBoardRecorder:
    """One run's event files into the run store, a poll at a time (the sidecar's loop): new scalars as series of
    their own, the printed values that have a TensorBoard twin revised to its exact values (their revisions
    logged for live views, the log kept REVISIONS_KEPT_S)."""

    def __init__(self, store: RunStore, run_id: str, reader: TensorBoardReader,
                 clock: Callable[[], float] = time.monotonic, after: int | None = None) -> None:
        self.store, self.run_id, self.reader, self.clock = store, run_id, reader, clock
        # The printed rows after it come with each poll: from now on, or from `after` (a metrics_mark).
        self.mark = store.metrics_mark() if after is None else after
        self.parsed = set(store.last_metrics(run_id))  # printed before the recorder started (names only)
        self.written = 0  # rows written as series of their own
        self.revised = 0  # printed values revised
        self._revision_marks: list[tuple[float, int]] = []  # (when, the revision log's mark then)
        self._pruned_at = clock()

    def poll(self, final: bool = False) -> TensorBoardRead:
        """Read what is new and write it; `final`: the run has ended (every value still held is decided)."""
        rows = self.store.metric_rows_after(self.run_id, self.mark)
        if rows:
            self.mark = rows[-1][0]
        written = self.reader.written
        read = self.reader.poll(self.parsed, final, [row for row in rows if row[1] not in written])
        self.parsed.clear()  # handed over once; the reader keeps them
        if read.rows:
            self.store.add_metrics(self.run_id, read.rows)
            self.written += len(read.rows)
        if read.revisions:
            self.revised += self.store.revise_metrics(self.run_id, read.revisions)
            self._revision_marks.append((self.clock(), self.store.revisions_mark()))
        self._prune(final)
        return read

    def _prune(self, final: bool) -> None:
        now = self.clock()
        if not final and now - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = now
        old = [mark for when, mark in self._revision_marks if now - when >= REVISIONS_KEPT_S]
        if old:
            self.store.prune_revisions(self.run_id, old[-1])
            self._revision_marks = self._revision_marks[len(old):]


@dataclass(frozen=True)
class RecordedAgain:
    """What record_again made of a run's event files."""

    exact: int  # printed series with values made exact
    rows: int  # values of tags nothing prints, as series of their own
    cut: bool  # the deadline came before every event file was read whole


AGAIN_CHUNK = 2048  # printed rows handed to the recorder a poll at a time, as a live run's come


def record_again(store: RunStore, run_id: str, printed: list[MetricRow], *, argv: list[str], cwd: str,
                 since: float, until: float, deadline: float) -> RecordedAgain | None:
    """Add the printed rows of a run recorded again (a rebuilt run store's: store_rebuild) and read the event files
    it wrote, as its recorder read them while it ran: the printed values they hold exactly are revised to those
    values, tags nothing prints become series of their own. Files looked for as the sidecar does (default_roots),
    modified since `since` and created by `until`; nothing is read past `deadline` (time.monotonic). None, with
    the rows added as they are, when tensorboard is not installed or no such file is left."""
    roots = default_roots(argv, cwd) if os.path.isabs(cwd) else []
    if not roots or not available() or not event_files(roots, since, until):
        store.add_metrics(run_id, printed)
        return None
    # A rebuilt row's time is where its line is in the log, not when it was read: a value printed without a
    # step is paired by order alone (the script writes the event, then prints), not within SLACK_S of its time.
    reader = TensorBoardReader(roots, since=since, until=until, deadline=deadline,
                               exact=ExactValues(slack_s=math.inf))
    first = store.metrics_mark()
    recorder = TensorBoardRecorder(store, run_id, reader, after=first)
    revised: set[int] = set()
    for start in range(0, max(1, len(printed)), AGAIN_CHUNK):
        store.add_metrics(run_id, printed[start:start + AGAIN_CHUNK])
        read = recorder.poll(final=start + AGAIN_CHUNK >= len(printed))
        revised.update(row for row, _old, _new in read.revisions)
    store.prune_revisions(run_id, store.revisions_mark())  # nobody has read these rows as printed
    exact = {name for row, name, *_ in store.metric_rows_after(run_id, first) if row in revised} if revised else ()
    return RecordedAgain(len(exact), recorder.written, reader.cut)


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

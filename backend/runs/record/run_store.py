"""The run store: one SQLite database (WAL) indexing every run, its metrics and its events.

One writer per run (its supervisor) plus any number of readers (CLI, dashboard). WAL lets readers read while a
writer writes; every write is a short transaction and every connection waits (busy_timeout) rather than failing
when another process holds the write lock for a moment. Logs are not in here: they stay as files in each run
directory. Other parts of traindeck (resource samples) add their own tables to the same file; this module only
creates and migrates the tables it owns.

Text that comes from a run (events, the diagnosis, the state's detail) is masked on its way in (masking.mask_text):
an exception message or a log line quoted there never puts a token in the store, whoever writes it.

A metric row's value changes after it is written in one case only: a printed value whose TensorBoard twin holds it
exactly (tensorboard.TensorBoardRecorder) is revised to that value, and the revision is logged
(`run_metric_revisions`, kept for tensorboard.REVISIONS_KEPT_S) so that a live view, which reads only rows newer
than its mark, revises what it holds.

Each event is also appended, masked, to its run's folder (folder_record's events.jsonl) before it is stored, so a
store rebuilt from the folders (store_rebuild) gets the run's events back, even those a failing store lost.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import refuse_linked_database
from traindeck.backend.core.masking import mask_json, mask_text
from traindeck.backend.core.paths import disk_full, ensure_private_dir, run_store_path
from traindeck.backend.runs.record import store_rebuild
from traindeck.backend.runs.record.folder_record import FINAL_STATES, append_event, read_events, record_fields
from traindeck.backend.runs.record.layout import OUTPUT
from traindeck.backend.steps import PHASES, StepFiles, StepRecord

SCHEMA_VERSION = 1
STATES = frozenset({"running"}) | FINAL_STATES

# {(run id, kind, masked text): time} of events appended to their run folder whose store write then failed.
_unstored_events: dict[tuple[str, str, str], float] = {}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    preset TEXT,
    launcher TEXT NOT NULL DEFAULT 'python',
    script TEXT NOT NULL DEFAULT '',
    argv TEXT NOT NULL DEFAULT '[]',            -- JSON list, secrets masked
    cwd TEXT NOT NULL DEFAULT '',
    run_dir TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    state TEXT NOT NULL DEFAULT 'running',      -- running | succeeded | failed | stopped | lost
    state_detail TEXT NOT NULL DEFAULT '',      -- one line: "stalled: no output for 5 min", "stopping (SIGTERM)"
    exit_code INTEGER,                          -- the launcher's; negative = killed by that signal
    diagnosis TEXT,                             -- JSON Diagnosis, NULL while running or after success
    progress TEXT,                              -- JSON {current, total, rate, eta_s, unit, updated}
    supervisor_pid INTEGER,
    supervisor_started REAL,                    -- psutil create_time: a recycled pid is not our supervisor
    launcher_pid INTEGER,
    processes TEXT NOT NULL DEFAULT '[]',       -- JSON [{pid, started, rank, role, name, exit}]
    stop_requested_at REAL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS run_metrics (
    run_id TEXT NOT NULL, name TEXT NOT NULL, step INTEGER, t REAL NOT NULL, value REAL NOT NULL, rank INTEGER
);
CREATE INDEX IF NOT EXISTS run_metrics_by_run ON run_metrics(run_id, name, t);
CREATE TABLE IF NOT EXISTS run_metric_revisions (       -- printed values made exact (TensorBoard's): live views follow
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, metric_row INTEGER NOT NULL, old_value REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS run_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_events_by_run ON run_events(run_id, id);
CREATE TABLE IF NOT EXISTS step_phases (                -- one optimizer step of one rank (backend/steps)
    run_id TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL, t REAL NOT NULL, step_ms REAL NOT NULL,
    forward_ms REAL NOT NULL, backward_ms REAL NOT NULL, communication_ms REAL NOT NULL, optimizer_ms REAL NOT NULL,
    swap_ms REAL NOT NULL, other_ms REAL NOT NULL, gpu_allocated INTEGER, gpu_reserved INTEGER,
    gpu_peak_allocated INTEGER, gpu_peak_reserved INTEGER, host_rss INTEGER, host_pinned INTEGER,
    PRIMARY KEY (run_id, rank, step)
);
"""

_JSON_FIELDS = ("argv", "diagnosis", "progress", "processes")
_RUN_TEXT = ("diagnosis", "state_detail")  # columns that quote the run's own output
_COLUMNS = (
    "id", "name", "preset", "launcher", "script", "argv", "cwd", "run_dir", "created_at", "started_at", "ended_at",
    "state", "state_detail", "exit_code", "diagnosis", "progress", "supervisor_pid", "supervisor_started",
    "launcher_pid", "processes", "stop_requested_at",
)


@dataclass
class RunRecord:
    """One run as the store knows it."""

    id: str
    run_dir: str
    created_at: float
    name: str = ""
    preset: str | None = None
    launcher: str = "python"
    script: str = ""
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    state: str = "running"
    state_detail: str = ""
    exit_code: int | None = None
    diagnosis: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    supervisor_pid: int | None = None
    supervisor_started: float | None = None
    launcher_pid: int | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    stop_requested_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def log_path(self) -> Path:
        return Path(self.run_dir) / "output.log"


@dataclass(frozen=True)
class RunEvent:
    id: int
    run_id: str
    t: float
    kind: str
    text: str


class StoreError(Exception):
    """The run store cannot be used (newer schema, unreadable file)."""


class RunStore:
    """A connection to the run store. Thread-safe (one lock around the connection); cheap to open."""

    def __init__(self, path: Path | str | None = None, *, busy_timeout_s: float = 15.0,
                 secret_values: Sequence[str] = (), check: bool = True) -> None:
        """Open (or create) the store at `path` (default: run_store_path()).

        A store found corrupt or emptied is moved aside and rebuilt from the run folders first (store_rebuild);
        `rebuilt` then holds the line said about it. `check=False` opens the file as it is (the rebuild's own new
        store). A store that is only busy raises sqlite3.OperationalError ("database is locked") as before.
        `secret_values` are masked in every text written here, beside what mask_text finds by shape (a
        supervisor: its run's secrets)."""
        self.path = Path(path) if path is not None else run_store_path()
        self.secret_values = list(secret_values)
        ensure_private_dir(self.path.parent)
        self._lock = threading.RLock()
        self._busy_timeout_s = busy_timeout_s
        self.rebuilt: str | None = None
        if not check:
            if not self.path.exists():
                os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            self._connect()
            return
        self.read_only: str | None = None  # why the store could only be opened for reading (a full disk)
        # An open that fails for lack of room leaves the files it created (SQLite's empty WAL and shared-memory
        # files, a new store's empty file) removed: a full disk gains nothing from traindeck.
        before = _store_files(self.path)
        try:
            if store_rebuild.needs_care(self.path):
                try:
                    self.rebuilt = store_rebuild.open_missing_or_empty(self.path, self._connect, _refill)
                except sqlite3.OperationalError as exc:
                    if _no_room(self.path, exc):
                        _remove_new_files(self.path, before)
                    raise
            else:
                try:
                    self._connect()
                except sqlite3.OperationalError as exc:
                    if not _no_room(self.path, exc):
                        raise
                    _remove_new_files(self.path, before)
                    self._connect_read_only()
        except sqlite3.DatabaseError as exc:
            if not store_rebuild.is_corrupt(exc):
                raise
            self.rebuilt = store_rebuild.rebuild_corrupt(self.path, exc, self._connect, _refill)

    def _connect(self) -> None:
        refuse_linked_database(self.path)
        self._db = sqlite3.connect(str(self.path), timeout=self._busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across process crashes in WAL mode (only a power loss may lose the last commits).
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _connect_read_only(self) -> None:
        """The store as it was last merged (SQLite's `immutable`: no lock, no WAL or shared-memory file, which a
        full disk cannot hold): commands that only read still answer; every write fails."""
        wal = Path(f"{self.path}-wal")
        pending = wal.stat().st_size if wal.exists() else 0
        refuse_linked_database(self.path)
        self._db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro&immutable=1", uri=True, isolation_level=None,
                                   check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self.read_only = (f"disk full at {self.path.parent}: the runs are shown as last saved"
                          + (f" ({pending // 1024} KiB of newer changes wait in {wal.name})" if pending else "")
                          + "; nothing is written until space is freed")

    # -- plumbing -------------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE takes the write lock up front, so a transaction never fails half-way on a lock upgrade.
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as db:
            # One statement at a time: executescript() would commit the transaction we are in.
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    db.execute(statement)
            row = db.execute("SELECT value FROM runs_meta WHERE key = 'schema_version'").fetchone()
            version = int(row["value"]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"the run store {self.path} was written by a newer traindeck (schema {version})")
            if version < SCHEMA_VERSION:
                db.execute("INSERT OR REPLACE INTO runs_meta(key, value) VALUES ('schema_version', ?)",
                           (str(SCHEMA_VERSION),))

    # -- runs -----------------------------------------------------------------------------------------------
    def add_run(self, run: RunRecord) -> None:
        values = _to_row(run.__dict__)
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._write() as db:
            db.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", tuple(values.values()))

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set some columns of one run (JSON columns take Python objects)."""
        unknown = set(fields) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run fields: {sorted(unknown)}")
        values = _to_row(self._masked(fields))
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._write() as db:
            db.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values.values(), run_id))

    def _masked(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """`fields` with the run's own text in them (the diagnosis, the state's detail) masked."""
        return {name: mask_json(value, self.secret_values) if name in _RUN_TEXT else value
                for name, value in fields.items()}

    def finish_run(self, run_id: str, state: str, *, only_if_running: bool = False, **fields: Any) -> bool:
        """Move a run to a final state; with only_if_running, do nothing (False) if someone else ended it first."""
        if state not in FINAL_STATES:
            raise ValueError(f"not a final state: {state}")
        values = _to_row(self._masked({"state": state, **fields}))
        values.setdefault("ended_at", time.time())
        assignments = ", ".join(f"{k} = ?" for k in values)
        condition = " AND state = 'running'" if only_if_running else ""
        with self._write() as db:
            cursor = db.execute(f"UPDATE runs SET {assignments} WHERE id = ?{condition}", (*values.values(), run_id))
            return cursor.rowcount > 0

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _from_row(row) if row else None

    def list_runs(self, limit: int | None = None, state: str | None = None) -> list[RunRecord]:
        """Newest first."""
        query = "SELECT * FROM runs"
        params: list[Any] = []
        if state:
            query += " WHERE state = ?"
            params.append(state)
        query += " ORDER BY created_at DESC, id DESC"
        if limit:
            query += " LIMIT ?"
            params.append(limit)
        with self._lock:
            rows = self._db.execute(query, params).fetchall()
        return [_from_row(r) for r in rows]

    def run_names(self) -> set[str]:
        """Every name the runs have (queued ones included), for a new run's default name to be told apart."""
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT name FROM runs WHERE name != ''").fetchall()
        return {str(r["name"]) for r in rows}

    def resolve_id(self, text: str) -> str | None:
        """A run id from its full id, a unique prefix, a unique suffix (the random part) or a unique name."""
        with self._lock:
            exact = self._db.execute("SELECT id FROM runs WHERE id = ?", (text,)).fetchone()
            if exact:
                return str(exact["id"])
            candidates: list[str] = []
            for param, query in ((_like_escape(text) + "%", "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\'"),
                                 ("%" + _like_escape(text), "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\'"),
                                 (text, "SELECT id FROM runs WHERE name = ? ORDER BY created_at DESC")):
                candidates = [str(r["id"]) for r in self._db.execute(query, (param,)).fetchall()]
                if len(candidates) == 1:
                    return candidates[0]
                if len(candidates) > 1 and "name" in query:
                    return candidates[0]  # a name used twice means the newest run of that name
        return None

    # -- step phases ----------------------------------------------------------------------------------------
    def add_steps(self, run_id: str, records: Iterable[StepRecord]) -> None:
        """One row per (rank, step); a step written again (a resumed run counting from its checkpoint) replaces
        the older row."""
        batch = [(run_id, r.rank, r.step, r.t, r.step_ms, *(r.phase(p) for p in PHASES), r.gpu_allocated,
                  r.gpu_reserved, r.gpu_peak_allocated, r.gpu_peak_reserved, r.host_rss, r.host_pinned)
                 for r in records]
        if not batch:
            return
        with self._write() as db:
            db.executemany("INSERT OR REPLACE INTO step_phases VALUES (" + ", ".join("?" * 17) + ")", batch)

    def steps(self, run_id: str, rank: int | None = None, after_t: float | None = None,
              last: int | None = None) -> list[StepRecord]:
        """The run's step records (of one rank if given, recorded after `after_t` if given, only each rank's newest
        `last` steps if given), by rank and step."""
        query = "SELECT * FROM step_phases WHERE run_id = ?"
        params: list[Any] = [run_id]
        if rank is not None:
            query += " AND rank = ?"
            params.append(rank)
        if after_t is not None:
            query += " AND t > ?"
            params.append(after_t)
        if last is not None:
            numbered = query.replace(
                "SELECT *", "SELECT *, ROW_NUMBER() OVER (PARTITION BY rank ORDER BY step DESC) AS newest", 1)
            query = f"SELECT * FROM ({numbered}) WHERE newest <= ?"
            params.append(last)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY rank, step", params).fetchall()
        return [StepRecord(rank=int(r["rank"]), step=int(r["step"]), t=float(r["t"]), step_ms=float(r["step_ms"]),
                           phases_ms={p: float(r[p + "_ms"]) for p in PHASES}, gpu_allocated=r["gpu_allocated"],
                           gpu_reserved=r["gpu_reserved"], gpu_peak_allocated=r["gpu_peak_allocated"],
                           gpu_peak_reserved=r["gpu_peak_reserved"], host_rss=r["host_rss"],
                           host_pinned=r["host_pinned"]) for r in rows]

    # -- metrics --------------------------------------------------------------------------------------------
    def add_metrics(self, run_id: str, rows: Iterable[tuple[str, int | None, float, float, int | None]]) -> None:
        """rows: (name, step, t, value, rank). A NaN value is left out: SQLite stores NaN as NULL, which the
        column refuses, and one such row would lose the whole batch (the loss watchdog records NaN as an event)."""
        batch = [(run_id, *row) for row in rows if row[3] == row[3]]
        if not batch:
            return
        with self._write() as db:
            db.executemany("INSERT INTO run_metrics(run_id, name, step, t, value, rank) VALUES (?, ?, ?, ?, ?, ?)",
                           batch)

    def last_metrics(self, run_id: str) -> dict[str, float]:
        """{name: the latest value} over every series of the run."""
        return {name: value for name, (_row, value) in self.last_metric_rows(run_id).items()}

    def last_metric_rows(self, run_id: str) -> dict[str, tuple[int, float]]:
        """{name: (its row id, the latest value)} over every series of the run: last_metrics with the row each
        value is in (a later revision of that row changes the latest value; see metric_revisions_after)."""
        # One pass over the run's index entries (a correlated subquery per row takes minutes at 200k rows).
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, name, value FROM run_metrics WHERE rowid IN "
                "(SELECT max(rowid) FROM run_metrics WHERE run_id = ? GROUP BY name) ORDER BY name",
                (run_id,)).fetchall()
        return {str(r["name"]): (int(r["rowid"]), float(r["value"])) for r in rows}

    def revise_metrics(self, run_id: str, revisions: Iterable[tuple[int, float, float]]) -> int:
        """Give metric rows of the run new values: (row id, the value it holds, the new value), each logged for live
        views (metric_revisions_after). A row that no longer holds the value given is left alone. Returns the rows
        revised."""
        batch = [(row, old, new) for row, old, new in revisions if new == new and old != new]
        if not batch:
            return 0
        revised = 0
        with self._write() as db:
            for row, old, new in batch:
                if db.execute("UPDATE run_metrics SET value = ? WHERE rowid = ? AND run_id = ? AND value = ?",
                              (new, row, run_id, old)).rowcount:
                    db.execute("INSERT INTO run_metric_revisions(run_id, metric_row, old_value) VALUES (?, ?, ?)",
                               (run_id, row, old))
                    revised += 1
        return revised

    def revisions_mark(self) -> int:
        """The newest revision's id (of any run): later, metric_revisions_after(run, mark) returns only newer ones."""
        with self._lock:
            row = self._db.execute("SELECT max(id) AS mark FROM run_metric_revisions").fetchone()
        return int(row["mark"] or 0)

    def metric_revisions_after(self, run_id: str, mark: int, up_to: int | None = None
                               ) -> list[tuple[int, int, str, int | None, float, float, float]]:
        """[(revision id, row id, name, step, t, old value, new value)] of the run's metric rows revised after `mark`
        (and up to the revisions_mark `up_to`), oldest first: what a live view that read those rows before has to
        change."""
        with self._lock:
            cursor = self._db.cursor()
            cursor.row_factory = None
            return cursor.execute(
                "SELECT r.id, m.rowid, m.name, m.step, m.t, r.old_value, m.value FROM run_metric_revisions r "
                "JOIN run_metrics m ON m.rowid = r.metric_row WHERE r.id > ? AND r.id <= ? AND +r.run_id = ? "
                "ORDER BY r.id", (mark, 2**63 - 1 if up_to is None else up_to, run_id)).fetchall()

    def prune_revisions(self, run_id: str, through: int) -> None:
        """Forget the run's revisions up to id `through` (the values stay revised; only the log is shortened)."""
        with self._write() as db:
            db.execute("DELETE FROM run_metric_revisions WHERE id <= ? AND run_id = ?", (through, run_id))

    def metrics_mark(self) -> int:
        """The newest metric row's id (of any run): later, metric_rows_after(run, mark) returns only newer rows."""
        with self._lock:
            row = self._db.execute("SELECT max(rowid) AS mark FROM run_metrics").fetchone()
        return int(row["mark"] or 0)

    def metric_rows_after(self, run_id: str, mark: int) -> list[tuple[int, str, int | None, float, float]]:
        """[(rowid, name, step, t, value)] of the run recorded after `mark` (see metrics_mark), oldest first: what a
        client polling a live run has not seen yet; pass the last rowid it got as the next mark."""
        # "+run_id": walk the few rows after the mark rather than the run's whole index range. Plain tuples, as
        # SQLite gives them (t and value have REAL affinity): a live run's every row passes here, and making each a
        # Row, then a tuple again, would be most of a minimised window's polling cost (py-spy on bench_gui_soak).
        with self._lock:
            cursor = self._db.cursor()
            cursor.row_factory = None
            return cursor.execute(
                "SELECT rowid, name, step, t, value FROM run_metrics WHERE rowid > ? AND +run_id = ? ORDER BY rowid",
                (mark, run_id)).fetchall()

    def metric_series(self, run_id: str, name: str, after_t: float | None = None
                      ) -> list[tuple[int | None, float, float]]:
        """[(step, t, value)] of one series in the order recorded."""
        query = "SELECT step, t, value FROM run_metrics WHERE run_id = ? AND name = ?"
        params: list[Any] = [run_id, name]
        if after_t is not None:
            query += " AND t > ?"
            params.append(after_t)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY rowid", params).fetchall()
        return [(r["step"], float(r["t"]), float(r["value"])) for r in rows]

    def metric_series_chunks(self, run_id: str, name: str, chunk: int = 20_000, after_t: float | None = None,
                             before_t: float | None = None, up_to_mark: int | None = None,
                             steps: tuple[float, float] | None = None
                             ) -> Iterator[list[tuple[int | None, float, float]]]:
        """metric_series() (ordered by time) in lists of at most `chunk` rows, the lock held per chunk only: a reader
        folds a run's whole history without holding it all, and writers are not kept waiting meanwhile.
        `up_to_mark`: only rows up to that metrics_mark(), so that reads after the mark continue without overlap.
        `steps`: only rows whose step is within (low, high), inclusive (a chart zoomed into part of a run)."""
        # Keyset paging along the (run_id, name, t) index: each chunk is a seek, not a rescan of the series.
        query = ("SELECT rowid, step, t, value FROM run_metrics WHERE run_id = ? AND name = ? AND (t, rowid) > (?, ?)"
                 + (" AND t < ?" if before_t is not None else "")
                 + (" AND rowid <= ?" if up_to_mark is not None else "")
                 + (" AND step BETWEEN ? AND ?" if steps is not None else "") + " ORDER BY t, rowid LIMIT ?")
        key: tuple[float, int] = (-math.inf if after_t is None else after_t, 2**62 if after_t is not None else -1)
        while True:
            params: list[Any] = [run_id, name, *key] + ([before_t] if before_t is not None else []) + (
                [up_to_mark] if up_to_mark is not None else []) + (list(steps) if steps is not None else []) + [chunk]
            with self._lock:
                rows = self._db.execute(query, params).fetchall()
            if not rows:
                return
            key = (float(rows[-1]["t"]), int(rows[-1]["rowid"]))
            yield [(r["step"], float(r["t"]), float(r["value"])) for r in rows]
            if len(rows) < chunk:
                return

    def metric_step_spans(self, run_id: str) -> dict[str, tuple[int, int, float, float, int]]:
        """{name: (first step, last step, first t, last t, rows)} of every series recorded with steps: how fast
        steps went, without reading the series (run history, comparisons)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, min(step) AS s0, max(step) AS s1, min(t) AS t0, max(t) AS t1, count(*) AS n "
                "FROM run_metrics WHERE run_id = ? AND step IS NOT NULL GROUP BY name", (run_id,)).fetchall()
        return {str(r["name"]): (int(r["s0"]), int(r["s1"]), float(r["t0"]), float(r["t1"]), int(r["n"]))
                for r in rows}

    def metric_extremes(self, run_id: str) -> dict[str, tuple[float, float]]:
        """{name: (lowest, highest value)} of every series of the run: a run's best loss or accuracy without
        reading the series (run history)."""
        with self._lock:
            rows = self._db.execute("SELECT name, min(value) AS lo, max(value) AS hi FROM run_metrics "
                                    "WHERE run_id = ? GROUP BY name", (run_id,)).fetchall()
        return {str(r["name"]): (float(r["lo"]), float(r["hi"])) for r in rows if r["lo"] is not None}

    # -- events ---------------------------------------------------------------------------------------------
    def add_event(self, run_id: str, kind: str, text: str, t: float | None = None) -> None:
        """Record an event of the run (`t`: wall-clock time, default now): in the store, and first in the run's
        folder beside the store (folder_record.append_event, best effort), from which a rebuilt store takes it
        back even when the store write fails. A call repeated after its store write failed (SafeStore's, once the
        store is opened again) keeps the first call's time and is not appended to the folder twice."""
        text = mask_text(text, self.secret_values)
        key = (run_id, kind, text)
        repeat = _unstored_events.pop(key, None) if t is None else None
        if repeat is not None and time.time() - repeat < 60.0:
            t = repeat
        else:
            t = time.time() if t is None else t
            self._append_to_folder(run_id, t, kind, text)
        try:
            with self._write() as db:
                db.execute("INSERT INTO run_events(run_id, t, kind, text) VALUES (?, ?, ?, ?)",
                           (run_id, t, kind, text))
        except sqlite3.Error:
            if len(_unstored_events) >= 64:
                _unstored_events.clear()
            _unstored_events[key] = t
            raise

    def _append_to_folder(self, run_id: str, t: float, kind: str, text: str) -> None:
        try:
            folder = store_rebuild.run_folder(self.path, run_id)
            if folder is not None:
                append_event(folder, t, kind, text)
        except OSError:
            pass  # the store still gets it; a rebuild then finds the folder without it

    def _restore_events(self, run_id: str, events: Iterable[tuple[float, str, str]]) -> int:
        """Insert events read back from the run's folder (not appended there again); their count."""
        rows = [(run_id, t, kind, mask_text(text, self.secret_values)) for t, kind, text in events]
        with self._write() as db:
            db.executemany("INSERT INTO run_events(run_id, t, kind, text) VALUES (?, ?, ?, ?)", rows)
        return len(rows)

    def events_mark(self) -> int:
        """The id of the newest event of any run (0: none): where reading `events_after` starts."""
        with self._lock:
            row = self._db.execute("SELECT max(id) FROM run_events").fetchone()
        return int(row[0] or 0)

    def events_after(self, after_id: int, kinds: Sequence[str]) -> list[RunEvent]:
        """Events of every run newer than `after_id`, of these kinds, oldest first (the dashboard's alerts)."""
        marks = ",".join("?" * len(kinds))
        with self._lock:
            rows = self._db.execute(f"SELECT * FROM run_events WHERE id > ? AND kind IN ({marks}) ORDER BY id "
                                    "LIMIT 500", (after_id, *kinds)).fetchall()
        return [RunEvent(int(r["id"]), str(r["run_id"]), float(r["t"]), str(r["kind"]), str(r["text"])) for r in rows]

    def events(self, run_id: str, after_id: int = 0) -> list[RunEvent]:
        """The run's events newer than `after_id`, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM run_events WHERE run_id = ? AND id > ? ORDER BY id",
                                    (run_id, after_id)).fetchall()
        return [RunEvent(int(r["id"]), str(r["run_id"]), float(r["t"]), str(r["kind"]), str(r["text"])) for r in rows]


def _refill(path: Path, folders: list[Path], why: str) -> store_rebuild.Refilled:
    """A new store at `path` holding the runs of `folders` (store_rebuild.Refill): each run's record, its events from
    its folder's events file, its living supervisor, its metrics and progress from its output.log (newest run first,
    while REBUILD_LOGS_BUDGET_S lasts) made exact again from its TensorBoard event files where they are left, its
    step timings from its ranks' step files, and a 'rebuilt' event saying `why`."""
    # Imported here: every other opener of a store is spared it (tens of ms: exact_values, checkpoints).
    from traindeck.backend.runs.record.tensorboard import record_again

    supervisors = store_rebuild.living_supervisors()
    clipped = events = metrics = no_events = unread = exact = with_events = cut = timed = 0
    recorded: list[RunRecord] = []
    with RunStore(path, check=False) as store:
        for folder in folders:
            fields = record_fields(folder)
            if fields is None:
                continue
            record = RunRecord(**fields)
            if not record.finished and str(folder) in supervisors:
                record.supervisor_pid, record.supervisor_started = supervisors[str(folder)]
            store.add_run(record)
            kept = read_events(folder)
            if kept is None:
                no_events += 1
            else:
                events += store._restore_events(record.id, kept)
            what = f"ended {record.state}" if record.finished else "no end recorded yet"
            earlier = ("its earlier events are only in the moved-aside store" if kept is None else
                       f"{len(kept)} earlier event{'s' if len(kept) != 1 else ''} taken back from its folder")
            store.add_event(record.id, "rebuilt", f"recorded again from its run folder ({what}): the run store "
                            f"{why}; {earlier}")
            recorded.append(record)
        reading_until = time.monotonic() + store_rebuild.REBUILD_LOGS_BUDGET_S
        for record in sorted(recorded, key=lambda r: r.created_at, reverse=True):
            if time.monotonic() >= reading_until:
                unread += 1
                continue
            log = Path(record.run_dir) / OUTPUT
            end = record.ended_at or (log.stat().st_mtime if log.exists() else record.created_at)
            rows, progress, partly = store_rebuild.log_metrics(log, record.started_at or record.created_at, end)
            again = record_again(store, record.id, rows, argv=record.argv, cwd=record.cwd,
                                 since=record.created_at - 1.0, until=end, deadline=reading_until)
            if progress is not None:
                store.update_run(record.id, progress=progress)
            clipped, metrics = clipped + partly, metrics + len(rows)
            if again is not None:
                exact, with_events, metrics = exact + again.exact, with_events + 1, metrics + again.rows
            steps, whole = _steps_again(store, record, reading_until)
            timed, cut = timed + steps, cut + (not whole or (again is not None and again.cut))
    return store_rebuild.Refilled(len(recorded), clipped, events, metrics, no_events, unread, exact, with_events,
                                  cut, timed)


def _steps_again(store: RunStore, record: RunRecord, deadline: float) -> tuple[int, bool]:
    """The run's step timings from its ranks' step files (steps/rank<R>.jsonl, read as its supervisor read them),
    until `deadline` (time.monotonic): how many, and whether the files were read whole."""
    files = StepFiles(record.run_dir)
    added = 0
    while True:
        if time.monotonic() >= deadline:
            return added, False
        steps, reports = files.read_new()
        if not steps and not reports:
            return added, True
        store.add_steps(record.id, steps)
        added += len(steps)


def _no_room(path: Path, exc: sqlite3.OperationalError) -> bool:
    """SQLite could not write because the disk is full: it says so, or says "disk I/O error" when it cannot create
    or grow its shared-memory or WAL file on a disk with (almost) no space left."""
    text = str(exc)
    return "disk is full" in text or ("disk I/O error" in text and disk_full(path.parent))


def _store_files(path: Path) -> set[Path]:
    """Which of the store's file, its WAL and its shared-memory file are there now."""
    return {f for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if os.path.lexists(f)}


def _remove_new_files(path: Path, before: set[Path]) -> None:
    """Remove what an open that failed for lack of room created beside `before` (the files there before it): the
    WAL and shared-memory files, and the store's own file while it is still empty. Only plain files (never a link
    put there); one already gone, or that cannot be removed, is left as it is."""
    for name in {path, Path(f"{path}-wal"), Path(f"{path}-shm")} - before:
        try:
            info = os.lstat(name)
            if stat.S_ISREG(info.st_mode) and (name != path or info.st_size == 0):
                os.unlink(name)
        except OSError:
            pass


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _to_row(fields: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _JSON_FIELDS and value is not None:
            value = json.dumps(value, sort_keys=True)
        row[key] = value
    return row


def _from_row(row: sqlite3.Row) -> RunRecord:
    data = {k: row[k] for k in row.keys() if k in _COLUMNS}
    for key in _JSON_FIELDS:
        if data.get(key) is not None:
            data[key] = json.loads(data[key])
    if data.get("argv") is None:
        data["argv"] = []
    if data.get("processes") is None:
        data["processes"] = []
    return RunRecord(**data)

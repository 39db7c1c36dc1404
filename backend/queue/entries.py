"""The queue's state, in the run store: which queued runs wait, in what order, and the queue's settings.

A queued run is a run in the `runs` table with state `queued` (its id is the one it keeps when it runs); this
module adds `queue_entries` (order, hold, GPU choice, what to launch) and `queue_settings` (paused, max running,
stop on failure, who keeps the queue going). Starting a queued run is one conditional UPDATE
(`queued` -> `running`) inside a write transaction: whoever does it first starts the run, nobody starts it twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.paths import runs_dir
from traindeck.backend.launch.plan import target_words
from traindeck.backend.runs.record.layout import new_run_id
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

QUEUED = "queued"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS queue_entries (
        run_id TEXT PRIMARY KEY,
        position REAL NOT NULL,             -- order among waiting runs (smaller first)
        held INTEGER NOT NULL DEFAULT 0,
        gpus TEXT NOT NULL DEFAULT '',      -- '' (none asked), '0,2', 'any:2'
        request TEXT NOT NULL,              -- JSON: what to launch (see QueuedLaunch)
        queued_at REAL NOT NULL,
        assigned_gpus TEXT,                 -- JSON list: the GPUs it was started on
        seen_end INTEGER NOT NULL DEFAULT 0, -- the keeper has acted on its end (stop on failure)
        claimed_by TEXT                     -- JSON [pid, start time] of the process that started it
    )""",
    "CREATE TABLE IF NOT EXISTS queue_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# Columns that queue_entries in a run store written by an older traindeck lacks: added when the store is opened
# (CREATE TABLE IF NOT EXISTS leaves an existing table as it is, and every read names them).
_ADDED_COLUMNS = {"claimed_by": "TEXT"}


@dataclass
class QueuedLaunch:
    """What `traindeck run` was asked, kept until the run starts. Secrets never go on disk: a queued run inherits
    the environment of the process that keeps the queue going, plus `env`: traindeck's own switches (such as
    TRAINDECK_STOP_ON_NAN) and variables set on the Launch page that are not secret (adding.check_queued_env)."""

    script: str  # the script file, or with `entry` the module name or the command (LaunchRequest.script)
    script_args: list[str] = field(default_factory=list)
    entry: str = "script"  # "script" | "module" | "command"; a launch stored without it is a script file
    preset: str | None = None
    preset_overrides: dict[str, Any] = field(default_factory=dict)  # dotted key path -> value (sweeps)
    config_file: str | None = None
    launcher: str | None = None
    nproc: int | None = None
    python: str | None = None
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    sweep: dict[str, Any] = field(default_factory=dict)  # a sweep's run: its SweepMark (runs.record.sweep_mark)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> QueuedLaunch:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class QueueEntry:
    run_id: str
    name: str
    state: str
    position: float
    held: bool
    gpus: str
    launch: QueuedLaunch
    queued_at: float
    assigned_gpus: list[int] | None
    seen_end: bool
    claimed_by: tuple[int, float | None] | None = None


@dataclass(frozen=True)
class QueueSettings:
    paused: bool = False
    pause_reason: str = ""
    max_running: int | None = None  # None: 1 on a machine without GPUs, else no limit but the GPUs
    stop_on_failure: bool = False
    keeper_pid: int | None = None
    keeper_started: float | None = None


class QueueStore:
    """The queue tables beside the runs in one run store file."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.runs = RunStore(path)  # creates the file and the runs tables
        self.path = self.runs.path
        self._db = sqlite3.connect(str(self.path), timeout=15.0, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA busy_timeout = 15000")
        with self._write() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            present = {row["name"] for row in db.execute("PRAGMA table_info(queue_entries)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in present:
                    db.execute(f"ALTER TABLE queue_entries ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self._db.close()
        self.runs.close()

    def __enter__(self) -> QueueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")  # the write lock up front: the check and the change are one step
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- entries ------------------------------------------------------------------------------------------------
    def add(self, launch: QueuedLaunch, *, name: str, gpus: str = "", held: bool = False) -> RunRecord:
        """Queue a run at the end of the order; returns its run record (state `queued`)."""
        now = time.time()
        run_id = new_run_id(now)
        record = RunRecord(id=run_id, run_dir=str(runs_dir() / run_id), created_at=now, name=name,
                           preset=launch.preset, launcher=launch.launcher or "", script=launch.script,
                           argv=target_words(launch.script, launch.entry, launch.script_args), cwd=launch.cwd,
                           state=QUEUED,
                           state_detail="waiting in the queue")
        while True:
            try:
                self.runs.add_run(record)  # first: an entry never points at a run that is not there
                break
            except sqlite3.IntegrityError:  # the same id in the same second: draw another
                record.id = new_run_id(now)
                record.run_dir = str(runs_dir() / record.id)
        with self._write() as db:
            row = db.execute("SELECT max(position) AS p FROM queue_entries").fetchone()
            position = (row["p"] or 0.0) + 1.0
            db.execute("INSERT INTO queue_entries(run_id, position, held, gpus, request, queued_at) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (record.id, position, int(held), gpus, launch.to_json(), now))
        return record

    def entries(self, include_finished: bool = False) -> list[QueueEntry]:
        """Queued (and running) entries in queue order; with include_finished, every entry."""
        query = ("SELECT q.*, r.name AS name, r.state AS state FROM queue_entries q JOIN runs r ON r.id = q.run_id")
        if not include_finished:
            query += " WHERE r.state IN ('queued', 'running')"
        rows = self._db.execute(query + " ORDER BY q.position, q.queued_at").fetchall()
        return [_entry(r) for r in rows]

    def entry(self, run_id: str) -> QueueEntry | None:
        """The queue entry of `run_id` (whatever its run's state), or None when it has none."""
        row = self._db.execute("SELECT q.*, r.name AS name, r.state AS state FROM queue_entries q "
                               "JOIN runs r ON r.id = q.run_id WHERE q.run_id = ?", (run_id,)).fetchone()
        return _entry(row) if row else None

    def waiting(self) -> list[QueueEntry]:
        """The entries still queued, in queue order."""
        return [e for e in self.entries() if e.state == QUEUED]

    def running_gpus(self) -> list[int]:
        """GPUs given to queued runs that are running: taken even before the run allocates memory on them."""
        return [g for e in self.entries() if e.state == "running" for g in (e.assigned_gpus or [])]

    def set_held(self, run_id: str, held: bool) -> bool:
        with self._write() as db:
            return db.execute("UPDATE queue_entries SET held = ? WHERE run_id = ?",
                              (int(held), run_id)).rowcount > 0

    def move(self, run_id: str, to_position: int) -> None:
        """Put a waiting run at 1-based place `to_position` among the waiting runs (the others keep their order)."""
        with self._write() as db:
            rows = db.execute("SELECT q.run_id FROM queue_entries q JOIN runs r ON r.id = q.run_id "
                              "WHERE r.state = 'queued' ORDER BY q.position, q.queued_at").fetchall()
            order = [str(r["run_id"]) for r in rows]
            if run_id not in order:
                raise KeyError(run_id)
            order.remove(run_id)
            order.insert(max(0, min(len(order), to_position - 1)), run_id)
            for i, rid in enumerate(order):
                db.execute("UPDATE queue_entries SET position = ? WHERE run_id = ?", (float(i + 1), rid))

    def remove(self, run_id: str) -> bool:
        """Take a run that has not started out of the queue (and out of the run store: it never ran)."""
        with self._write() as db:
            gone = db.execute("DELETE FROM runs WHERE id = ? AND state = 'queued'", (run_id,)).rowcount > 0
            if gone:
                db.execute("DELETE FROM queue_entries WHERE run_id = ?", (run_id,))
            return gone

    def claim(self, run_id: str, assigned_gpus: list[int] | None = None) -> bool:
        """queued -> running, once: True for the one caller that made the change. created_at becomes now, so the
        run counts as starting (a run with no supervisor after START_TIMEOUT_S is then found lost, not restarted)."""
        now = time.time()
        with self._write() as db:
            changed = db.execute(
                "UPDATE runs SET state = 'running', created_at = ?, state_detail = 'starting (from the queue)' "
                "WHERE id = ? AND state = 'queued'", (now, run_id)).rowcount > 0
            if changed:
                db.execute("UPDATE queue_entries SET assigned_gpus = ?, claimed_by = ? WHERE run_id = ?",
                           (json.dumps(assigned_gpus) if assigned_gpus is not None else None,
                            json.dumps([os.getpid(), _create_time(os.getpid())]), run_id))
            return changed

    def requeue_interrupted(self, run_id: str) -> bool:
        """Put back a claimed run whose starter died before its supervisor was there: it never ran."""
        with self._write() as db:
            changed = db.execute(
                "UPDATE runs SET state = 'queued', state_detail = 'waiting in the queue (its start was interrupted)' "
                "WHERE id = ? AND state = 'running' AND supervisor_pid IS NULL", (run_id,)).rowcount > 0
            if changed:
                db.execute("UPDATE queue_entries SET assigned_gpus = NULL, claimed_by = NULL WHERE run_id = ?",
                           (run_id,))
            return changed

    def ended_unseen(self) -> list[QueueEntry]:
        """Entries whose run has ended and the keeper has not acted on yet."""
        return [e for e in self.entries(include_finished=True)
                if e.state not in (QUEUED, "running") and not e.seen_end]

    def mark_seen(self, run_id: str) -> None:
        """Record that the keeper has acted on the end of this entry's run."""
        with self._write() as db:
            db.execute("UPDATE queue_entries SET seen_end = 1 WHERE run_id = ?", (run_id,))

    # -- settings -----------------------------------------------------------------------------------------------
    def settings(self) -> QueueSettings:
        rows = {str(r["key"]): json.loads(r["value"])
                for r in self._db.execute("SELECT key, value FROM queue_settings").fetchall()}
        known = QueueSettings.__dataclass_fields__
        return QueueSettings(**{k: v for k, v in rows.items() if k in known})

    def update_settings(self, **values: Any) -> None:
        """Set queue settings by name. Raises ValueError for a name QueueSettings does not have."""
        unknown = set(values) - set(QueueSettings.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown queue settings: {sorted(unknown)}")
        with self._write() as db:
            for key, value in values.items():
                db.execute("INSERT OR REPLACE INTO queue_settings(key, value) VALUES (?, ?)", (key, json.dumps(value)))


def _entry(row: sqlite3.Row) -> QueueEntry:
    assigned = row["assigned_gpus"]
    return QueueEntry(run_id=str(row["run_id"]), name=str(row["name"]), state=str(row["state"]),
                      position=float(row["position"]), held=bool(row["held"]), gpus=str(row["gpus"]),
                      launch=QueuedLaunch.from_json(row["request"]), queued_at=float(row["queued_at"]),
                      assigned_gpus=json.loads(assigned) if assigned else None, seen_end=bool(row["seen_end"]),
                      claimed_by=tuple(json.loads(row["claimed_by"])) if row["claimed_by"] else None)


def _create_time(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # noqa: BLE001
        return None


def process_alive(pid: int | None, started: float | None) -> bool:
    """Is this (pid, start time) still the same living process?"""
    if pid is None:
        return False
    from traindeck.backend.runs.processes import ProcessId

    if started is not None:
        return ProcessId(pid, started).alive()
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True

"""A corrupt or emptied run store, found on open: moved aside (kept, never deleted) and rebuilt from the run folders.

RunStore's open calls in here only when something is off: the file is missing or 0 bytes, or SQLite said it is not
a database / is malformed (SQLITE_NOTADB, SQLITE_CORRUPT). A store that is merely busy ("database is locked") is
never touched. Everything happens under an exclusive lock on `<store>.lock` beside the store, so that two
processes opening a corrupt store at once rebuild it once: the second finds it rebuilt when it gets the lock.

The rebuild writes a new store at a temporary name (one run per folder of `<store's folder>/runs`, from
folder_record; its events from the folder's events.jsonl; its metrics parsed from the last REBUILD_LOG_BYTES of
its output.log with the supervisor's own parsers, then made exact again from the TensorBoard event files the run
wrote where they are still on disk (tensorboard.record_again: the sidecar's reader and pairing); its step timings
from the ranks' step files, steps/rank<R>.jsonl, read as the supervisor reads them (StepFiles); newest run first,
within REBUILD_LOGS_BUDGET_S for all logs, event files and step files; a 'rebuilt' event), then keeps the bad file
under `<store>.corrupt-<time>` (`.emptied-<time>` for an empty one; its -wal and -shm beside it, renamed alike) and
renames the new store into place. Readers never see a half-built store. What the folders do not hold (the queue,
resource samples) starts afresh, and a printed value whose event file is gone stays as printed (rounded); the
moved-aside file still holds what was readable of it. The user is told in one line per rebuilt store, with how
many runs, events, metric points and step timings came back and how many series were made exact: on stderr, and
to whoever listens (on_store_rebuilt).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from traindeck.backend.runs.record.layout import COMMAND


class Refilled(NamedTuple):
    """What a refill put into the new store."""

    runs: int  # runs recorded
    clipped: int  # runs whose output.log was read only in part (its newest REBUILD_LOG_BYTES)
    events: int  # events taken back from the run folders' events files
    metrics: int  # metric points parsed from the output logs
    no_events: int = 0  # runs whose folder has no events file (kept by an older traindeck)
    unread: int = 0  # runs whose output.log was not read: REBUILD_LOGS_BUDGET_S was spent on newer runs' logs
    exact: int = 0  # printed series made exact again from the TensorBoard event files still there
    with_events: int = 0  # runs whose TensorBoard event files were read (tensorboard.record_again)
    cut: int = 0  # runs whose event files or step files were read in part: REBUILD_LOGS_BUDGET_S ran out meanwhile
    steps: int = 0  # step timings (one rank's step each) taken back from the ranks' step files


# Fills a new store at the given path from these run folders, saying why the store is rebuilt in each run's event.
# RunStore gives its own (run_store._refill).
Refill = Callable[[Path, list[Path], str], Refilled]

REBUILD_LOG_BYTES = 16 << 20  # of each output.log, its newest part: 5 to 25 s of parsing (a line of metrics each)
# What parsing every output.log and reading every TensorBoard event file and step file of one rebuild may take
# together: the runs are read newest first, and those of older runs left once it is spent keep their metrics and
# step timings only in their folders (and the moved-aside store).
REBUILD_LOGS_BUDGET_S = 60.0
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_SUPERVISOR_MARKS = ("traindeck.backend.runs.supervisor.process", "_supervise")

_said: list[str] = []
_listeners: list[Callable[[str], None]] = []
_said_lock = threading.Lock()


def is_corrupt(exc: BaseException) -> bool:
    """SQLite says the file is not a database or is malformed (never: locked, busy, read-only, I/O)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in _CORRUPT_CODES


def needs_care(path: Path) -> bool:
    """The store is missing or 0 bytes: created, or found emptied, under the lock (open_missing_or_empty)."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


def on_store_rebuilt(listener: Callable[[str], None]) -> None:
    """Call `listener(line)` for each store this process rebuilds, starting with those rebuilt already."""
    with _said_lock:
        _listeners.append(listener)
        earlier = list(_said)
    for line in earlier:
        listener(line)


def store_rebuilds() -> list[str]:
    """The lines said about stores this process rebuilt, oldest first."""
    with _said_lock:
        return list(_said)


def open_missing_or_empty(path: Path, connect: Callable[[], None], refill: Refill) -> str | None:
    """Create a missing store, or rebuild an emptied one (0 bytes beside run folders), then `connect()` (still
    under the lock, so nobody sees the new file before its tables). The line said about a rebuild, else None."""
    with store_lock(path):
        said = None
        try:
            empty = path.stat().st_size == 0 and not _has_content(Path(f"{path}-wal"))
        except FileNotFoundError:
            # Created private before SQLite opens it: the WAL and shm files inherit this mode.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600))
            empty = False
        if empty:
            folders = _run_folders(path)
            if folders:
                said = _rebuild(path, folders, "emptied", f"was empty (0 bytes) beside {len(folders)} run folders",
                                refill)
        connect()
        return said


def rebuild_corrupt(path: Path, error: sqlite3.DatabaseError, connect: Callable[[], None], refill: Refill
                    ) -> str | None:
    """The store failed to open with `error` (is_corrupt): unless another process rebuilt it meanwhile, move it
    aside and rebuild it; then `connect()`. The line said, or None when it was found sound under the lock."""
    with store_lock(path):
        problem = _check(path)
        said = None
        if problem is not None:
            said = _rebuild(path, _run_folders(path), "corrupt", f"was corrupt ({problem})", refill)
        connect()
        return said


@contextmanager
def store_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `<store>.lock` (waits for it): the only place a store is created or rebuilt."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock; the file stays (removing it would let two holders in)


def _check(path: Path) -> str | None:
    """What SQLite says is wrong with the store (quick_check, about 25 ms per 10 MB), or None when it is sound."""
    if not path.exists():
        return None
    try:
        db = sqlite3.connect(str(path), timeout=15.0)
    except sqlite3.Error as exc:
        return _one_line(exc) if is_corrupt(exc) else None
    try:
        rows = db.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.Error as exc:
        return _one_line(exc) if is_corrupt(exc) else None
    finally:
        db.close()
    result = " ".join(str(rows[0][0]).split()) if rows else "ok"
    return None if result == "ok" else result


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def run_folder(path: Path, run_id: str) -> Path | None:
    """The folder the rebuild of the store at `path` reads the run `run_id` from (`<its folder>/runs/<id>/`), or
    None when there is no such folder (or it is a symbolic link, or the id is not one name)."""
    if not run_id or run_id in (".", "..") or "/" in run_id or "\0" in run_id:
        return None
    folder = path.parent / "runs" / run_id
    return folder if folder.is_dir() and not folder.is_symlink() else None


def _run_folders(path: Path) -> list[Path]:
    """The run folders beside the store (`<its folder>/runs/<id>/` holding command.json), oldest first."""
    root = path.parent / "runs"
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if entry.is_dir() and not entry.is_symlink() and (entry / COMMAND).is_file()]


def _rebuild(path: Path, folders: list[Path], kind: str, why: str, refill: Refill) -> str:
    started = time.monotonic()
    temp = path.with_name(f"{path.name}.rebuilding-{os.getpid()}")
    _remove(temp)
    done = refill(temp, folders, why)
    aside = _aside_name(path, kind)
    _move_aside(path, aside)
    os.replace(temp, path)
    took = time.monotonic() - started
    timings = f", {_count(done.steps, 'step timing')}" if done.steps else ""
    line = (f"the run store {path} {why}: moved aside to {aside}; rebuilt {_count(done.runs, 'run')} from their "
            f"folders ({_count(done.events, 'event')}, {_count(done.metrics, 'metric point')}{timings}) in "
            f"{took:.1f} s")
    if done.clipped:
        line += (f" (metrics of {_count(done.clipped, 'run')} from the last {REBUILD_LOG_BYTES >> 20} MiB of "
                 "output.log only)")
    if done.unread:
        line += (f" (metrics and step timings of {_count(done.unread, 'older run')} not read from their folders: the "
                 f"{REBUILD_LOGS_BUDGET_S:g} s for reading logs went to newer runs)")
    if done.with_events:
        line += f" ({done.exact} series made exact from the TensorBoard event files of {_count(done.with_events, 'run')})"
    if done.cut:
        line += (f" (the event files or step files of {_count(done.cut, 'run')} read in part: the "
                 f"{REBUILD_LOGS_BUDGET_S:g} s for reading logs ran out)")
    if done.no_events:
        line += f" (events of {_count(done.no_events, 'run')} only in the store moved aside)"
    line += ("; the queue and resource samples start afresh, and metric values stay as printed where no "
             "TensorBoard event file is left")
    _say(line)
    return line


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _aside_name(path: Path, kind: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        aside = path.with_name(f"{path.name}.{kind}-{stamp}" + (f"-{n}" if n else ""))
        if not any(os.path.lexists(f"{aside}{suffix}") for suffix in ("", "-wal", "-shm")):
            return aside
    raise FileExistsError(f"no free name to keep {path} under")


def _move_aside(path: Path, aside: Path) -> None:
    """The bad store under its new name, its -wal and -shm alike; `path` itself stays until the new store replaces
    it (a hard link, where the filesystem has them), so an opener meanwhile waits on the lock rather than creating
    an empty store."""
    try:
        os.link(path, aside)
    except FileNotFoundError:
        pass
    except OSError:
        os.rename(path, aside)
    for suffix in ("-wal", "-shm"):
        try:
            os.rename(f"{path}{suffix}", f"{aside}{suffix}")
        except FileNotFoundError:
            pass


def _remove(temp: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(f"{temp}{suffix}")
        except FileNotFoundError:
            pass


def living_supervisors() -> dict[str, tuple[int, float]]:
    """{run folder: (pid, create time)} of every running supervisor (its command line ends with its folder)."""
    import psutil

    found: dict[str, tuple[int, float]] = {}
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = proc.info.get("cmdline") or []
        if len(cmdline) >= 2 and any(mark in cmdline[:-1] for mark in _SUPERVISOR_MARKS):
            found.setdefault(cmdline[-1], (proc.pid, float(proc.info["create_time"])))
    return found


def log_metrics(log: Path, start_t: float, end_t: float
                ) -> tuple[list[tuple[str, int | None, float, float, int | None]], dict[str, Any] | None, bool]:
    """metrics_from_log() of a run's output.log, and whether only its newest part was read ([], None, False when
    there is no log)."""
    try:
        size = log.stat().st_size
    except OSError:
        return [], None, False
    rows, progress = metrics_from_log(log, start_t, end_t)
    return rows, progress, size > REBUILD_LOG_BYTES


def metrics_from_log(log: Path, start_t: float, end_t: float, max_bytes: int = REBUILD_LOG_BYTES
                     ) -> tuple[list[tuple[str, int | None, float, float, int | None]], dict[str, Any] | None]:
    """[(name, step, t, value, rank)] and the last progress of `log`'s newest `max_bytes`, parsed as the
    supervisor parses a run's output. The log holds no times: each row gets one between `start_t` and `end_t`
    in proportion to where its line is in the file."""
    from traindeck.backend.logparse import LineAssembler, Metric, OutputParser
    from traindeck.backend.runs.record.log_follow import run_hosts

    assembler = LineAssembler(hosts=run_hosts(log.parent))
    parser = OutputParser()
    rows: list[tuple[str, int | None, float, float, int | None]] = []
    reported: set[str] = set()
    span = max(0.0, end_t - start_t)
    with open(log, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        position = max(0, size - max_bytes)
        handle.seek(position)
        if position:
            position += len(handle.readline())  # from the first whole line
        while True:
            chunk = handle.read(1 << 20)
            pieces = chunk.splitlines(keepends=True) if chunk else [b""]
            for piece in pieces:
                position += len(piece)
                t = start_t + span * (position / size if size else 1.0)
                lines = assembler.feed(piece) if chunk else assembler.flush()
                items = [item for line in lines for item in parser.feed(line, now=t)]
                if not chunk:
                    items += parser.flush()
                for item in items:
                    if not isinstance(item, Metric):
                        continue
                    if item.source == "report":  # a series the script reports exactly is not also taken from lines
                        reported.add(item.name)
                    elif item.name in reported:
                        continue
                    rows.append((item.name, item.step, t, float(item.value), item.rank))
            if not chunk:
                break
    main = parser.progress
    progress = None if main is None else {"current": main.current, "total": main.total, "rate": main.rate,
                                          "eta_s": main.eta_s, "unit": main.unit, "source": main.source,
                                          "updated": end_t}
    return rows, progress


def _say(line: str) -> None:
    with _said_lock:
        _said.append(line)
        listeners = list(_listeners)
    print(f"traindeck: {line}", file=sys.stderr, flush=True)
    for listener in listeners:
        try:
            listener(line)
        except Exception:  # noqa: BLE001 - a listener (the dashboard's status bar) must not undo the rebuild
            pass

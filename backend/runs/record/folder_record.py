"""A run's record kept in its own folder, so that the run survives the loss of the run store.

    run.json    what the store's row says of the run at its start: name, preset, script, created_at
    end.json    how it ended: state, exit code, ended_at, diagnosis, state_detail (written by the supervisor)
    cgroup.json the cgroup v2 directory the run's processes live in, where it has one (supervisor/run_cgroup.py)
    events.jsonl every event the run store is given about the run, one JSON line each ({t, kind, text}), appended
                by whichever process records it (RunStore.add_event); at most EVENTS_LIMIT bytes

run.json, end.json and cgroup.json are written atomically (a reader sees the whole file or none); events.jsonl is
appended a whole line per write, never through a symbolic link, and read back bounded (a torn last line is
skipped). `record_fields` puts a run's record together from these, command.json, request.json and evidence.json,
and `read_events` its events: what a rebuilt run store holds of each run. Below the run store (which rebuilds
itself from here), so records are given as RunRecord's fields.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text, open_private_append, read_json_file
from traindeck.backend.runs.record.layout import COMMAND

# A run's final states: defined here, below the run store, which takes them from this module.
FINAL_STATES = frozenset({"succeeded", "failed", "stopped", "lost"})

RUN_FILE = "run.json"
END_FILE = "end.json"
REQUEST_FILE = "request.json"  # written by control/resume.py
EVIDENCE_FILE = "evidence.json"
CGROUP_FILE = "cgroup.json"
EVENTS_FILE = "events.jsonl"
# A run's events file stops growing here (about 5,000 events; a run has tens): what is read back stays small.
EVENTS_LIMIT = 1 << 20


def write_identity(run_dir: Path | str, run_id: str, *, name: str, preset: str | None, script: str,
                   created_at: float) -> None:
    """run.json: the run's name, preset, script and creation time (raises OSError when it cannot be written)."""
    data = {"id": run_id, "name": name, "preset": preset, "script": script, "created_at": created_at}
    atomic_write_text(Path(run_dir) / RUN_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


def write_end(run_dir: Path | str, run_id: str, state: str, *, exit_code: int | None, ended_at: float,
              diagnosis: dict[str, Any] | None, state_detail: str) -> None:
    """end.json: the run's final state as the store gets it (raises OSError when it cannot be written)."""
    if state not in FINAL_STATES:
        raise ValueError(f"not a final state: {state}")
    data = {"id": run_id, "state": state, "exit_code": exit_code, "ended_at": ended_at, "diagnosis": diagnosis,
            "state_detail": state_detail}
    atomic_write_text(Path(run_dir) / END_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_end(run_dir: Path | str, run_id: str | None = None) -> dict[str, Any] | None:
    """end.json's fields ({state, exit_code, ended_at, diagnosis, state_detail}), or None when the run has none
    (still running, ended before traindeck kept it, the file is unreadable, or it names another run than
    `run_id`)."""
    data = _json(Path(run_dir) / END_FILE)
    if not data or data.get("state") not in FINAL_STATES or run_id is not None and data.get("id") != run_id:
        return None
    try:
        ended_at = float(data["ended_at"])
    except (KeyError, TypeError, ValueError):
        return None
    exit_code = data.get("exit_code")
    diagnosis = data.get("diagnosis")
    return {"state": str(data["state"]), "exit_code": exit_code if isinstance(exit_code, int) else None,
            "ended_at": ended_at, "diagnosis": diagnosis if isinstance(diagnosis, dict) else None,
            "state_detail": str(data.get("state_detail") or "")}


def write_cgroup(run_dir: Path | str, run_id: str, path: Path | str) -> None:
    """cgroup.json: the run's cgroup directory (raises OSError when it cannot be written)."""
    data = {"id": run_id, "path": str(path)}
    atomic_write_text(Path(run_dir) / CGROUP_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_cgroup(run_dir: Path | str, run_id: str) -> str | None:
    """The cgroup directory cgroup.json names for `run_id`, or None (none recorded, unreadable, another run's)."""
    data = _json(Path(run_dir) / CGROUP_FILE)
    if not data or data.get("id") != run_id or not isinstance(data.get("path"), str):
        return None
    return str(data["path"])


def append_event(run_dir: Path | str, t: float, kind: str, text: str) -> bool:
    """Add one event to the run folder's events.jsonl in one write; False when the file is full (EVENTS_LIMIT).
    Raises OSError when it cannot be written (no such folder, a full disk, a symbolic link there)."""
    line = json.dumps({"t": t, "kind": kind, "text": text}, ensure_ascii=False) + "\n"
    fd = open_private_append(Path(run_dir) / EVENTS_FILE)
    try:
        if os.fstat(fd).st_size >= EVENTS_LIMIT:
            return False
        os.write(fd, line.encode("utf-8", "replace"))
        return True
    finally:
        os.close(fd)


def read_events(run_dir: Path | str) -> list[tuple[float, str, str]] | None:
    """[(t, kind, text)] from the run folder's events.jsonl, oldest first (its first EVENTS_LIMIT bytes and one line
    beyond, lines that are not an event skipped), or None when it has none (or it is a symbolic link)."""
    try:
        fd = os.open(Path(run_dir) / EVENTS_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, EVENTS_LIMIT + (64 << 10))
    except OSError:
        return None
    finally:
        os.close(fd)
    events: list[tuple[float, str, str]] = []
    for raw in data.splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        t, kind, text = item.get("t"), item.get("kind"), item.get("text")
        if isinstance(t, int | float) and not isinstance(t, bool) and isinstance(kind, str) and isinstance(text, str):
            events.append((float(t), kind, text))
    return events


def _end_from_evidence(folder: Path) -> dict[str, Any] | None:
    """The end of a run that has evidence.json but no end.json (ended before traindeck wrote end.json): the state
    follows the diagnosis' kind, the time is the file's."""
    path = folder / EVIDENCE_FILE
    data = _json(path) or {}
    diagnosis = data.get("diagnosis")
    if not isinstance(diagnosis, dict) or not isinstance(diagnosis.get("kind"), str):
        return None
    kind = diagnosis["kind"]
    state = kind if kind in ("succeeded", "stopped", "lost") else "failed"
    evidence = data.get("evidence")
    code = evidence.get("launcher_returncode") if isinstance(evidence, dict) else None
    try:
        ended_at = path.stat().st_mtime
    except OSError:
        return None
    summary = str(diagnosis.get("summary") or "")
    return {"state": state, "exit_code": code if isinstance(code, int) else None, "ended_at": ended_at,
            "diagnosis": None if state == "succeeded" else diagnosis,
            "state_detail": summary if state == "failed" else ""}


def record_fields(folder: Path) -> dict[str, Any] | None:
    """RunRecord's fields for the run in `folder` as far as its files tell, or None when it holds no run (no
    readable command.json).

    A run without an end (end.json, else evidence.json) is 'running': whoever reconciles the store marks it lost
    unless its supervisor still lives."""
    command = _json(folder / COMMAND)
    if not command:
        return None
    identity = _json(folder / RUN_FILE) or {}
    request = _json(folder / REQUEST_FILE) or {}
    argv = [str(a) for a in command.get("argv") or [] if isinstance(a, str | int | float)]
    script = str(identity.get("script") or request.get("script") or _script_of(argv))
    created_at = _number(identity.get("created_at")) or _time_of_id(folder.name) or _mtime(folder / COMMAND)
    fields: dict[str, Any] = {
        "id": folder.name, "run_dir": str(folder), "created_at": created_at,
        "name": str(identity.get("name") or (Path(script).stem if script else folder.name)),
        "preset": _text(identity.get("preset")) or _text(request.get("preset_name")),
        "launcher": str(command.get("launcher") or "python"), "script": script, "argv": argv,
        "cwd": str(command.get("cwd") or ""),
        "started_at": created_at if (folder / "output.log").exists() else None, "state": "running"}
    end = read_end(folder, folder.name) or _end_from_evidence(folder)
    if end is not None:
        fields.update(end)
    return fields


def _json(path: Path) -> dict[str, Any] | None:
    data = read_json_file(path)
    return data if isinstance(data, dict) else None


def _script_of(argv: list[str]) -> str:
    return next((a for a in argv[1:] if a.endswith(".py")), argv[-1] if argv else "")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _time_of_id(run_id: str) -> float | None:
    """The creation time a run id carries (local time, to the second: 20261121-171503-ab12)."""
    try:
        return time.mktime(time.strptime(run_id[:15], "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()

"""Alerts: the user's own command, run when a run ends, stalls or its loss becomes NaN (and whether the dashboard
shows desktop notifications for the same events: `desktop` in the same file).

`traindeck notify --command CMD...` saves an argv (never a shell line) in `notify.json` in the config dir. The
supervisor (and whoever marks a run lost) calls `announce`; the command gets the event in its environment:
TRAINDECK_EVENT (succeeded|failed|stopped|lost|stalled|nan), TRAINDECK_RUN_ID, TRAINDECK_RUN_NAME,
TRAINDECK_DIAGNOSIS (first line, secrets masked). It runs on a thread of its own, in its own session, with a time limit, and
what happened is logged to `notify.log` in the data dir: a failing or hanging command never touches the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from traindeck.backend.core.fileio import atomic_write_text, open_private_append
from traindeck.backend.core.masking import mask_text
from traindeck.backend.core.paths import config_dir, data_dir, ensure_private_dir

EVENTS = ("succeeded", "failed", "stopped", "lost", "stalled", "nan", "low_disk")
DEFAULT_TIME_LIMIT_S = 30.0
_threads: list[threading.Thread] = []


def settings_path() -> Path:
    return config_dir() / "notify.json"


def log_path() -> Path:
    return data_dir() / "notify.log"


def notify_command() -> list[str] | None:
    """The saved argv, or None when alerts are off (or the file is unreadable: alerts are never worth a crash)."""
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    command = data.get("command") if isinstance(data, dict) else None
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return list(command)
    return None


def time_limit_s() -> float:
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
        return float(data.get("time_limit_s", DEFAULT_TIME_LIMIT_S))
    except (OSError, ValueError, TypeError, AttributeError):
        return DEFAULT_TIME_LIMIT_S


def _saved() -> dict[str, object]:
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(**values: object) -> None:
    ensure_private_dir(settings_path().parent)
    data = _saved()
    data.update(values)  # each setting saved keeps the others
    atomic_write_text(settings_path(), json.dumps(data, indent=2) + "\n")


def save_command(command: Sequence[str] | None, time_limit: float = DEFAULT_TIME_LIMIT_S) -> None:
    """Set (or with None, turn off) the notify command."""
    _save(command=list(command) if command else None, time_limit_s=time_limit)


def desktop_notifications() -> bool:
    """Whether the dashboard shows a desktop notification for each event while a window is open (default on)."""
    return _saved().get("desktop", True) is not False


def save_desktop_notifications(on: bool) -> None:
    _save(desktop=bool(on))


def run_test_alert(command: Sequence[str] | None = None) -> str:
    """Run the notify command (the saved one, or `command`) once now with a test event; what happened, in words
    (`traindeck notify --test` and the Launch page's Test button)."""
    thread = announce("succeeded", "test", "traindeck notify --test", "a test of your notify command", command)
    if thread is None:
        return ""
    thread.join()
    return thread.name.partition(": ")[2]


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def announce(event: str, run_id: str, run_name: str, diagnosis: str | None = None,
             command: Sequence[str] | None = None) -> threading.Thread | None:
    """Run the notify command for one event, in the background; returns its thread (None: alerts are off)."""
    argv = list(command) if command is not None else notify_command()
    if not argv:
        return None
    env = dict(os.environ)
    env.update({"TRAINDECK_EVENT": event, "TRAINDECK_RUN_ID": run_id, "TRAINDECK_RUN_NAME": run_name,
                "TRAINDECK_DIAGNOSIS": mask_text(first_line(diagnosis))})
    env.pop("TRAINDECK_RUN_DIR", None)
    thread = threading.Thread(target=_run, args=(argv, env, time_limit_s(), event, run_id),
                              name=f"notify-{event}", daemon=True)
    thread.start()
    _threads.append(thread)
    return thread


def wait_all(timeout_s: float | None = None) -> None:
    """Wait for alerts still running (each is time-limited): a supervisor calls this before it exits."""
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else time_limit_s() + 5.0)
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


def _run(argv: list[str], env: dict[str, str], limit: float, event: str, run_id: str) -> str:
    """Run the command within `limit` seconds in all: its stderr goes to a private unlinked file, not a pipe, so a
    process it left behind holding stderr (a daemon in a session of its own) cannot keep the call waiting."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:  # created 0600 and unlinked at once
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            outcome = f"could not start: {exc.strerror or exc}"
        else:
            try:
                proc.wait(timeout=limit)
                outcome = f"exit code {proc.returncode}"
                if proc.returncode:
                    err.seek(0)
                    message = first_line(err.read(4096).decode(errors="replace"))[:200]
                    outcome += f": {message}" if message else ""
            except subprocess.TimeoutExpired:
                _end_command(proc)
                outcome = f"killed after {limit:g} s (time limit)"
    _log(f"{event} run {run_id}: {argv[0]}: {outcome} ({time.monotonic() - started:.2f} s)")
    threading.current_thread().name = f"notify-{event}: {outcome}"  # what `notify --test` reports
    return outcome


def _end_command(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its own session) and every process it started, wherever they went.

    The group is stopped first and its descendants are listed until the list holds still, so a child that was
    about to fork or to leave for a session of its own (setsid) is caught before anything is killed."""
    try:
        os.killpg(proc.pid, signal.SIGSTOP)
    except OSError:
        pass
    found: dict[int, psutil.Process] = {}
    for _ in range(5):
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            break
        new = [child for child in descendants if child.pid not in found]
        if not new:
            break
        for child in new:
            found[child.pid] = child
            try:
                child.suspend()
            except psutil.Error:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for child in found.values():
        try:
            child.kill()
        except psutil.Error:
            pass
    proc.wait()


def _log(text: str) -> None:
    try:
        ensure_private_dir(log_path().parent)
        fd = open_private_append(log_path())  # a symbolic link there is refused (an OSError): nothing is logged
        try:
            os.write(fd, f"{time.strftime('%Y-%m-%d %H:%M:%S')} {mask_text(text)}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass

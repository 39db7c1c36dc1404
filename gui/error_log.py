"""What the dashboard does with an error it did not expect: the traceback goes to a private, size-bounded log file
(dashboard.log in traindeck's data folder) and the user gets one line naming the error and that file, never the
traceback itself. Installed as sys.excepthook by the app (exceptions raised in Qt slots reach it), and used for a
background job's failure that carries no message of its own."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

LOG = "dashboard.log"
MAX_BYTES = 1 << 20  # then the file starts again (the previous one kept as dashboard.log.1)


def log_path() -> Path:
    from traindeck.backend.core import paths

    return paths.data_dir() / LOG


def record(exception: BaseException, where: str = "") -> Path | None:
    """Append the exception's traceback to the log; the log's path, or None when it could not be written."""
    try:
        from traindeck.backend.core import paths

        path = paths.ensure_private_dir(paths.data_dir()) / LOG
        if path.exists() and path.stat().st_size > MAX_BYTES:
            os.replace(path, path.with_name(LOG + ".1"))
        text = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__, limit=20))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {where}\n{text}\n")
        return path
    except OSError:
        return None


def one_line(exception: BaseException, where: str = "") -> str:
    """What the user reads: the error in one line and where its details are (never a traceback)."""
    message = " ".join(str(exception).split())[:300]
    kind = type(exception).__name__
    path = record(exception, where)
    said = f"{kind}: {message}" if message else f"an unexpected {kind}"
    return f"{said} (details in {path})" if path is not None else said


def install(show: Callable[[str], None]) -> None:
    """sys.excepthook for the dashboard: log the error and show its one line with `show`."""
    def hook(kind: type[BaseException], exception: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, exception, tb)
            return
        exception.__traceback__ = tb
        line = one_line(exception, "unexpected error in the dashboard")
        print(f"traindeck: {line}", file=sys.stderr)
        try:
            show(f"Something went wrong: {line}")
        except Exception:  # noqa: BLE001 - the hook must never raise
            pass

    sys.excepthook = hook

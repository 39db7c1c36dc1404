"""Crash reports: an exception nobody expected becomes one line for the user and a file for the bug report.

The file goes to `<data dir>/crash-reports/` (a private directory, the file itself 0600): the traceback, the
command line with secret-looking values masked, and the versions. The terminal only gets one line naming it, so a
user never sees a traceback and a maintainer still gets everything needed.
"""

from __future__ import annotations

import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path


def crash_dir() -> Path:
    from traindeck.backend.core import paths

    return paths.data_dir() / "crash-reports"


def write_crash_report(exc: BaseException, argv: Sequence[str] = (), context: str = "") -> Path | None:
    """Write the report; its path, or None when even that fails (a full disk must not raise a second error)."""
    from traindeck import __version__
    from traindeck.backend.core import paths

    try:
        from traindeck.backend.runs.record.layout import mask_argv

        shown = mask_argv(list(argv))
    except Exception:  # the masking itself must not hide the crash being reported
        shown = ["(command line not recorded)"]
    lines = [
        f"traindeck {__version__} crash report",
        f"time: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
        f"command: traindeck {' '.join(shown)}",
        f"python: {sys.version.split()[0]} ({sys.executable}); platform: {platform.platform()}",
    ]
    if context:
        lines.append(f"while: {context}")
    lines += ["", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    try:
        directory = paths.ensure_private_dir(crash_dir())
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = directory / f"crash-{stamp}-{os.getpid()}-{time.monotonic_ns() % 1_000_000:06d}.txt"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except Exception:
        return None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            handle.write("\n".join(lines))
        return target
    except Exception:  # a full disk: no empty report is left behind
        try:
            target.unlink()
        except OSError:
            pass
        return None


def one_line(exc: BaseException, report: Path | None) -> str:
    """What the user sees: the kind of failure, and where the details are."""
    what = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(what) > 160:
        what = what[:157] + "..."
    name = type(exc).__name__
    detail = f"{name}: {what}" if what else name
    where = f"details in {report} (please attach it to a bug report)" if report else "no crash report could be written"
    return f"internal error ({detail}); {where}"

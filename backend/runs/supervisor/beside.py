"""Starting a small process beside a run's supervisor (the sidecar, the node watch): `python -m MODULE RUN_DIR STORE`,
detached in a session of its own, its output appended to a private log in the run directory, never through a
symbolic link.

It carries no TRAINDECK_RUN_ID marker, so stopping the run never ends it before its last read; it ends itself when
the run is over. Reaped by a thread, so a long-lived dashboard that launched it collects no zombie.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from traindeck.backend.core.fileio import open_private_append

logger = logging.getLogger(__name__)


def start_beside(module: str, run_dir: Path, store_path: Path, log_name: str) -> int | None:
    """The process's pid, or None when it could not start (a frozen app has no `python -m`; the run goes on)."""
    if getattr(sys, "frozen", False):
        return None
    from traindeck.backend.runs import processes as procs

    env = {k: v for k, v in os.environ.items() if k != procs.MARKER}
    try:
        # A symbolic link at the log's name is refused (SymlinkRefused): the process does not start, the run goes on.
        log = open_private_append(Path(run_dir) / log_name)
    except OSError as exc:
        logger.warning("%s does not start: %s", module.rsplit(".", 1)[-1], exc)
        return None
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, str(run_dir), str(store_path)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=run_dir, env=env,
                                start_new_session=True)
    except OSError:
        return None
    finally:
        os.close(log)
    threading.Thread(target=proc.wait, name=f"{module.rsplit('.', 1)[-1]}-reaper", daemon=True).start()
    return proc.pid

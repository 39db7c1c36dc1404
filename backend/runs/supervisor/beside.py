"""Starting a small process beside a run's supervisor (the sidecar, the node watch): `python -m MODULE RUN_DIR STORE`,
detached in a session of its own, its output appended to a private log in the run directory.

It carries no TRAINDECK_RUN_ID marker, so stopping the run never ends it before its last read; it ends itself when
the run is over. Reaped by a thread, so a long-lived dashboard that launched it collects no zombie.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path


def start_beside(module: str, run_dir: Path, store_path: Path, log_name: str) -> int | None:
    """The process's pid, or None when it could not start (a frozen app has no `python -m`; the run goes on)."""
    if getattr(sys, "frozen", False):
        return None
    from traindeck.backend.runs import processes as procs

    env = {k: v for k, v in os.environ.items() if k != procs.MARKER}
    try:
        with open(Path(run_dir) / log_name, "ab") as log:
            os.fchmod(log.fileno(), 0o600)
            proc = subprocess.Popen([sys.executable, "-m", module, str(run_dir), str(store_path)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=run_dir, env=env,
                                    start_new_session=True)
    except OSError:
        return None
    threading.Thread(target=proc.wait, name=f"{module.rsplit('.', 1)[-1]}-reaper", daemon=True).start()
    return proc.pid

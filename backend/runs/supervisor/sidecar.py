"""The sidecar: one small detached process per run, `python -m traindeck.backend.runs.supervisor.sidecar RUN_DIR STORE`,
started by the launch beside the supervisor. It reads what the run leaves behind without being part of it:

- provenance (git, pip freeze, versions, host) once, in a thread: the launch returns at once;
- the run's TensorBoard event files every POLL_S, into the run store as metric series (and as the exact values of
  the printed ones they match), until the run has ended (then one last read).

It carries no TRAINDECK_RUN_ID marker, so stopping the run never ends it before its last read; it ends itself when
the run is over (or its supervisor is gone). Its messages go to sidecar.log.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.runs.supervisor.diary import log_to_stderr

LOG = "sidecar.log"
POLL_S = 2.0
# The sidecar's work (importing torch to ask versions, pip freeze, TensorBoard) is a record, not the run: at a lower
# priority, so that on a small machine it never takes a core from the job or its supervisor (unniced, its torch
# import alone took ~4 s of CPU during the first seconds of a run). Its children (the probes) inherit it.
NICE = 10
PROVENANCE_WAIT_S = 120.0


# The sidecar's diary: its stderr is sidecar.log in the run directory, set up in main() as "HH:MM:SS message".
logger = logging.getLogger("traindeck.sidecar")


def start_sidecar(run_dir: Path, store_path: Path) -> int | None:
    """Start the sidecar for a run just started; its pid, or None when it could not start (the run goes on)."""
    from traindeck.backend.runs.supervisor.beside import start_beside

    return start_beside("traindeck.backend.runs.supervisor.sidecar", run_dir, store_path, LOG)


def _provenance(run_dir: Path) -> None:
    try:
        from traindeck.backend.runs.record.provenance import capture

        data = capture(run_dir)
        logger.info("provenance captured in %s s", data.get("took_s"))
    except Exception:  # noqa: BLE001 - provenance is a record, never a reason to disturb the run
        logger.exception("provenance failed:")


def follow_tensorboard(run_dir: Path, store: RunStore, run_id: str, poll_s: float = POLL_S) -> int:
    """Read the run's event files until the run ends; returns the rows written."""
    from traindeck.backend.runs.record import tensorboard
    from traindeck.backend.runs.supervisor.liveness import supervisor_alive

    if not tensorboard.available():
        logger.info("tensorboard is not installed in traindeck's environment: event files are not read")
        return 0
    command = json.loads((run_dir / "command.json").read_text(encoding="utf-8"))
    record = store.get_run(run_id)
    if record is None:
        return 0
    reader = tensorboard.TensorBoardReader(tensorboard.default_roots(list(command.get("argv") or []),
                                                                     str(command.get("cwd") or ".")),
                                           since=record.created_at - 1.0)
    recorder = tensorboard.TensorBoardRecorder(store, run_id, reader)
    while True:
        record = store.get_run(run_id)
        # A run whose supervisor vanished stays "running" until a reader marks it lost: do not wait for that.
        finished = record is None or record.finished or not supervisor_alive(record)
        recorder.poll(final=finished)
        if finished:
            if recorder.revised:
                logger.info("%s printed values made exact from TensorBoard's", recorder.revised)
            return recorder.written
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m traindeck.backend.runs.supervisor.sidecar RUN_DIR STORE", file=sys.stderr)
        return 2
    log_to_stderr(logger)
    try:
        os.nice(NICE)
    except OSError as exc:
        logger.warning("could not lower the sidecar's priority: %s", exc)
    run_dir = Path(args[0])
    thread = threading.Thread(target=_provenance, args=(run_dir,), name="provenance", daemon=True)
    thread.start()
    try:
        with RunStore(args[1]) as store:
            written = follow_tensorboard(run_dir, store, run_dir.name)
            if written:
                logger.info("%s TensorBoard values recorded", written)
    except Exception:  # noqa: BLE001
        logger.exception("TensorBoard reading failed:")
    thread.join(PROVENANCE_WAIT_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())

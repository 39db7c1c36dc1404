"""The runs of another machine, read through its traindeck's --json outputs over a Session: the "remote" source of
runs beside the local run store (backend/runs/control/view.py), with the same answers (RunRecord, RunView) so a page
that shows local runs shows remote ones unchanged.

What differs, said where it shows: a remote run's log is mirrored into a local file (`logs ID --follow --raw`
streamed over the connection) and its record's run_dir is that mirror's directory, so the console reads it like a
local log; its charts are not read over SSH (the latest metric values are), and events are not either. The run's
batch shape comes with its record (`runs show --json`), so its throughput is worked out as a local run's is.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import open_private
from traindeck.backend.core.paths import ensure_private_dir
from traindeck.backend.remote.session import Session, end_stream
from traindeck.backend.remote.ssh import RemoteError
from traindeck.backend.runs.control.view import RunView
from traindeck.backend.runs.record.run_store import RunRecord
from traindeck.backend.runs.record.series import BoundedSeries
from traindeck.backend.runs.record.throughput import shape_from_json

MIRROR_END_WAIT_S = 20.0
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]+$")


class RemoteRuns:
    """One remote machine's runs: list, one run's view (its log mirrored), stop, launch, resources, its queue."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.host = session.target.host
        self._lock = threading.Lock()
        self._mirror: tuple[str, Any, Any] | None = None  # (run id, ssh process, file) of the one mirrored log

    # ---- what the pages call (the names and answers of backend/runs/control/view.py's) -------------------------------
    def runs_for_list(self, limit: int = 50, mark_lost: bool = True) -> list[RunRecord]:
        # (the remote traindeck marks its lost runs itself on every `runs` command: mark_lost has no say here)
        records = [self._record(item) for item in self.session.json(["runs", "list", "--json"])]
        running = [r for r in records if r.state == "running"]
        others = [r for r in records if r.state != "running"]
        return running + others[: max(0, limit - len(running))]

    def read_view(self, run_id: str, *, after_event: int = 0, metric_mark: int | None = None,
                  whole_series: Any = (), check_remaining: bool = False,
                  revision_mark: int | None = None) -> RunView | None:
        # (`runs show --json` gives every latest value, revised ones included: no revision to follow here)
        _check_id(run_id)
        result = self.session.call(["runs", "show", run_id, "--json"], check=False)
        if result.returncode == 2:  # the remote's "no run ..." (bad input): an unknown run, as the store says
            return None
        if result.returncode != 0:
            raise self.session.failure(result.returncode, result.stderr.decode(errors="replace"))
        import json

        data = json.loads(result.stdout)
        record = self._record(data)
        self._mirror_log(record.id, Path(record.run_dir))
        if record.finished:
            # `logs --follow` ends by itself once the run has ended: let the mirror hold the whole log before the
            # view says "ended" (the console then reads the file to its end once and stops).
            self._mirror_complete(MIRROR_END_WAIT_S)
        remaining = None
        if check_remaining and record.finished:
            check = data.get("end_check") or {}
            remaining = ([int(p["pid"]) for p in data.get("pids") or [] if p.get("returncode") is None]
                         if check.get("kind") == "leftovers" else [])
        # Charts are not read over SSH: an empty series for each asked for, so the view does not ask again.
        # The batch shape on a first read, as the run store's read_view gives it (the mirror holds no config).
        shape = shape_from_json(data.get("batch_shape")) if metric_mark is None else None
        return RunView(record=record, metrics=dict(data.get("metrics") or {}), metric_mark=metric_mark or 0,
                       whole={name: BoundedSeries() for name in whole_series}, remaining=remaining, shape=shape)

    def request_stop(self, run_id: str, grace_s: float = 10.0) -> list[str]:
        _check_id(run_id)
        return self._lines(["stop", run_id, "--grace", f"{grace_s:g}"])

    def force_stop(self, run_id: str) -> list[str]:
        return self.request_stop(run_id, 0.0)

    def launch(self, args: list[str]) -> str:
        """`traindeck run --detach ARGS` there; the new run's id (the last line it prints)."""
        out = self.session.call(["run", "--detach", *args]).stdout.decode(errors="replace").split()
        if not out:
            raise RemoteError(f"{self.host}: run --detach printed no run id", 1)
        return out[-1]

    def resources(self) -> dict[str, Any]:
        """One sample of the remote machine's CPUs, memory and GPUs (`monitor --once --json`)."""
        line = self.session.call(["monitor", "--once", "--json"]).stdout.decode(errors="replace").strip()
        import json

        return dict(json.loads(line.splitlines()[-1])) if line else {}

    # ---- the queue there (the names and answers of backend/queue/listing.py's) ----------------------------------------
    def queue_state(self) -> dict[str, Any]:
        """The remote machine's queue at one moment (`queue list --all --json`), as queue_state() gives this one's."""
        data = self.session.json(["queue", "list", "--all", "--json"])
        return {"paused": bool(data.get("paused")), "pause_reason": data.get("pause_reason") or "",
                "max_running": data.get("max_running"), "stop_on_failure": bool(data.get("stop_on_failure")),
                "keeper_running": data.get("keeper_pid") is not None, "runs": list(data.get("runs") or [])[-200:]}

    def queue_action(self, action: str, run_id: str | None = None, position: int | None = None) -> str:
        """`queue ACTION [ID [POSITION]]` there; its one line to show. Raises ValueError with the remote's reason
        when it cannot be done (as queue_action() does here), RemoteError when the machine was not reached."""
        args = ["queue", action]
        if run_id is not None:
            _check_id(run_id)
            args.append(run_id)
        if position is not None:
            args.append(str(int(position)))
        result = self.session.call(args, check=False)
        said = [ln for ln in result.stdout.decode(errors="replace").splitlines() if ln.strip()]
        if result.returncode in (1, 2):  # the remote traindeck's own refusal (a UserError; a start that failed)
            errors = [ln for ln in result.stderr.decode(errors="replace").splitlines() if ln.strip()]
            line = (errors or said or [f"queue {action} failed"])[-1].removeprefix("traindeck: ")
            raise ValueError(f"{self.host}: {line}")
        if result.returncode != 0:
            raise self.session.failure(result.returncode, result.stderr.decode(errors="replace"))
        return f"{self.host}: {said[-1] if said else action}"

    def close(self) -> None:
        self._stop_mirror()
        self.session.close()

    # ---- the mirrored log -----------------------------------------------------------------------------------------
    def mirror_dir(self, run_id: str) -> Path:
        return self.session.dir / "runs" / run_id

    def _mirror_log(self, run_id: str, run_dir: Path) -> None:
        with self._lock:
            if self._mirror is not None and self._mirror[0] == run_id:
                return
        self._stop_mirror()  # one run is watched at a time: one log followed
        ensure_private_dir(run_dir)
        fd = open_private(run_dir / "output.log", append=False)  # a link planted there is refused, not followed
        os.ftruncate(fd, 0)  # the remote log is streamed again from its start
        out = os.fdopen(fd, "wb")  # closed by _stop_mirror
        proc = self.session.stream(["logs", run_id, "--follow", "--raw"], out)
        with self._lock:
            self._mirror = (run_id, proc, out)

    def _mirror_complete(self, timeout: float) -> None:
        with self._lock:
            mirror = self._mirror
        if mirror is not None:
            try:
                mirror[1].wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            mirror[2].flush()

    def _stop_mirror(self) -> None:
        with self._lock:
            mirror, self._mirror = self._mirror, None
        if mirror is not None:
            end_stream(mirror[1])
            mirror[2].close()

    def _lines(self, args: list[str]) -> list[str]:
        return self.session.call(args).stdout.decode(errors="replace").splitlines()

    def _record(self, data: dict[str, Any]) -> RunRecord:
        run_id = str(data["id"])
        _check_id(run_id)
        progress = data.get("progress")
        return RunRecord(
            id=run_id, run_dir=str(self.mirror_dir(run_id)), created_at=_time(data.get("created_at")) or 0.0,
            name=data.get("name") or "", preset=data.get("preset"), launcher=data.get("launcher") or "python",
            script=data.get("script") or "", argv=list(data.get("argv") or []), cwd=data.get("cwd") or "",
            started_at=_time(data.get("started_at")), ended_at=_time(data.get("ended_at")),
            state=data.get("state") or "running", state_detail=data.get("state_detail") or "",
            exit_code=data.get("exit_code"), diagnosis=data.get("diagnosis"),
            progress=progress if isinstance(progress, dict) else None, supervisor_pid=data.get("supervisor_pid"),
            processes=[dict(p) for p in data.get("pids") or []])


def _check_id(run_id: str) -> None:
    # A run id names a local mirror directory: never a path out of it.
    if not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise RemoteError(f"not a run id: {run_id!r}", 2)


def _time(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def in_source(source: RemoteRuns, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the remote source's counterpart of the local store function `fn` (watch.read_view -> read_view): how
    a page written for the run store reads a remote machine instead, unchanged."""
    method = getattr(source, fn.__name__, None)
    if method is None:
        raise RemoteError(f"not available for a remote machine yet ({fn.__name__.replace('_', ' ')})", 2)
    return method(*args, **kwargs)

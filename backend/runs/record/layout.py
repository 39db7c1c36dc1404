"""A run directory: what is in it and how it is named.

    runs_dir()/<run id>/          private (0700)
        command.json              argv, cwd, launcher, environment with secrets masked
        <config files>            the plan's files: accelerate_config.yaml, ds_config.json
        output.log                every byte the launcher and its ranks wrote to stdout/stderr, in order, whole
        supervisor.log            the supervisor's own messages (and its traceback if it ever crashes)
        evidence.json             what the supervisor saw at the end (exits, OOM kills, memory limit; not the log)
        run.json, end.json        the run's name and its end, as the store has them (folder_record): a run store
                                  rebuilt from the folders (store_rebuild) still knows them
        events.jsonl              the run's events as the store gets them, one JSON line each (folder_record)
        stop                      present when a stop was requested (JSON: grace, requested_at); see request_stop

Run ids sort by time and read as one: 20261121-171503-ab12 (local time of creation + 4 random hex digits).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.masking import mask_argv
from traindeck.backend.core.paths import ensure_private_dir, runs_dir

COMMAND = "command.json"
OUTPUT = "output.log"
SUPERVISOR_LOG = "supervisor.log"
STOP = "stop"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def output(self) -> Path:
        return self.path / OUTPUT

    @property
    def command(self) -> Path:
        return self.path / COMMAND

    @property
    def supervisor_log(self) -> Path:
        return self.path / SUPERVISOR_LOG

    @property
    def evidence(self) -> Path:
        return self.path / "evidence.json"

    @property
    def stop_file(self) -> Path:
        return self.path / STOP

    def write_files(self, files: Mapping[str, str]) -> None:
        """The plan's config files, at their relative paths; refuses paths leaving the run directory."""
        root = self.path.resolve()
        for relative, text in files.items():
            target = (root / relative).resolve()
            if root not in target.parents:
                raise ValueError(f"config file path leaves the run directory: {relative}")
            atomic_write_text(target, text)

    def request_stop(self, grace_s: float, reason: str | None = None) -> None:
        """Ask the supervisor to stop the run. Written atomically; a second request replaces the first. `reason`:
        why, in a few words the run's end then reads ("measured by trial ID (stopped after 4 steps)")."""
        request: dict[str, Any] = {"grace_s": grace_s, "requested_at": time.time()}
        if reason:
            request["reason"] = reason
        atomic_write_text(self.stop_file, json.dumps(request))

    def stop_request(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.stop_file.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else {}


def create_run_dir(run_id: str | None = None) -> RunDir:
    """A new, empty, private run directory under runs_dir() with a fresh unique id (or the given one).

    runs_dir() must be a folder, not a symbolic link (SymlinkRefused); the run directory is new (mkdir fails on
    anything already there, a link included) and made private through the opened folder, not by path.
    """
    base = ensure_private_dir(runs_dir())
    for _attempt in range(100):
        rid = run_id or new_run_id()
        path = base / rid
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if run_id:
                raise
            continue
        return RunDir(ensure_private_dir(path))
    raise RuntimeError("could not find a free run id")


__all__ = ["RunDir", "create_run_dir", "mask_argv", "new_run_id"]

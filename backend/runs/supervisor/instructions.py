"""What the supervisor is told and what it writes through: its instructions (read from stdin at its start) and the
run store, wrapped so that a failed write is logged and never ends the run."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.runs.record.run_store import RunStore

logger = logging.getLogger("traindeck.supervisor")


@dataclass
class Instructions:
    run_id: str
    store: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stall_min_s: float = 120.0

    @classmethod
    def read(cls, stream: Any) -> Instructions:
        data = json.loads(stream.read())
        return cls(run_id=data["run_id"], store=data["store"], argv=list(data["argv"]), cwd=data["cwd"],
                   env=dict(data["env"]), stall_min_s=float(data.get("stall_min_s", 120.0)))


class SafeStore:
    """The run store as the supervisor uses it: a failed write is logged, never fatal to the run.

    A store found corrupt and rebuilt by another process (store_rebuild) is a new file at the same path: the old
    connection then writes into the file kept aside, or fails. After a failure, a store whose path now names
    another file is opened again and the call repeated once, so the run's rows reach the rebuilt store."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._file = _identity(store.path)
        self._reopen = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        getattr(self.store, name)  # an AttributeError for a name the store lacks, as before

        def call(*args: Any, **kwargs: Any) -> Any:
            for attempt in (1, 2):
                try:
                    return getattr(self.store, name)(*args, **kwargs)
                except sqlite3.Error as exc:
                    if attempt == 1 and self._replaced():
                        logger.info("run store %s failed (%s): it was replaced, so it is opened again", name, exc)
                        continue
                    logger.warning("run store %s failed: %s", name, exc)
                    return None
            return None

        return call

    def _replaced(self) -> bool:
        """The store's path names another file than the one open (then that one is opened instead)."""
        with self._reopen:
            now = _identity(self.store.path)
            if now is None or now == self._file:
                return False
            try:
                fresh = RunStore(self.store.path)
            except (sqlite3.Error, OSError) as exc:
                logger.warning("could not open the run store again: %s", exc)
                return False
            # The old connection is left to be collected, not closed: another thread may be inside a call on it.
            self.store, self._file = fresh, _identity(fresh.path)
            return True


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino

"""What the supervisor is told and what it writes through: its instructions (read from stdin at its start) and the
run store, wrapped so that a failed write is logged and never ends the run."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
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
    """The run store as the supervisor uses it: a failed write is logged, never fatal to the run."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except sqlite3.Error as exc:
                logger.warning("run store %s failed: %s", name, exc)
                return None

        return call

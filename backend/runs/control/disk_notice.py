"""What the dashboard says about the disk holding traindeck's data folder (the run store, every run's output.log and
step files): nothing while there is room; a warning under the threshold the supervisor warns a run at
(TRAINDECK_LOW_DISK_MB, default 1 GiB); "disk full" once SQLite has no room left, when runs' logs are cut and the
run store is read as last saved (RunStore.read_only). The dashboard asks every few seconds, so the notice goes as
soon as space is freed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.core.paths import NO_ROOM_BYTES, free_bytes, run_store_path
from traindeck.backend.runs.supervisor.disk_watch import low_disk_bytes


@dataclass(frozen=True)
class DiskNotice:
    full: bool  # no room: nothing is written; else low: soon
    free_bytes: int
    folder: Path
    text: str


def data_disk_notice(env: Mapping[str, str] | None = None, folder: Path | None = None) -> DiskNotice | None:
    """The notice for the data folder's disk now, or None when it has room (or its free space cannot be told)."""
    folder = folder if folder is not None else run_store_path().parent
    free = free_bytes(folder)
    if free < 0:
        return None
    mib = free / 2**20
    if free < NO_ROOM_BYTES:
        return DiskNotice(True, free, folder, f"Disk full at {folder} ({mib:.1f} MiB free): running runs' logs are "
                          "cut and nothing is recorded; runs are shown as last saved until space is freed.")
    if free < low_disk_bytes(dict(env if env is not None else os.environ)):
        return DiskNotice(False, free, folder, f"Low disk space at {folder}: {mib:.0f} MiB free. When it is full, "
                          "running runs' logs are cut and their records stop until space is freed.")
    return None


__all__ = ["DiskNotice", "data_disk_notice"]

"""Opening the run store on a full disk (a 2 MiB tmpfs, filled) leaves nothing new beside it: a store that is there
opens for reading only without SQLite's empty WAL and shared-memory files left behind; a store that is not there
is not created as an empty file. With room again it opens for writing. Skipped where no tmpfs can be mounted (not
root)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.smalldisk import fill
from support.smalldisk import small_disk as mounted

from traindeck.backend.runs.record.run_store import RunRecord, RunStore


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path, "2m") as mount:
        yield mount


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_a_full_disk_opens_the_store_for_reading_and_leaves_no_wal_or_shm(small_disk: Path) -> None:
    path = small_disk / "data" / "runs.sqlite3"
    with RunStore(path) as store:
        store.add_run(RunRecord(id="r1", run_dir=str(small_disk / "r1"), created_at=time.time(), name="first"))
    before = _names(path.parent)
    assert f"{path.name}-wal" not in before and f"{path.name}-shm" not in before  # merged on the last close
    fill(small_disk / "filler")
    with RunStore(path) as store:
        assert store.read_only and store.read_only.startswith(f"disk full at {path.parent}")
        assert [r.name for r in store.list_runs()] == ["first"]
        assert _names(path.parent) == before
    assert _names(path.parent) == before
    (small_disk / "filler").unlink()
    with RunStore(path) as store:
        assert store.read_only is None
        store.update_run("r1", state_detail="written again")


def test_a_full_disk_creates_no_empty_store(small_disk: Path) -> None:
    path = small_disk / "data" / "runs.sqlite3"
    path.parent.mkdir()
    fill(small_disk / "filler")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        RunStore(path)
    assert not {path.name, f"{path.name}-wal", f"{path.name}-shm"} & _names(path.parent)
    (small_disk / "filler").unlink()
    with RunStore(path) as store:
        assert store.read_only is None and store.list_runs() == []

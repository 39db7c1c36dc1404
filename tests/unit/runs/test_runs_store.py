"""The run store's schema and queries, and the run directory's naming and masking (no processes)."""

from __future__ import annotations

import re
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.record.layout import create_run_dir, mask_argv, new_run_id
from traindeck.backend.runs.record.run_store import SCHEMA_VERSION, RunRecord, RunStore, StoreError


def record(run_id: str, t: float, name: str = "n") -> RunRecord:
    return RunRecord(id=run_id, run_dir=f"/tmp/{run_id}", created_at=t, name=name)


def test_runs_round_trip_newest_first_and_resolve(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    store.add_run(record("20260101-000000-aaaa", 1.0, "first"))
    store.add_run(record("20260102-000000-bbbb", 2.0, "second"))
    store.add_run(record("20260103-000000-cccc", 3.0, "second"))
    store.update_run("20260101-000000-aaaa", progress={"current": 3, "total": 10}, processes=[{"pid": 1}])
    got = store.get_run("20260101-000000-aaaa")
    assert got is not None and got.progress == {"current": 3, "total": 10} and got.processes == [{"pid": 1}]
    assert [r.id for r in store.list_runs()] == ["20260103-000000-cccc", "20260102-000000-bbbb",
                                                 "20260101-000000-aaaa"]
    assert store.resolve_id("20260102") == "20260102-000000-bbbb"
    assert store.resolve_id("aaaa") == "20260101-000000-aaaa"
    assert store.resolve_id("second") == "20260103-000000-cccc"  # a repeated name means its newest run
    assert store.resolve_id("2026") is None  # ambiguous
    assert store.resolve_id("%") is None


def test_finish_only_if_running(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    store.add_run(record("r1", time.time()))
    assert store.finish_run("r1", "stopped", only_if_running=True)
    assert not store.finish_run("r1", "lost", only_if_running=True)
    got = store.get_run("r1")
    assert got is not None and got.state == "stopped" and got.ended_at is not None
    with pytest.raises(ValueError):
        store.finish_run("r1", "running")


def test_metrics_last_values_and_series(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    store.add_metrics("r", [("loss", 1, 1.0, 0.9, 0), ("loss", 2, 2.0, 0.5, 0), ("lr", 2, 2.0, 1e-4, None)])
    assert store.last_metrics("r") == {"loss": 0.5, "lr": 1e-4}
    assert store.metric_series("r", "loss") == [(1, 1.0, 0.9), (2, 2.0, 0.5)]


def test_events_in_order(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite3")
    store.add_event("r", "a", "one")
    store.add_event("r", "b", "two")
    first, second = store.events("r")
    assert (first.kind, second.text) == ("a", "two")
    assert [e.text for e in store.events("r", after_id=first.id)] == ["two"]


def test_store_file_is_private_wal_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    RunStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT value FROM runs_meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    db.execute("UPDATE runs_meta SET value = '999' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError):
        RunStore(path)


def test_run_ids_sort_by_time_and_dirs_are_private() -> None:
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id())
    assert new_run_id(1_000_000_000) < new_run_id(2_000_000_000)
    run_dir = create_run_dir()
    assert stat.S_IMODE(run_dir.path.stat().st_mode) == 0o700
    assert create_run_dir().path != run_dir.path
    with pytest.raises(ValueError):
        run_dir.write_files({"../escape.json": "{}"})


def test_mask_argv_hides_token_options_and_known_secret_values() -> None:
    argv = ["python", "t.py", "--hub_token", "hf_abc123456", "--wandb-api-key=xyz", "--lr", "1e-4",
            "--push_to_hub_token_file", "x", "--note=uses hf_SECRET9876 inside"]
    # A token file's path is not the token (names are told apart by their last word: backend/core/masking.py).
    assert mask_argv(argv, ["hf_SECRET9876"]) == [
        "python", "t.py", "--hub_token", "***", "--wandb-api-key=***", "--lr", "1e-4", "--push_to_hub_token_file",
        "x", "--note=uses *** inside"]


def test_run_text_is_masked_on_its_way_into_the_store_and_other_columns_are_not(tmp_path: Path) -> None:
    """Whoever writes (a supervisor, the queue, a lost-run check): an event, a diagnosis or a state's detail that
    quotes a token holds *** in the database file; the run's secret values are masked wherever they appear."""
    token, jwt = "hf_" + "Pq8" * 12, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl"
    path = tmp_path / "runs.sqlite3"
    store = RunStore(path, secret_values=["opaque-value-77"])
    store.add_run(record("20260101-000000-aaaa", 1.0, "max_tokens=512"))
    store.add_event("20260101-000000-aaaa", "finished", f"failed: bad token {token} (opaque-value-77)")
    store.add_event("20260101-000000-aaaa", "note", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 loss=0.123")
    store.finish_run("20260101-000000-aaaa", "failed", state_detail=f"RuntimeError: {token}",
                     diagnosis={"summary": f"The script raised HTTPError: Authorization: Bearer {jwt}", "rank": 0,
                                "evidence": ["opaque-value-77 refused"]})
    store.close()
    for name in ("runs.sqlite3", "runs.sqlite3-wal"):
        data = (tmp_path / name).read_bytes() if (tmp_path / name).exists() else b""
        assert token.encode() not in data and jwt.encode() not in data and b"opaque-value-77" not in data
    with RunStore(path) as again:
        got = again.get_run("20260101-000000-aaaa")
        assert [e.text for e in again.events("20260101-000000-aaaa")] == [
            "failed: bad token *** (***)", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 loss=0.123"]
    assert got is not None and got.name == "max_tokens=512" and got.state_detail == "RuntimeError: ***"
    assert got.diagnosis == {"summary": "The script raised HTTPError: Authorization: Bearer ***", "rank": 0,
                             "evidence": ["*** refused"]}

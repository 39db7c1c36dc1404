"""What the Runs page's "left behind" tab reads for a run: from the store, or from the record the page just polled."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.control.leftbehind import run_leftovers
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def _run_with_a_checkpoint() -> RunRecord:
    run_dir = create_run_dir()
    checkpoint = Path(run_dir.path) / "out" / "checkpoint-20"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 20}))
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 64)
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name="ckpt",
                       started_at=time.time(), script="train.py", cwd=str(run_dir.path),
                       argv=["python", "train.py", "--output_dir", str(checkpoint.parent)])
    with RunStore() as store:
        store.add_run(record)
        return store.get_run(record.id) or record


def test_the_polled_record_gives_what_the_store_gives_without_opening_the_store(tmp_path: Path) -> None:
    record = _run_with_a_checkpoint()
    from_store = run_leftovers(None, record.id)
    assert from_store["id"] == record.id and from_store["state"] == "running"
    assert [Path(c["path"]).name for c in from_store["checkpoints"]] == ["checkpoint-20"]
    # A store path that cannot be opened: only a read that skips the store can succeed.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unopenable = str(blocked / "runs.db")
    assert run_leftovers(unopenable, record.id, record) == from_store
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever sqlite says; the point is that it was opened
        run_leftovers(unopenable, record.id)


def test_a_record_of_another_run_is_not_taken_for_this_one() -> None:
    first, second = _run_with_a_checkpoint(), _run_with_a_checkpoint()
    assert run_leftovers(None, first.id, second)["id"] == first.id

"""The "left behind" panel (issue 14) over a real run store and real checkpoint folders: checkpoints newest first,
lineage and provenance lines, which buttons apply, and a bundle written off the UI thread."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

from traindeck.backend.runs.control.resume import Lineage, save_lineage
from traindeck.backend.runs.record.layout import create_run_dir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.gui.tasks import Tasks
from traindeck.gui.widgets.run_leftovers import RunLeftoversPanel


def test_panel_lists_checkpoints_and_origin_and_writes_a_bundle(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_dir = create_run_dir()
    (run_dir.path / "output.log").write_text("step 1\n")
    (run_dir.path / "provenance.json").write_text(json.dumps(
        {"git": {"commit": "0123456789abcdef", "branch": "main", "dirty": True, "diff_file": "x"}}))
    save_lineage(run_dir.path, Lineage("20260101-000000-aaaa", "/old/checkpoint-3", "resume"))
    created = time.time() - 5
    for step in (5, 10):
        folder = tmp_path / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text("{}")
    with RunStore() as store:
        store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=created,
                                argv=["python", "t.py", "--output_dir", "out"], cwd=str(tmp_path)))
        store.finish_run(run_dir.run_id, "succeeded")
        store_path = str(store.path)
    tasks = Tasks()
    panel = RunLeftoversPanel(tasks, store_path)
    qtbot.addWidget(panel)
    panel.show_run(run_dir.run_id)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 2, timeout=10000)
    assert [panel.table.item(r, 0).text() for r in range(2)] == ["10", "5"]
    assert "checkpoint-3" in panel.origin.text() and "0123456789ab" in panel.origin.text()
    assert "uncommitted" in panel.origin.text() and "signals" in panel.stop_kind.text()
    assert panel.resume_button.isEnabled() and not panel.save_button.isEnabled()
    messages: list[str] = []
    panel.message.connect(messages.append)
    target = tmp_path / "b.zip"
    panel.write_bundle(str(target))
    qtbot.waitUntil(lambda: len(messages) >= 2, timeout=10000)
    assert messages[0].startswith("Writing the bug-report bundle")  # progress first, then the result
    assert messages[1].startswith(f"wrote {target}")
    with zipfile.ZipFile(target) as archive:
        assert f"{run_dir.run_id}/output.log" in archive.namelist()
    tasks.wait()

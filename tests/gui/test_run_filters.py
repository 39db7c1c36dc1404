"""The run filters of History's table and the Runs page's list: a case-ignoring substring of a run's name, id,
script, preset, state or tags, or a /regex/ (TensorBoard's run filter); a bad regex said so, filtering nothing; the
count shown ("2 of 4 runs"); Ctrl+F into the box; the text remembered per page. A real run store and run
directories, offscreen widgets, settings in a file of the test's."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from traindeck.backend.runs.record.layout import create_run_dir  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402

NAMES = ("gpt2-small", "gpt2-large", "llama-7b", "bert-base")


@pytest.fixture
def make_page(make_history_page):
    return lambda: make_history_page((1300, 800))


def _names(page) -> list[str]:
    proxy = page.run_table.proxy
    return sorted(proxy.index(r, 0).data() for r in range(proxy.rowCount()))


def test_history_filters_by_substring_or_regex_counts_and_remembers(qtbot, make_page):
    with RunStore() as store:
        runs = {name: make_run(store, name, preset="zero3" if name == "bert-base" else "zero2",
                               started=T0 + 100 * i, samples=0, port=29730 + i,
                               state="failed" if name == "llama-7b" else "succeeded")
                for i, name in enumerate(NAMES)}
    page = make_page()
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 4, timeout=10000)
    box = page.run_table.filter_box
    assert not box.note.isVisible()

    page.activateWindow()
    page.run_table.table.setFocus()
    qtbot.keyClick(page.run_table.table, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert box.edit.hasFocus()
    qtbot.keyClicks(box.edit, "GPT2")  # case ignored
    assert _names(page) == ["gpt2-large", "gpt2-small"]
    assert box.note.isVisible() and box.note.text() == "2 of 4 runs"
    qtbot.keyClick(box.edit, Qt.Key.Key_Down)  # on into the table, at its first row shown
    table = page.run_table.table
    assert table.hasFocus() and table.currentIndex().isValid() and table.currentIndex().row() == 0
    box.focus()

    for text, shown in (("zero3", ["bert-base"]), ("failed", ["llama-7b"]), (runs["gpt2-large"].id, ["gpt2-large"]),
                        ("/^gpt2-(s|l)[a-z]+$/", ["gpt2-large", "gpt2-small"]), ("/-7B$/", ["llama-7b"])):
        box.edit.setText(text)
        assert _names(page) == shown, text
        assert box.note.text() == f"{len(shown)} of 4 runs"

    box.edit.setText("/gpt2(/")  # half typed: said so, and nothing hidden meanwhile
    assert _names(page) == sorted(NAMES)
    assert box.note.text().startswith("invalid regular expression") and box.note.isVisible()
    assert "invalid regular expression" in box.edit.toolTip()

    box.edit.setText("llama")
    page.run_table.select_runs([runs["llama-7b"].id])
    assert page.run_table.selected_ids() == [runs["llama-7b"].id]
    page.refresh()  # a refresh keeps the filter and the selection
    qtbot.waitUntil(lambda: not page._refreshing, timeout=10000)
    assert _names(page) == ["llama-7b"] and page.run_table.selected_ids() == [runs["llama-7b"].id]

    again = make_page()  # remembered for the page
    again.page_shown()
    qtbot.waitUntil(lambda: len(again.run_table.model.rows) == 4, timeout=10000)
    assert again.run_table.filter_box.edit.text() == "llama" and _names(again) == ["llama-7b"]
    assert again.run_table.filter_box.note.text() == "1 of 4 runs"
    assert page.ctx.settings.value("runs/filter") is None  # the Runs page's is its own


def _add(name: str, state: str, created: float, **fields: object) -> RunRecord:
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    record = RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=created, started_at=created,
                       name=name, **fields)  # type: ignore[arg-type]
    with RunStore() as store:
        store.add_run(record)
        store.finish_run(record.id, state)
    return record


def _shown(page) -> list[str]:
    return [page.run_list.item(i).text().split("\n")[0] for i in range(page.run_list.count())
            if not page.run_list.item(i).isHidden()]


def test_runs_list_filters_hides_empty_headings_and_remembers(qtbot, make_runs_page):
    now = time.time()
    _add("gpt2-small", "succeeded", now - 30, script="train_gpt.py")
    _add("gpt2-large", "failed", now - 20, script="train_gpt.py")
    _add("llama-7b", "stopped", now - 10, script="finetune.py", preset="zero3")
    page = make_runs_page()
    qtbot.waitUntil(lambda: page.run_list.count() == 4, timeout=10000)
    box = page.run_list.filter_box
    assert _shown(page) == ["RECENT", "llama-7b", "gpt2-large", "gpt2-small"]

    page.activateWindow()
    page.run_list.setFocus()
    qtbot.keyClick(page.run_list, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert box.edit.hasFocus()
    qtbot.keyClicks(box.edit, "TRAIN_GPT")  # the script, case ignored
    assert _shown(page) == ["RECENT", "gpt2-large", "gpt2-small"] and box.note.text() == "2 of 3 runs"
    qtbot.keyClick(box.edit, Qt.Key.Key_Down)  # on into the list, at the first run shown (not its heading)
    assert page.run_list.hasFocus() and page.run_list.currentItem().text().startswith("gpt2-large")
    box.focus()
    box.edit.setText("zero3")
    assert _shown(page) == ["RECENT", "llama-7b"] and box.note.text() == "1 of 3 runs"
    box.edit.setText("/^gpt2-l/")
    assert _shown(page) == ["RECENT", "gpt2-large"]
    box.edit.setText("nothing like it")
    assert _shown(page) == [] and box.note.text() == "0 of 3 runs"  # the heading goes with its runs
    box.edit.setText("/[/")
    assert _shown(page) == ["RECENT", "llama-7b", "gpt2-large", "gpt2-small"]
    assert box.note.text().startswith("invalid regular expression")
    box.edit.setText("failed")

    again = make_runs_page()
    qtbot.waitUntil(lambda: again.run_list.count() == 4, timeout=10000)
    assert again.run_list.filter_box.edit.text() == "failed" and _shown(again) == ["RECENT", "gpt2-large"]

"""The Estimate page: the backend's rows for what is typed, named input problems, and "Use this"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtGui import QFontMetrics  # noqa: E402
from PySide6.QtWidgets import QApplication, QMessageBox  # noqa: E402

from traindeck.backend.estimate import (  # noqa: E402
    GIB,
    Machine,
    Workload,
    estimate_rows,
    format_gib,
    shape_from_params,
)
from traindeck.backend.presets import load_preset  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def make_page(qtbot, traindeck_home):
    """Estimate pages over the test's own settings file (a second page reads what the first one saved)."""
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.estimate import EstimatePage

    made = []

    def make():
        settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
        ctx = AppContext(settings=settings)
        page = EstimatePage(ctx)
        qtbot.addWidget(page)
        made.append(page)
        # What this machine has arrives once; wait for it so it cannot land between the test's own edits.
        qtbot.waitUntil(lambda: page.detection_finished, timeout=20000)
        return page

    yield make
    for page in made:
        page.shutdown()
        page.ctx.tasks.wait(10000)


@pytest.fixture
def page(make_page):
    return make_page()


def _type(qtbot, edit, text: str) -> None:
    edit.selectAll()
    edit.clear()
    qtbot.keyClicks(edit, text)


def _fill(qtbot, page, *, params="1.5B", gpus=1, gpu_mem="24", host_mem="64", micro_batch=1, seq_len=2048) -> None:
    _type(qtbot, page.inputs.params, params)
    page.inputs.gpus_per_node.setValue(gpus)
    _type(qtbot, page.inputs.gpu_mem, gpu_mem)
    _type(qtbot, page.inputs.host_mem, host_mem)
    page.inputs.micro_batch.setValue(micro_batch)
    page.inputs.seq_len.setValue(seq_len)


def _wait_for(qtbot, page, **expected) -> None:
    def ready() -> bool:
        e = page.estimate
        if e is None or page.problems:
            return False
        return all(getattr(e.machine, k, getattr(e.workload, k, None)) == v for k, v in expected.items())

    qtbot.waitUntil(ready, timeout=10000)


def test_table_shows_the_backend_rows_for_the_inputs(qtbot, page):
    _fill(qtbot, page, params="7B", gpus=4, gpu_mem="80", host_mem="256", micro_batch=2, seq_len=4096)
    page.inputs.optimizer.setCurrentText("lion")
    page.inputs.checkpointing.setChecked(True)
    _wait_for(qtbot, page, gpus_per_node=4, gpu_mem_bytes=80 * GIB, micro_batch=2, seq_len=4096, optimizer="lion",
              activation_checkpointing=True)

    expected = estimate_rows(shape_from_params(7_000_000_000), Machine(4, 1, 80 * GIB, 256 * GIB),
                             Workload(optimizer="lion", micro_batch=2, seq_len=4096, activation_checkpointing=True))
    table = page.results.table
    assert table.rowCount() == len(expected)
    for r, row in enumerate(expected):
        cells = [table.item(r, c).text() for c in range(table.columnCount())]
        assert cells[0].removeprefix("★ ") == row.label and cells[1] == row.verdict
        assert cells[2:6] == [format_gib(row.gpu_total_bytes_per_device), format_gib(row.gpu_bytes_per_device),
                              format_gib(row.activation_bytes_per_device), format_gib(row.cpu_bytes_per_node)]
        assert cells[6] == (format_gib(row.disk_bytes_per_node) if row.disk_bytes_per_node else "–")
        assert table.item(r, 0).toolTip().startswith(row.why)
    colours = {table.item(r, 1).text(): table.item(r, 1).background().color().name() for r in range(len(expected))}
    assert len(set(colours.values())) == len(colours)  # each verdict has its own colour

    chosen = page.estimate.advice.row.strategy
    starred = [table.item(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(table.rowCount())
               if table.item(r, 0).text().startswith("★")]
    assert starred == [chosen]
    assert page.advice.advice_title.text().startswith(page.estimate.advice.row.label)


def test_a_bad_parameter_count_names_the_field_and_blocks_use(qtbot, page):
    _fill(qtbot, page)
    _wait_for(qtbot, page, gpu_mem_bytes=24 * GIB)
    assert page.advice.use_button.isEnabled()

    _type(qtbot, page.inputs.params, "1.5Q")
    qtbot.waitUntil(lambda: bool(page.problems), timeout=5000)
    shown = page.results.messages.plain_text()
    assert shown.startswith("Parameters: cannot read '1.5Q'") and page.results.messages.isVisibleTo(page)
    assert page.inputs.params.property("invalid") is True and "1.5Q" in page.inputs.params.toolTip()
    # The old figures are greyed.
    assert not page.advice.use_button.isEnabled() and not page.results.table.isEnabled()

    _type(qtbot, page.inputs.params, "350M")
    qtbot.waitUntil(lambda: not page.problems and page.estimate.shape.total_params == 350_000_000, timeout=5000)
    assert not page.results.messages.isVisibleTo(page) and page.inputs.params.property("invalid") is False
    assert page.results.table.isEnabled() and page.advice.use_button.isEnabled()


def test_unknown_gpu_memory_shows_rows_and_asks_for_it(qtbot, page):
    _fill(qtbot, page, gpu_mem="")
    page.inputs.gpu_mem.clear()
    qtbot.waitUntil(lambda: page.estimate is not None and page.estimate.machine.gpu_mem_bytes is None, timeout=5000)
    table = page.results.table
    assert {table.item(r, 1).text() for r in range(table.rowCount())} == {"unknown"}
    assert "GPU memory" in page.advice.advice_text.text() and not page.advice.use_button.isEnabled()


def test_use_this_loads_the_advised_preset_into_the_draft(qtbot, page):
    _fill(qtbot, page, micro_batch=2)
    _wait_for(qtbot, page, micro_batch=2, gpu_mem_bytes=24 * GIB)
    assert page.estimate.advice.preset == "zero2-offload"
    ctx = page.ctx
    with qtbot.waitSignal(ctx.navigate, timeout=5000) as navigated:
        qtbot.mouseClick(page.advice.use_button, Qt.MouseButton.LeftButton)
    assert navigated.args == ["configure"]
    preset = ctx.draft.preset
    assert preset.name == "zero2-offload-advised" and ctx.draft.saved_as is None and ctx.draft.dirty
    assert preset.deepspeed["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert preset.deepspeed["train_micro_batch_size_per_gpu"] == 2
    assert preset.accelerate["num_processes"] == 1


def test_use_this_asks_before_replacing_unsaved_changes(qtbot, page, monkeypatch):
    ctx = page.ctx
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    ctx.draft.mark_edited()
    _fill(qtbot, page)
    _wait_for(qtbot, page, gpu_mem_bytes=24 * GIB)

    asked = []
    answer = [QMessageBox.StandardButton.Cancel]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or answer[0])
    page.advice.use_advice()
    qtbot.waitUntil(lambda: len(asked) == 1, timeout=5000)
    assert "cpu-demo" in asked[0]
    assert ctx.draft.preset.name == "cpu-demo" and ctx.draft.dirty  # kept

    answer[0] = QMessageBox.StandardButton.Discard
    with qtbot.waitSignal(ctx.draft.replaced, timeout=5000):
        page.advice.use_advice()
    assert ctx.draft.preset.name == "zero2-offload-advised"


def test_a_missing_model_config_names_the_field(qtbot, page, tmp_path):
    _fill(qtbot, page)
    page.inputs.model_config.setText(str(tmp_path / "no-such" / "config.json"))
    page.inputs.model_config.line.editingFinished.emit()
    qtbot.waitUntil(lambda: bool(page.problems), timeout=10000)
    assert page.problems[0].field == "model_config"
    assert page.results.messages.plain_text().startswith("Model config: model config not found")
    assert not page.inputs.params.isEnabled()  # the config replaces the count


@pytest.mark.train
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers to count")
def test_a_model_config_is_counted_in_a_child_process(qtbot, page, heavy_imports):
    _fill(qtbot, page)
    config = FIXTURES / "models" / "gpt2-small" / "config.json"
    page.inputs.model_config.setText(str(config))
    page.inputs.model_config.line.editingFinished.emit()
    qtbot.waitUntil(lambda: page.estimate is not None and page.estimate.shape.source == str(config.resolve()),
                    timeout=120000)
    assert page.estimate.shape.total_params == 124_439_808  # tied embeddings counted once
    assert "124.4M parameters" in page.results.model_summary.text()
    assert heavy_imports == []  # only the child imported torch and transformers


def test_demo_is_a_1_5b_model_on_one_24_gib_gpu(qtbot, page):
    page.load_demo()
    _wait_for(qtbot, page, gpus_per_node=1, gpu_mem_bytes=24 * GIB, host_mem_bytes=64 * GIB)
    assert page.estimate.shape.total_params == 1_500_000_000
    assert page.estimate.advice.preset == "zero2-offload" and page.advice.use_button.isEnabled()


def test_every_column_is_in_view_and_zero2_above_zero1_is_explained(qtbot, page):
    """Issue 12: the recommendation's text squeezed the table (NVMe column cut off), and ZeRO-2 above ZeRO-1 on
    one GPU went unexplained."""
    page.resize(1280, 760)
    page.show()
    qtbot.waitExposed(page)
    _fill(qtbot, page, params="7B", gpus=1, gpu_mem="80", host_mem="256")
    _wait_for(qtbot, page, gpus_per_node=1, gpu_mem_bytes=80 * GIB)
    qtbot.waitUntil(lambda: page.results.stage_note.isVisible())
    assert "2 + 18/1" in page.results.stage_note.text()
    QApplication.processEvents()
    assert page.results.clipped_columns() == []
    table = page.results.table
    assert table.viewport().height() >= 6 * table.rowHeight(0)  # the rows are readable, not squeezed
    page.inputs.gpus_per_node.setValue(8)
    _wait_for(qtbot, page, gpus_per_node=8)
    assert not page.results.stage_note.isVisible()


def test_the_page_speaks_of_its_fields_not_of_command_line_options(qtbot, page):
    """The walk-through's Estimate screenshot: "pass --largest-layer", "give --nvme-path or --disk-free", the
    rejected strategies as keys (zero2+opt-cpu) and "1 node(s) × 1 GPU(s)" on a page of fields and labels."""
    _fill(qtbot, page, params="1.5B", gpus=1, gpu_mem="24", host_mem="23.5")
    _wait_for(qtbot, page, gpus_per_node=1)
    qtbot.waitUntil(lambda: page.estimate.advice is not None and page.estimate.advice.row is not None,
                    timeout=10000)
    shown = "\n".join((page.results.assumptions.text(), page.advice.advice_text.text(),
                       page.results.model_summary.text()))
    assert "--largest-layer" not in shown and "--disk-free" not in shown, shown
    assert "zero2+opt-cpu" not in shown and "7 faster options were passed over" in shown
    # The "Passed over" list names them.
    assert "ZeRO-2 + optimizer offload (CPU)" in page.advice.advice_text.text()
    assert "Largest layer" in page.results.assumptions.text()
    assert "1 node × 1 GPU," in page.results.model_summary.text()


def _stacked(page) -> list[tuple[int, int]]:
    """The vertical extents of the results column's parts, top to bottom, in the page's coordinates."""
    column = page
    parts = (page.results.table, page.results.units, page.results.stage_note, page.results.assumptions, page.advice)
    spans = []
    for part in parts:
        if part.isVisible():
            top = part.mapTo(column, part.rect().topLeft()).y()
            spans.append((top, top + part.height()))
    return spans


def test_a_low_window_scrolls_the_results_instead_of_drawing_them_over_each_other(qtbot, page):
    page.resize(860, 480)  # the page's share of a 1024x640 window
    page.show()
    qtbot.waitExposed(page)
    page.load_demo()
    _wait_for(qtbot, page, gpus_per_node=1, gpu_mem_bytes=24 * GIB)
    qtbot.waitUntil(lambda: page.results.stage_note.isVisible())
    QApplication.processEvents()
    spans = _stacked(page)
    assert len(spans) == 5
    for (_, above_bottom), (below_top, _) in zip(spans, spans[1:], strict=False):
        assert below_top >= above_bottom, spans
    assert page.results_scroll.verticalScrollBar().maximum() > 0  # the column scrolls to show the rest


def _elided_names(page) -> list[str]:
    table = page.results.table
    cut = []
    for r in range(table.rowCount()):
        item = table.item(r, 0)
        needed = QFontMetrics(item.font()).horizontalAdvance(item.text()) + 2 * table.style().pixelMetric(
            table.style().PixelMetric.PM_FocusFrameHMargin) + 4
        if needed > table.columnWidth(0):
            cut.append(item.text())
    return cut


def test_widening_the_window_shows_the_strategy_names_whole(qtbot, page):
    page.resize(820, 700)
    page.show()
    qtbot.waitExposed(page)
    page.load_demo()
    _wait_for(qtbot, page, gpus_per_node=1, gpu_mem_bytes=24 * GIB)
    QApplication.processEvents()
    assert _elided_names(page)  # narrow: the long names are elided (the figures stay in view)
    page.resize(1600, 700)
    qtbot.waitUntil(lambda: _elided_names(page) == [], timeout=3000)
    assert page.results.clipped_columns() == []


def test_the_fields_are_remembered_for_the_next_time_the_page_opens(qtbot, make_page):
    page = make_page()
    _fill(qtbot, page, params="7B", gpus=4, gpu_mem="80", host_mem="256", micro_batch=2, seq_len=4096)
    _type(qtbot, page.inputs.heads, "32")
    _type(qtbot, page.inputs.vocab_size, "50257")
    page.inputs.precision.setCurrentText("fp16")
    page.inputs.checkpointing.setChecked(True)
    _wait_for(qtbot, page, gpus_per_node=4, micro_batch=2, seq_len=4096, activation_checkpointing=True)
    page.shutdown()
    page.ctx.settings.sync()

    again = make_page()
    form = again.inputs.form()
    assert (form.params, form.gpus_per_node, form.gpu_mem, form.host_mem) == ("7B", 4, "80", "256")
    assert (form.micro_batch, form.seq_len, form.precision, form.activation_checkpointing) == (2, 4096, "fp16", True)
    assert (form.heads, form.vocab_size) == ("32", "50257")


def test_heads_and_vocabulary_are_fields_as_in_the_cli(qtbot, page):
    _fill(qtbot, page)
    _type(qtbot, page.inputs.heads, "16")
    _type(qtbot, page.inputs.vocab_size, "50257")
    qtbot.waitUntil(lambda: page.estimate is not None and page.estimate.shape.num_heads == 16
                    and page.estimate.shape.vocab_size == 50257, timeout=10000)
    assert "16 heads, vocabulary 50,257" in page.results.model_summary.text()
    _type(qtbot, page.inputs.heads, "0")
    qtbot.waitUntil(lambda: bool(page.problems), timeout=10000)
    assert page.problems[0].field == "heads" and page.inputs.heads.property("invalid")


def test_the_training_fields_start_from_the_preset_and_keep_what_the_user_set(qtbot, make_page):
    """Loading a preset sets precision and micro batch from it (and says so); a field the user set keeps its value,
    also on the next start, until the user sets it back to the preset's."""
    page = make_page()
    _type(qtbot, page.inputs.gpu_mem, "80")
    _type(qtbot, page.inputs.host_mem, "256")
    page.ctx.draft.replace(load_preset("zero3"), "zero3")
    _wait_for(qtbot, page, precision="bf16", micro_batch=8)
    assert "from preset “zero3”" in page.inputs.preset_note.text()
    assert "micro batch 8" in page.inputs.preset_note.text()

    page.inputs.micro_batch.setValue(2)  # the user's own
    page.ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    _wait_for(qtbot, page, precision="fp32", micro_batch=2)
    note = page.inputs.preset_note.text()
    assert "precision fp32" in note and "from preset “cpu-demo”" in note
    assert "micro batch: yours" in note
    page.shutdown()
    page.ctx.settings.sync()

    again = make_page()
    again.ctx.draft.replace(load_preset("zero2"), "zero2")
    _wait_for(qtbot, again, precision="bf16", micro_batch=2)  # still the user's
    again.inputs.micro_batch.setValue(8)  # the preset's again: it follows the preset from now on
    again.ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    _wait_for(qtbot, again, precision="fp32", micro_batch=4)


def test_the_model_config_field_has_room_for_a_path(qtbot, page):
    page.resize(1280, 760)
    page.show()
    qtbot.waitExposed(page)
    QApplication.processEvents()
    line = page.inputs.model_config.line
    path = "/home/someone/models/llama-3-8b/config.json"
    assert line.width() >= QFontMetrics(line.font()).horizontalAdvance(path), line.width()

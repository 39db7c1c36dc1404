"""The Runs page diagnoses a log from anywhere, as `traindeck diagnose` does: a file dropped on the page (a real
torchrun failure recorded on this machine), a pasted log, Ctrl+Shift+L."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from support import TESTS

from traindeck.backend.core import paths
from traindeck.gui.context import AppContext
from traindeck.gui.pages.runs import RunsPage
from traindeck.gui.pages.runs.log_diagnosis import LogDiagnosisDialog

TORCHRUN_FAIL = TESTS / "fixtures" / "logs" / "torchrun_tee_2rank_fail.raw"


@pytest.fixture
def page(qtbot) -> Iterator[RunsPage]:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QSettings

    settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
    made = RunsPage(AppContext(settings=settings))
    qtbot.addWidget(made)
    made.show()
    yield made
    made.shutdown()
    made.ctx.tasks.wait(30000)


def _dialogs(page: RunsPage) -> list[LogDiagnosisDialog]:
    """This page's open dialogs (an earlier test's dialog, not yet deleted in this worker, is not one of them)."""
    return [w for w in page.findChildren(LogDiagnosisDialog) if w.isVisible()]


def test_a_log_dropped_on_the_page_is_diagnosed_with_what_a_log_cannot_tell(page: RunsPage, qtbot) -> None:
    # What dropEvent does with a dropped file (a QDropEvent built by hand crashed an xdist worker now and then).
    page.diagnose_log(str(TORCHRUN_FAIL))
    dialog = _dialogs(page)[-1]
    qtbot.waitUntil(lambda: dialog.found is not None, timeout=20000)
    assert dialog.found is not None and dialog.found.diagnosis.rank == 1
    text = dialog.verdict.plain_text()
    assert text.startswith("Rank 1 raised RuntimeError: rank 1 fails on purpose.")
    assert "torchrun reported rank 1 (pid 13597) as the first failure" in text
    assert "not known from a log alone: the exit status (give it with --exit-code N)" in text
    dialog.close()


def test_a_pasted_log_with_its_exit_status_and_the_shortcut(page: RunsPage, qtbot) -> None:
    page.activateWindow()
    qtbot.waitUntil(page.isActiveWindow, timeout=5000)  # the shortcut acts in the active window
    qtbot.keyClick(page, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: bool(_dialogs(page)), timeout=5000)
    dialog = _dialogs(page)[-1]
    dialog.diagnose()
    assert dialog.status.text() == "Open a log file or paste a log first."
    # deepspeed/runtime/fp16/loss_scaler.py's own words when the dynamic loss scale is exhausted.
    dialog.paste.setPlainText("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
                              "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                              "Exiting run.\n")
    dialog.exit_code.setValue(1)
    dialog.diagnose()
    qtbot.waitUntil(lambda: dialog.found is not None, timeout=20000)
    assert dialog.found is not None and dialog.found.diagnosis.kind == "loss_scale"
    assert '"bf16"' in dialog.verdict.plain_text()
    assert "the exit status" not in dialog.verdict.plain_text()  # it was given
    missing = LogDiagnosisDialog(page.ctx.tasks, page)
    missing.open_file("/nonexistent/job.log")
    qtbot.waitUntil(lambda: missing.status.text().startswith("Could not read the log:"), timeout=20000)
    assert "Traceback" not in missing.status.text()

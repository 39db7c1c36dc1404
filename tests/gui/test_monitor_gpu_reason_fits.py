"""The Monitor page on a machine without a GPU: the Run tab's GPU memory chart says why in its place (a wrapped
label), and that label leaves the page's layout as the chart does: the page does not turn height-for-width with a
preferred height far above its room, so a scroll area around it (as the Runs page's System view has) does not
scroll where it fits."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QSettings
from PySide6.QtWidgets import QApplication, QScrollArea

from traindeck.gui.context import AppContext
from traindeck.gui.widgets.labels import ReasonLabel

WAIT_MS = 15000


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_the_run_tabs_no_gpu_words_keep_the_page_its_size(qtbot, traindeck_home: Path) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.2)
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    scroll = QScrollArea()  # the page in a scroll area, sized as it would be in the window
    scroll.setWidgetResizable(True)
    scroll.setWidget(page)
    qtbot.addWidget(scroll)
    scroll.resize(1200, 900)
    try:
        page.tabs.setCurrentWidget(page.run_panel)
        page.run_panel.setCurrentIndex(1)  # its charts, as for a run chosen
        scroll.show()
        qtbot.waitExposed(scroll)
        page.page_shown()
        slot = page.run_panel.rank_gpu_slot
        qtbot.waitUntil(lambda: slot.reason is not None and slot.currentWidget() is slot.label, timeout=WAIT_MS)
        assert isinstance(slot.label, ReasonLabel) and "No NVIDIA GPU found: " in slot.label.text()
        assert not page.hasHeightForWidth()
        for _ in range(3):  # the layouts settled: the scroll area sized the page after the words came
            QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
            QApplication.processEvents()
        assert 0 < page.height() <= scroll.viewport().height()
        # The words take the chart's room: the size of the chart beside them.
        assert slot.size() == page.run_panel.rank_locked_chart.size()
    finally:
        page.shutdown()
        ctx.tasks.wait(10000)

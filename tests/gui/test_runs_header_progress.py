"""The Runs page's header after the run ends: its progress line is shorter than while it ran ("· 0:18 left" gone),
and the throughput beside it follows the words shown, with no blank of the running line's width between them."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt

from traindeck.backend.runs import RateText
from traindeck.backend.runs.record.run_store import RunRecord
from traindeck.gui.pages.runs.header import RunHeader


def record(state: str, current: int) -> RunRecord:
    return RunRecord(id="20261128-092130-4efd", run_dir="/tmp/none", created_at=time.time(), name="demo", state=state,
                     started_at=time.time() - 40, launcher="deepspeed",
                     progress={"current": current, "total": 100, "rate": 4.45, "eta_s": 18.0, "unit": "step"})


def text_gap(header: RunHeader) -> int:
    """Pixels between the end of the progress words and the start of the throughput's."""
    label = header.progress_label
    drawn = label.fontMetrics().horizontalAdvance(label.text())
    room = label.contentsRect().width() - 2 * label.margin()
    ends_at = label.x() + label.contentsRect().x() + label.margin() + (
        room if label.alignment() & Qt.AlignmentFlag.AlignRight else drawn)
    return header.rate_label.x() - ends_at


def test_the_throughput_follows_the_progress_words_after_the_end(qtbot) -> None:  # type: ignore[no-untyped-def]
    header = RunHeader([])
    qtbot.addWidget(header)
    header.resize(1300, 120)
    header.show()
    header.show_record(record("running", 16))  # the running line, its widest: "... · 0:18 left"
    header.show_rate(RateText("35.6 samples/s", "from the batch size"))
    qtbot.waitExposed(header)
    assert "left" in header.progress_label.text()
    header.show_record(record("succeeded", 100))
    header.show_rate(RateText("35.7 samples/s", "from the batch size"))
    header.layout().activate()
    assert "left" not in header.progress_label.text()
    space = header.progress_label.fontMetrics().horizontalAdvance("  ")
    assert text_gap(header) <= space, (text_gap(header), header.progress_label.text())

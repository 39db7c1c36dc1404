"""The Monitor's sampling settings (seconds between samples, how much history the charts show, the demo tag) and
the one-line summary of the latest sample under them."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QWidget

from traindeck.backend.monitor import MAX_INTERVAL_S, MIN_INTERVAL_S, ResourceSample
from traindeck.gui.pages.monitor.shared import WINDOWS
from traindeck.gui.widgets.chart_axis import format_value


class MonitorToolbar(QWidget):
    """`interval_changed(seconds)` and `window_changed(seconds)` carry the person's settings; the page keeps them."""

    interval_changed = Signal(float)
    window_changed = Signal(float)

    def __init__(self, interval_s: float, window: str) -> None:
        """`interval_s`: the sampling interval shown; `window`: the label of the chart window shown (see WINDOWS)."""
        super().__init__()
        self.interval_spin = QDoubleSpinBox()
        self.interval_spin.setRange(MIN_INTERVAL_S, MAX_INTERVAL_S)
        self.interval_spin.setSingleStep(0.5)
        self.interval_spin.setDecimals(1)
        self.interval_spin.setSuffix(" s")
        self.interval_spin.setValue(interval_s)
        self.interval_spin.setToolTip(f"Seconds between samples ({MIN_INTERVAL_S:g}-{MAX_INTERVAL_S:g}). "
                                      "Runs record at their own rate (1 s by default).")
        self.interval_spin.valueChanged.connect(self.interval_changed)

        self.window_combo = QComboBox()
        for label, _ in WINDOWS:
            self.window_combo.addItem(label)
        self.window_combo.setCurrentIndex(max(0, self.window_combo.findText(window)))
        self.window_combo.setToolTip("How much of the live history the charts show (zoom with the mouse wheel; "
                                     "the A button in a chart's corner returns to the newest data)")
        self.window_combo.currentIndexChanged.connect(lambda _i: self.window_changed.emit(self.window_s))

        self.demo_label = QLabel("demo data")
        self.demo_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # discreet, in either theme
        font = self.demo_label.font()
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        self.demo_label.setFont(font)
        self.demo_label.setToolTip("Recorded-looking sample data (traindeck gui --demo / --screenshot); "
                                   "live sampling is off")
        self.demo_label.hide()

        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for setting in (QLabel("Sample every"), self.interval_spin, QLabel("Show"), self.window_combo):
            row.addWidget(setting)
        row.addStretch(1)
        row.addWidget(self.demo_label)

    @property
    def window_label(self) -> str:
        return WINDOWS[max(0, self.window_combo.currentIndex())][0]

    @property
    def window_s(self) -> float:
        return WINDOWS[max(0, self.window_combo.currentIndex())][1]

    def show_demo_tag(self) -> None:
        self.demo_label.show()


class SampleSummary(QLabel):
    """The latest sample in a line: CPU, RAM, swap, GPUs and the sample's time."""

    def __init__(self) -> None:
        super().__init__("Starting the sampler...")
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

    def show_sample(self, sample: ResourceSample) -> None:
        host = sample.host
        swap = (f"swap {format_value(host.swap_used_bytes, 'B')} of {format_value(host.swap_total_bytes, 'B')}"
                if host.swap_total_bytes else "no swap")
        gpus = (f"{len(sample.gpus)} GPU{'s' if len(sample.gpus) != 1 else ''}" if sample.gpus
                else "no NVIDIA GPU")
        self.setText(
            f"CPU {format_value(host.cpu_percent, '%')} of {len(host.per_core_percent)} cores  ·  "
            f"RAM {format_value(host.ram_used_bytes, 'B')} used, {format_value(host.ram_available_bytes, 'B')} "
            f"available of {format_value(host.ram_total_bytes, 'B')}  ·  {swap}"
            f"  ·  {gpus}  ·  {time.strftime('%H:%M:%S', time.localtime(sample.t))}")

"""The GPUs tab's health strips: one thin strip per GPU under the utilisation chart, on its time axis (the strips
follow its x range, zoom and pan included), coloured by the GPU's state over time (ok; throttled, a colour per
reason; PCIe link below its maximum while busy; XID) with the watched run's step ends as ticks. Hovering says the
state and the step. The spans come from backend/monitor/health_strip.py; this widget only draws them."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolTip, QVBoxLayout, QWidget

from traindeck.backend.monitor import HealthSpan, HealthTimeline, span_at, step_at
from traindeck.gui.widgets.charts import TimeSeriesChart

STRIP_HEIGHT = 22
AXIS_WIDTH = 64  # the utilisation chart's y axis gets the same width, so the strips line up with its plot area
MAX_TICKS = 400  # step ticks drawn in view at most (a denser run shows every n-th; the tooltip names each step)

# (light, dark) per state, and per throttling reason: warm colours for heat and power, magenta for an XID.
COLOURS: dict[str, tuple[str, str]] = {
    "ok": ("#9ad29a", "#3f7a45"),
    "unknown": ("#d0d0d0", "#555555"),
    "pcie": ("#6fa8dc", "#4f86c0"),
    "xid": ("#d0107a", "#ff4fb0"),
    "sw_power_cap": ("#f0b429", "#e0a800"),
    "hw_power_brake_slowdown": ("#c77c02", "#d98e1a"),
    "sw_thermal_slowdown": ("#e8743b", "#f08a50"),
    "hw_thermal_slowdown": ("#c62828", "#ef5350"),
    "hw_slowdown": ("#8e44ad", "#b574d0"),
}
LEGEND = (("ok", "ok"), ("sw_power_cap", "power cap"), ("hw_power_brake_slowdown", "power brake"),
          ("sw_thermal_slowdown", "thermal (driver)"), ("hw_thermal_slowdown", "thermal (hardware)"),
          ("hw_slowdown", "hardware slowdown"), ("pcie", "PCIe below max while busy"), ("xid", "XID"))


def colour_key(span: HealthSpan) -> str:
    """The colour a span is drawn in: its state's, or for throttling its first reason's."""
    return span.reasons[0] if span.state == "throttled" and span.reasons else span.state


class _Strip:
    """One GPU's strip: a plot without axes' words but the GPU's name, x linked to the utilisation chart."""

    def __init__(self, gpu: int, leader: TimeSeriesChart) -> None:
        self.gpu = gpu
        self.widget = pg.PlotWidget()
        self.widget.setFixedHeight(STRIP_HEIGHT)
        item = self.widget.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(x=False, y=False)  # the chart above is the one to zoom; the strip follows it
        item.hideAxis("bottom")
        item.setContentsMargins(0, 0, 0, 0)
        axis = item.getAxis("left")
        axis.setWidth(AXIS_WIDTH)
        axis.setTicks([[(0.5, f"GPU {gpu}")], []])
        axis.setStyle(tickLength=0)
        item.setYRange(0, 1, padding=0)
        item.setXLink(leader.plot_item)
        self.bars = pg.BarGraphItem(x0=[], x1=[], y0=[], y1=[], brushes=[], pen=pg.mkPen(None))  # no outlines
        self.ticks = pg.PlotDataItem([], [], connect="pairs")
        item.addItem(self.bars)
        item.addItem(self.ticks)


class HealthStrips(QWidget):
    """The strips of every GPU seen, under `leader` (the utilisation chart). `add_reading` takes live readings,
    `set_recorded` a recording's (merged with the live ones), `set_steps` the run's step ends."""

    def __init__(self, leader: TimeSeriesChart) -> None:
        super().__init__()
        self.leader = leader
        self.timeline = HealthTimeline()
        self.steps: list[tuple[float, int]] = []  # [(end time, step)], oldest first
        self.until = 0.0  # the newest reading's time: the last span reaches it
        self.strips: dict[int, _Strip] = {}
        self.spans: dict[int, list[HealthSpan]] = {}
        leader.set_axis_width(AXIS_WIDTH)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self._column = QVBoxLayout(self)
        self._column.setContentsMargins(0, 0, 0, 0)
        self._column.setSpacing(1)
        row = QHBoxLayout()
        row.setContentsMargins(AXIS_WIDTH, 0, 0, 0)
        row.addWidget(self.legend)
        self._column.addLayout(row)
        self._fill_legend()
        leader.plot_item.getViewBox().sigXRangeChanged.connect(lambda *_: self._draw_ticks())
        self.setVisible(False)  # until a GPU's health is read

    # ------------------------------------------------------------------------------------------------ data
    def add_reading(self, gpu: int, t: float, row: Mapping[str, Any]) -> None:
        """A live reading (GpuHealth as a dict with "util"); the strip is redrawn up to `t`."""
        self._strip(gpu)
        self.timeline.add(gpu, t, row)
        self.until = max(self.until, t)
        self._draw(gpu)

    def set_recorded(self, changes: Iterable[tuple[int, float, Mapping[str, Any]]], until: float | None = None) -> None:
        """A run's recorded health rows (read_gpu_health's), merged with the live readings held."""
        held: dict[int, list[tuple[float, Mapping[str, Any]]]] = {
            gpu: list(rows) for gpu, rows in self.timeline.rows.items()}
        self.timeline.clear()
        merged: dict[int, list[tuple[float, Mapping[str, Any]]]] = {}
        for gpu, t, row in changes:
            merged.setdefault(gpu, []).append((t, row))
        for gpu, rows in held.items():
            merged.setdefault(gpu, []).extend(rows)
        for gpu, rows in merged.items():
            self._strip(gpu)
            for t, row in sorted(rows, key=lambda r: r[0]):
                self.timeline.add(gpu, t, row)
            self.until = max(self.until, rows[-1][0] if rows else 0.0, until or 0.0)
        self.redraw()

    def set_steps(self, steps: Sequence[tuple[float, int]]) -> None:
        self.steps = sorted((float(t), int(step)) for t, step in steps)
        self._draw_ticks()

    def clear(self) -> None:
        self.timeline.clear()
        self.steps, self.until = [], 0.0
        for strip in self.strips.values():
            self._column.removeWidget(strip.widget)
            strip.widget.deleteLater()
        self.strips.clear()
        self.spans.clear()
        self.setVisible(False)

    # ---------------------------------------------------------------------------------------------- drawing
    def _strip(self, gpu: int) -> _Strip:
        strip = self.strips.get(gpu)
        if strip is None:
            strip = self.strips[gpu] = _Strip(gpu, self.leader)
            strip.widget.scene().sigMouseMoved.connect(lambda pos, s=strip: self._hover(s, pos))
            self._column.insertWidget(len(self.strips) - 1, strip.widget)
            self._theme(strip)
            self.setVisible(True)
        return strip

    def redraw(self) -> None:
        for gpu in self.strips:
            self._draw(gpu)
        self._draw_ticks()

    def _draw(self, gpu: int) -> None:
        strip = self.strips[gpu]
        spans = self.spans[gpu] = self.timeline.spans(gpu, self.until)
        dark = self._dark()
        brushes = [pg.mkBrush(QColor(COLOURS.get(colour_key(s), COLOURS["unknown"])[dark])) for s in spans]
        strip.bars.setOpts(x0=[s.start for s in spans], x1=[s.end for s in spans], y0=[0.0] * len(spans),
                           y1=[1.0] * len(spans), brushes=brushes)

    def _draw_ticks(self) -> None:
        if not self.strips:
            return
        low, high = self.leader.plot_item.getViewBox().viewRange()[0]
        ends = np.array([t for t, _ in self.steps if low <= t <= high], dtype=float)
        if len(ends) > MAX_TICKS:
            ends = ends[:: -(-len(ends) // MAX_TICKS)]
        x = np.repeat(ends, 2)
        y = np.tile(np.array([0.0, 0.4]), len(ends))
        pen = pg.mkPen(self.palette().color(QPalette.ColorRole.Text), width=1)
        for strip in self.strips.values():
            strip.ticks.setData(x, y, connect="pairs", pen=pen)

    def hover_text(self, gpu: int, t: float) -> str:
        """What the strip of `gpu` says at time `t`: the state (and why), the step then running."""
        span = span_at(self.spans.get(gpu, []), t)
        if span is None:
            return ""
        step = step_at(self.steps, t)
        return f"GPU {gpu}: {span.text}" + (f" · step {step}" if step is not None else "")

    def _hover(self, strip: _Strip, pos: QPointF) -> None:
        view = strip.widget.getPlotItem().getViewBox()
        if not view.sceneBoundingRect().contains(pos):
            return
        t = view.mapSceneToView(pos).x()
        text = self.hover_text(strip.gpu, t)
        QToolTip.showText(strip.widget.mapToGlobal(strip.widget.mapFromScene(pos).toPoint()), text, strip.widget)

    # ------------------------------------------------------------------------------------------------ theme
    def _dark(self) -> int:
        return 1 if self.palette().color(QPalette.ColorRole.Base).lightness() < 128 else 0

    def _theme(self, strip: _Strip) -> None:
        palette = self.palette()
        strip.widget.setBackground(palette.color(QPalette.ColorRole.Base))
        axis = strip.widget.getPlotItem().getAxis("left")
        axis.setPen(pg.mkPen(palette.color(QPalette.ColorRole.Base)))
        axis.setTextPen(pg.mkPen(palette.color(QPalette.ColorRole.Text)))

    def _fill_legend(self) -> None:
        dark = self._dark()
        chips = [f"<span style='color:{COLOURS[key][dark]}'>&#9632;</span>&nbsp;"
                 + html.escape(words).replace(" ", "&nbsp;") for key, words in LEGEND]
        self.legend.setText("<small>Health: " + " &nbsp; ".join(chips) + " &nbsp; ticks:&nbsp;step&nbsp;ends</small>")

    def changeEvent(self, event: Any) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() in (event.Type.PaletteChange, event.Type.ApplicationPaletteChange):
            for strip in self.strips.values():
                self._theme(strip)
            self._fill_legend()
            self.redraw()

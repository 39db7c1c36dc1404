"""History's overlay: the compared runs' curves of one metric on one chart, one colour a run; x by step, wall time or
each run's time since its start, y linear or log (the Runs page's choices, remembered on their own).

The metric is chosen among those every compared run logged with step numbers (loss unless chosen). "Compare at equal
steps" cuts every curve at the last step all the runs reached, so a run stopped at step 216 is not set beside one
that ended at 100 as if both had finished. "Smoothing" is the Runs page's (TensorBoard's debiased EMA, each smoothed
curve over its faint raw line), remembered on its own; a curve of fewer than FEW_POINTS points is drawn as logged,
its points marked, and the note says so while smoothing is on. The curves are `traindeck.backend.runs.overlay`, read on the
thread pool from the run store the page names; this panel draws them on a `TimeSeriesChart`. While a compared run is
live the page's refresh asks `follow()`: only the points its live runs logged since are read
(`traindeck.backend.runs.extend_overlay`), and nothing once none is live."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from traindeck.backend.runs import Overlay, OverlayCurve, RunStore, XMode, extend_overlay, overlay
from traindeck.gui.context import AppContext
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.run_leftovers import one_line
from traindeck.gui.widgets.smoothing_slider import SmoothingSlider


def _overlay(store_path: Path, ids: list[str], metric: str | None, equal_steps: bool) -> Overlay:
    with RunStore(store_path) as store:
        return overlay(store, ids, metric, equal_steps)


def _extended(store_path: Path, previous: Overlay, equal_steps: bool) -> Overlay:
    with RunStore(store_path) as store:
        return extend_overlay(store, previous, equal_steps)


FEW_POINTS = 20  # a curve of fewer points has them marked
SMOOTHING_KEY = "history/overlay/smoothing"
LOG_Y_KEY = "history/overlay/log_y"
X_MODE_KEY = "history/overlay/x_mode"
# As the Runs page's charts offer them; "since start" is each run's own time since it started (runs started hours
# apart set side by side).
X_CHOICES: tuple[tuple[str, XMode], ...] = (("Step", "step"), ("Wall time", "time"), ("Time since start", "relative"))


def curve_x(curve: OverlayCurve, mode: XMode) -> list[float] | list[int]:
    """A curve's x for the axis `mode`: its steps, when each point was logged, or the seconds since its run's start."""
    if mode == "time":
        return curve.times
    if mode == "relative":
        return curve.since_start()
    return curve.steps


class OverlayPanel(QWidget):
    """The compared runs' curves of one metric; `result` holds the overlay drawn last."""

    def __init__(self, ctx: AppContext, store_path: Callable[[], Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._store_path = store_path
        self._ids: list[str] = []
        self._metric: str | None = None  # chosen by the user; None: loss (or the first shared metric like it)
        self._asked = 0  # the newest read: an older answer arriving late is dropped
        self._answered = 0  # the newest read answered (a live run's next read waits while one is on its way)
        self._stale = False  # a live run logged while the panel was hidden: read when it is shown
        self.result: Overlay | None = None
        settings = ctx.settings
        self.log_y = str(settings.value(LOG_Y_KEY, "false")).lower() == "true"
        mode = str(settings.value(X_MODE_KEY, "step"))
        self.x_mode: XMode = next((m for _, m in X_CHOICES if m == mode), "step")

        self.metric_box = QComboBox()
        self.metric_box.setToolTip("The metric to draw: those every compared run logged with step numbers")
        self.metric_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.metric_box.currentTextChanged.connect(self._metric_chosen)
        label = QLabel("&Metric:")
        label.setBuddy(self.metric_box)
        self.equal_steps = QCheckBox("Compare at &equal steps")
        self.equal_steps.setToolTip("Cut every run's curve at the last step all of them reached, so that each "
                                    "curve's last value (in the legend) is taken at the same step")
        self.equal_steps.toggled.connect(lambda _on: self._read())
        self.note = QLabel("Compare runs to overlay their curves.")
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.smoothing = SmoothingSlider(ctx.settings, SMOOTHING_KEY)
        self.chart = TimeSeriesChart("loss", smoothing=self.smoothing.weight, log_y=self.log_y, x_mode=self.x_mode)
        self.log_box = QCheckBox("Log &y")
        self.log_box.setToolTip("A log scale for y; values <= 0 are left out (the chart says how many)")
        self.log_box.setChecked(self.log_y)
        self.log_box.toggled.connect(self.set_log_y)
        self.x_box = QComboBox()
        self.x_box.setToolTip("The x axis: the step, the wall-clock time, or each run's time since it started")
        for text, choice in X_CHOICES:
            self.x_box.addItem(f"x: {text}", choice)
        self.x_box.setCurrentIndex(max(0, self.x_box.findData(self.x_mode)))
        self.x_box.currentIndexChanged.connect(lambda index: self.set_x_mode(self.x_box.itemData(index)))
        self.smoothing.changed.connect(self._smoothing_changed)
        self.chart.mark_points_below = FEW_POINTS  # short runs (a trial's candidates): points, not a speck

        bar = QHBoxLayout()
        bar.addWidget(label)
        bar.addWidget(self.metric_box)
        bar.addWidget(self.equal_steps)
        bar.addSpacing(12)
        bar.addWidget(self.smoothing)
        bar.addWidget(self.log_box)
        bar.addWidget(self.x_box)
        bar.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.note)
        layout.addWidget(self.chart, 1)

    def show_runs(self, ids: Sequence[str]) -> None:
        """Overlay these runs' curves (in this order: A, B, ...)."""
        self._ids = list(ids)
        self._read()

    def choose_metric(self, metric: str) -> None:
        self._metric = metric
        self._read()

    def _smoothing_changed(self, weight: float) -> None:
        self.chart.smoothing = weight
        if self.result is not None:  # whether the note names curves the smoothing leaves as logged
            self.note.setText(self._note(self.result, weight))

    def set_log_y(self, on: bool) -> None:
        """A log scale for y; remembered."""
        self.log_y = bool(on)
        self.ctx.settings.setValue(LOG_Y_KEY, self.log_y)
        if self.log_box.isChecked() != self.log_y:
            self.log_box.setChecked(self.log_y)
        self.chart.log_y = self.log_y

    def set_x_mode(self, mode: XMode) -> None:
        """x by "step", "time" (wall clock) or "relative" (each run's time since its start); remembered."""
        if mode == self.x_mode:
            return
        self.x_mode = mode
        self.ctx.settings.setValue(X_MODE_KEY, mode)
        self.x_box.setCurrentIndex(max(0, self.x_box.findData(mode)))
        if self.result is not None:
            self._draw(self.result, fresh=True)
            self.chart.follow()  # the old range is in the other axis' units

    # ---- a live run's new points ----------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """A run of the overlay shown was running when it was read: its curve grows."""
        return self.result is not None and bool(self.result.live)

    def follow(self) -> None:
        """The page's refresh: the points the live runs logged since the last read, if any is live (shown now, or
        when the panel is shown again)."""
        if not self.live or not self._ids:
            return
        if not self.isVisible():
            self._stale = True
            return
        if self._answered != self._asked:
            return  # a read is on its way (a choice of the user's, or the previous tick's)
        assert self.result is not None
        self._stale = False
        self._asked += 1
        asked = self._asked
        self.ctx.tasks.run(_extended, self._store_path(), self.result, self.equal_steps.isChecked(),
                           done=lambda result: self._show(asked, result),
                           failed=lambda error: self._failed(asked, str(error)))

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        if self._stale:
            self.follow()

    def _metric_chosen(self, metric: str) -> None:
        if metric and (self.result is None or metric != self.result.metric):
            self.choose_metric(metric)

    def _read(self) -> None:
        if not self._ids:
            return
        self._asked += 1
        asked = self._asked
        self.note.setText("Reading the curves…")
        self.ctx.tasks.run(_overlay, self._store_path(), self._ids, self._metric, self.equal_steps.isChecked(),
                           done=lambda result: self._show(asked, result),
                           failed=lambda error: self._failed(asked, str(error)))

    def _failed(self, asked: int, error: str) -> None:
        if asked == self._asked:
            self._answered = asked
            self.note.setText(f"Cannot read the curves: {one_line(error)}")

    def _show(self, asked: int, result: Overlay) -> None:
        if asked != self._asked:
            return  # a newer choice was made while this one was read
        self._answered = asked
        before = self.result
        self.result = result
        names = list(result.metrics) if result.metric in result.metrics else [result.metric, *result.metrics]
        self.metric_box.blockSignals(True)
        if [self.metric_box.itemText(i) for i in range(self.metric_box.count())] != names:
            self.metric_box.clear()
            self.metric_box.addItems(names)
        self.metric_box.setCurrentText(result.metric)
        self.metric_box.blockSignals(False)
        # A live run's newer points: the same curves redrawn in place (the user's zoom is kept); else anew.
        same = before is not None and before.metric == result.metric and \
            [c.label for c in before.curves] == [c.label for c in result.curves]
        self._draw(result, fresh=not same)
        self.note.setText(self._note(result, self.chart.smoothing))

    def _draw(self, result: Overlay, fresh: bool) -> None:
        if fresh:
            self.chart.clear()
            self.chart.set_title(result.metric)
        self.chart.x_mode = self.x_mode
        for curve in result.curves:
            self.chart.set_series(curve.label, curve_x(curve, self.x_mode), curve.values)
        self.chart.flush()

    @staticmethod
    def _note(result: Overlay, smoothing: float = 0.0) -> str:
        live = [c.label.split(":")[0] for c in result.curves if c.run_id in result.live]
        running = (f"{' and '.join(live)} {'is' if len(live) == 1 else 'are'} running: the curves follow. "
                   if live else "")
        return running + OverlayPanel._ends(result) + OverlayPanel._as_logged(result, smoothing)

    @staticmethod
    def _as_logged(result: Overlay, smoothing: float) -> str:
        """The curves drawn marked (fewer than FEW_POINTS points) are not smoothed: said while others are, so a
        smoothed curve is not read against a raw one unawares."""
        if smoothing <= 0:
            return ""
        counts = {c.label.split(":")[0]: int(np.count_nonzero(np.isfinite(np.asarray(c.values, dtype=float))))
                  for c in result.curves}
        marked = [label for label, count in counts.items() if 0 < count < FEW_POINTS]
        smoothed = [label for label, count in counts.items() if count >= FEW_POINTS]
        if not marked:
            return ""
        if not smoothed:
            return f" Every curve has fewer than {FEW_POINTS} points: drawn as logged (points marked), not smoothed."
        return (f" {' and '.join(marked)} {'has' if len(marked) == 1 else 'have'} fewer than {FEW_POINTS} points: "
                f"drawn as logged (points marked), not smoothed like {' and '.join(smoothed)}.")

    @staticmethod
    def _ends(result: Overlay) -> str:
        if not any(c.steps for c in result.curves):
            return f"None of these runs logged {result.metric} with step numbers."
        ends = ", ".join(f"{c.label.split(':')[0]} at {c.last_step}" for c in result.curves if c.last_step is not None)
        if not result.steps_differ:
            return f"Every run ends at step {result.common_step}."
        if result.equal_steps:
            return f"Cut at step {result.common_step}, the last step all runs reached (they end: {ends})."
        return (f"The runs end at different steps ({ends}): tick \"Compare at equal steps\" to compare them at step "
                f"{result.common_step}.")

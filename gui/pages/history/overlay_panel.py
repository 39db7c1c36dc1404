"""History's overlay: the compared runs' curves of one metric on one chart, x by step, one colour a run.

The metric is chosen among those every compared run logged with step numbers (loss unless chosen). "Compare at equal
steps" cuts every curve at the last step all the runs reached, so a run stopped at step 216 is not set beside one
that ended at 100 as if both had finished. "Smoothing" is the Runs page's (TensorBoard's debiased EMA, each smoothed
curve over its faint raw line), remembered on its own. The curves are `traindeck.backend.runs.overlay`, read on the
thread pool from the run store the page names; this panel draws them on a `TimeSeriesChart`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from traindeck.backend.runs import Overlay, RunStore, overlay
from traindeck.gui.context import AppContext
from traindeck.gui.widgets.charts import TimeSeriesChart
from traindeck.gui.widgets.run_leftovers import one_line
from traindeck.gui.widgets.smoothing_slider import SmoothingSlider


def _overlay(store_path: Path, ids: list[str], metric: str | None, equal_steps: bool) -> Overlay:
    with RunStore(store_path) as store:
        return overlay(store, ids, metric, equal_steps)


FEW_POINTS = 20  # a curve of fewer points has them marked
SMOOTHING_KEY = "history/overlay/smoothing"


class OverlayPanel(QWidget):
    """The compared runs' curves of one metric; `result` holds the overlay drawn last."""

    def __init__(self, ctx: AppContext, store_path: Callable[[], Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._store_path = store_path
        self._ids: list[str] = []
        self._metric: str | None = None  # chosen by the user; None: loss (or the first shared metric like it)
        self._asked = 0  # the newest read: an older answer arriving late is dropped
        self.result: Overlay | None = None

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
        self.chart = TimeSeriesChart("loss", x_is_time=False, smoothing=self.smoothing.weight)
        self.smoothing.changed.connect(self._smoothing_changed)
        self.chart.mark_points_below = FEW_POINTS  # short runs (a trial's candidates): points, not a speck

        bar = QHBoxLayout()
        bar.addWidget(label)
        bar.addWidget(self.metric_box)
        bar.addWidget(self.equal_steps)
        bar.addSpacing(12)
        bar.addWidget(self.smoothing)
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
            self.note.setText(f"Cannot read the curves: {one_line(error)}")

    def _show(self, asked: int, result: Overlay) -> None:
        if asked != self._asked:
            return  # a newer choice was made while this one was read
        self.result = result
        names = list(result.metrics) if result.metric in result.metrics else [result.metric, *result.metrics]
        self.metric_box.blockSignals(True)
        if [self.metric_box.itemText(i) for i in range(self.metric_box.count())] != names:
            self.metric_box.clear()
            self.metric_box.addItems(names)
        self.metric_box.setCurrentText(result.metric)
        self.metric_box.blockSignals(False)
        self.chart.clear()
        self.chart.set_title(result.metric)
        for curve in result.curves:
            self.chart.set_series(curve.label, curve.steps, curve.values)
        self.chart.flush()
        self.note.setText(self._note(result))

    @staticmethod
    def _note(result: Overlay) -> str:
        if not any(c.steps for c in result.curves):
            return f"None of these runs logged {result.metric} with step numbers."
        ends = ", ".join(f"{c.label.split(':')[0]} at {c.last_step}" for c in result.curves if c.last_step is not None)
        if not result.steps_differ:
            return f"Every run ends at step {result.common_step}."
        if result.equal_steps:
            return f"Cut at step {result.common_step}, the last step all runs reached (they end: {ends})."
        return (f"The runs end at different steps ({ends}): tick \"Compare at equal steps\" to compare them at step "
                f"{result.common_step}.")

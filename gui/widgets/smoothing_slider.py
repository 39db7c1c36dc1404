"""`SmoothingSlider`: TensorBoard's smoothing weight (a debiased exponential moving average, 0 = off, up to 0.99)
chosen on a slider with its figure beside it, remembered in the settings under the key its owner gives. The Runs
page's charts and History's overlay both offer it; each chart draws the smoothed line over a faint raw one
(`TimeSeriesChart.smoothing`, the numbers from `backend.runs.ema`)."""

from __future__ import annotations

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QWidget

from traindeck.backend.runs import MAX_SMOOTHING
from traindeck.gui.theme import set_muted

DEFAULT_SMOOTHING = 0.6  # TensorBoard's default
STEPS = 100  # the slider moves in hundredths


class SmoothingSlider(QWidget):
    """"Smoothing [slider] 0.60": `weight` is the chosen weight; `changed` says a new one (also when set in code),
    after it was written to `settings` under `key`."""

    changed = Signal(float)

    def __init__(self, settings: QSettings, key: str, default: float = DEFAULT_SMOOTHING,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings, self._key = settings, key
        self.weight = self.remembered(settings, key, default)
        title = QLabel("Smoothing")
        set_muted(title)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, round(MAX_SMOOTHING * STEPS))
        self.slider.setValue(round(self.weight * STEPS))
        self.slider.setMaximumWidth(120)
        self.slider.setToolTip("Smoothing as TensorBoard's (a debiased exponential moving average); the raw line "
                               "stays faint behind. 0 = off")
        title.setBuddy(self.slider)
        self.figure = QLabel(f"{self.weight:.2f}")
        self.slider.valueChanged.connect(lambda value: self.set_weight(value / STEPS))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(title)
        layout.addWidget(self.slider)
        layout.addWidget(self.figure)

    @staticmethod
    def remembered(settings: QSettings, key: str, default: float = DEFAULT_SMOOTHING) -> float:
        """The weight remembered under `key` (`default` when none or unreadable), clamped to 0..0.99."""
        return _clamp(_float(settings.value(key, default), default))

    def set_weight(self, weight: float) -> None:
        """Choose `weight` (clamped to 0..0.99): shown, remembered, and announced by `changed`."""
        self.weight = _clamp(weight)
        self.figure.setText(f"{self.weight:.2f}")
        if self.slider.value() != round(self.weight * STEPS):
            self.slider.blockSignals(True)
            self.slider.setValue(round(self.weight * STEPS))
            self.slider.blockSignals(False)
        self._settings.setValue(self._key, self.weight)
        self.changed.emit(self.weight)


def _clamp(weight: float) -> float:
    return min(MAX_SMOOTHING, max(0.0, float(weight)))


def _float(value: object, default: float) -> float:
    try:
        return float(value)  # type: ignore[arg-type]  # a str or a float from QSettings
    except (TypeError, ValueError):
        return default

"""The charts' axes and words: values written as people read them (12.3 GiB, 850 MiB/s, 45 %), a y axis that
puts the unit on each tick (byte units in powers of two) and, on a log scale, labels as many ticks as its height
holds apart (log_ticks: a grid cell 150 px high gets two or three), the legend's sample line, and time axes
(clock time in whole seconds, time since a start) whose labels fit the chart (fitted_ticks: two at least on a
220 px chart, none cut at its edge). Used by charts.py and the Monitor's charts."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QFontMetricsF, QPen

from traindeck.backend.core import duration_text

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _binary_scale(value: float) -> int:
    """Index into _BINARY so that value / 1024**index is below 1024."""
    value = abs(value)
    index = 0
    while value >= 1024 and index < len(_BINARY) - 1:
        value /= 1024
        index += 1
    return index


def format_value(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A value as people read it: 12.3 GiB, 850 MiB/s, 45 %, 250 W, 61 °C; "-" for None/NaN. Byte values under
    1 KiB are whole bytes (512 B; "<1 B" for a fraction of one)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("B", "B/s"):
        suffix = "/s" if unit == "B/s" else ""
        if abs(value) < 1023.5:  # bytes are whole: under 1 KiB, a count of bytes without decimals
            whole = round(value)
            return f"<1 B{suffix}" if whole == 0 and value != 0 else f"{whole} B{suffix}"
        index = max(1, _binary_scale(value))  # 1023.5 up to 1024 B reads 1 KiB
        scaled = value / 1024**index
        return f"{_significant(scaled, digits)} {_BINARY[index]}{suffix}"
    text = _significant(value, digits)
    return f"{text} {unit}" if unit else text


def _significant(value: float, digits: int) -> str:
    if value == 0:
        return "0"
    magnitude = int(math.floor(math.log10(abs(value))))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 x 10^n not below raw."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    exponent = math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        step = factor * 10**exponent
        if step >= raw * (1 - 1e-9):
            return step
    return 10.0 ** (exponent + 1)


def _decimals(step: float) -> int:
    """Enough decimals to write multiples of `step` exactly (0.25 -> 2, 0.5 -> 1, 5 -> 0), at most 4."""
    if step <= 0 or not math.isfinite(step):
        return 0
    for decimals in range(5):
        scaled = step * 10**decimals
        if abs(scaled - round(scaled)) < 1e-6 * max(1.0, scaled):
            return decimals
    return 4


class UnitAxisItem(pg.AxisItem):
    """A y axis that writes the unit on each tick; byte units step in powers of two (0.5 GiB, 1 GiB, ...)."""

    def __init__(self, unit: str, orientation: str = "left", **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self.unit = unit
        self.enableAutoSIPrefix(False)

    def _is_bytes(self) -> bool:
        return self.unit in ("B", "B/s")

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802
        if not self._is_bytes() or self.logMode:
            return super().tickSpacing(minVal, maxVal, size)
        span = abs(maxVal - minVal)
        if span == 0 or not math.isfinite(span):
            return []
        scale = 1024 ** _binary_scale(max(abs(minVal), abs(maxVal)))
        target = max(2.0, size / 45.0)  # about one labelled tick per 45 px
        major = _nice_step(span / scale / target) * scale
        return [(major, 0.0), (major / 2, 0.0)]

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float | None, list[float]]]:  # noqa: N802
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        labelled, plain = log_ticks(minVal, maxVal, size, self._text_height())
        return [(1.0, labelled), (None, plain)]  # spacing None: the unlabelled level (see tickStrings)

    def _text_height(self) -> float:
        font = self.style["tickFont"]
        return QFontMetricsF(font if font is not None else self.font()).height()

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not values:
            return []
        if self.logMode:  # values are powers of ten: 10^-3 reads 0.001; the unlabelled level (None) stays blank
            return [""] * len(values) if spacing is None else log_labels(values, self.unit)
        if self._is_bytes():
            # One unit for the whole axis (from its range, not these values: minor ticks come separately).
            index = _binary_scale(max(abs(self.range[0]), abs(self.range[1]), *(abs(v) for v in values)))
            unit_scale = 1024**index
            decimals = _decimals(spacing / unit_scale)
            suffix = _BINARY[index] + ("/s" if self.unit == "B/s" else "")
            return [f"{v / unit_scale:.{decimals}f} {suffix}" for v in values]
        suffix = f" {self.unit}" if self.unit else ""
        largest = max(abs(v) for v in values)
        # One notation per axis, from its range: pyqtgraph asks for major and minor ticks separately, and
        # deciding by each call's spacing wrote "0.001" beside "1.5e-03" on one axis.
        extent = max(abs(self.range[0]), abs(self.range[1]), largest)
        if spacing > 0 and (spacing < 1e-3 or extent < 1e-2 or extent >= 1e6):
            # Learning rates (1e-5) and token counts (1e9): fixed decimals would print 0.0000 or 13 digits.
            digits = min(4, max(0, math.floor(math.log10(largest or spacing)) - math.floor(math.log10(spacing))))
            return [("0" if v == 0 else f"{v:.{digits}e}") + suffix for v in values]
        decimals = _decimals(spacing)
        return [f"{v:.{decimals}f}{suffix}" for v in values]


def _log_set_values(low: float, high: float, kind: str, k: float) -> list[float]:
    """The log10 values within [low, high] of one candidate set: every k-th decade ("decades"), the mantissas 1, 3
    or 1, 2, 5 or 1 to 9 of each decade ("mantissas", k indexes LOG_MANTISSAS), or multiples of k ("linear")."""
    if kind == "decades":
        first, last = math.ceil(low / k - 1e-9), math.floor(high / k + 1e-9)
        return [float(n * k) for n in range(first, last + 1)]
    if kind == "mantissas":
        subs = LOG_MANTISSAS[int(k)]
        return [v for d in range(math.floor(low) - 1, math.ceil(high) + 1) for m in subs
                if low - 1e-9 <= (v := d + math.log10(m)) <= high + 1e-9]
    first, last = math.ceil(10**low / k - 1e-9), math.floor(10**high / k + 1e-9)
    return [math.log10(n * k) for n in range(max(1, first), last + 1)]


def _spaced(values: list[float], pixels_per_decade: float, gap: float) -> bool:
    return all((b - a) * pixels_per_decade >= gap for a, b in zip(values, values[1:], strict=False))


LOG_MANTISSAS = ((1, 3), (1, 2, 5), tuple(range(1, 10)))  # of each decade, sparse to dense
LOG_LABEL_GAP = 1.3  # labels of a log axis are at least this many text heights apart (centre to centre)
MAX_LOG_LABELS = 8  # and at most about this many on a long axis, however many decades it spans
MIN_TICK_GAP = 4.0  # px between unlabelled ticks (and their grid lines)


def log_ticks(low: float, high: float, pixels: float, text_height: float) -> tuple[list[float], list[float]]:
    """The ticks of a log axis showing log10 values `low` to `high` over `pixels`: (labelled, unlabelled), as log10
    values. The labels are the densest of these sets whose neighbours stay LOG_LABEL_GAP text heights apart: every
    n-th decade, each decade's 1 and 3, its 1, 2 and 5, or 1 to 9; a view too narrow to hold two of those (a loss
    between 2.9 and 3.1) is labelled at round linear steps (2.9, 3, 3.1). The unlabelled ticks are each decade's 1
    to 9 where they stay MIN_TICK_GAP apart, else the decades."""
    low, high = sorted((float(low), float(high)))
    if not (math.isfinite(low) and math.isfinite(high)) or high - low <= 0 or pixels <= 0:
        return [], []
    per_decade = pixels / (high - low)
    gap = max(LOG_LABEL_GAP * text_height, pixels / MAX_LOG_LABELS)
    sets: list[list[float]] = []  # sparse to dense
    k = 1.0
    while k < 2 * (high - low):
        k *= 10
    while k >= 1:
        for factor in (1.0, 0.5, 0.2):
            if k * factor >= 1 and k * factor == round(k * factor):
                sets.append(_log_set_values(low, high, "decades", k * factor))
        k /= 10
    sets += [_log_set_values(low, high, "mantissas", i) for i in range(len(LOG_MANTISSAS))]
    labelled = max((s for s in sets if _spaced(s, per_decade, gap)), key=len, default=[])
    if len(labelled) < 2 and high - low < 2 and high < 300:  # a narrow view: round steps of the values themselves
        span = 10**high - 10**low
        most = pixels / gap + 1  # more labels than this cannot be spaced apart
        step = 10.0 ** math.ceil(math.log10(span))
        while span / step <= most:
            for factor in (1.0, 0.5, 0.2):
                if span / (step * factor) <= most:
                    values = _log_set_values(low, high, "linear", step * factor)
                    if len(values) > len(labelled) and _spaced(values, per_decade, gap):
                        labelled = values
            step /= 10
    plain: list[float] = []
    for candidate in (_log_set_values(low, high, "mantissas", len(LOG_MANTISSAS) - 1),
                      _log_set_values(low, high, "decades", 1)):
        if _spaced(candidate, per_decade, MIN_TICK_GAP):
            plain = [v for v in candidate if all(abs(v - t) > 1e-9 for t in labelled)]
            break
    return labelled, plain


def log_labels(values: list[float], unit: str = "") -> list[str]:
    """The labels of log10 tick values, with the fewest significant digits (3 at least) that tell them apart."""
    labels: list[str] = []
    for digits in range(3, 8):
        labels = [format_value(10.0**v, unit, digits) for v in values]
        if len(set(labels)) == len(labels):
            break
    return labels


class LegendSample(pg.ItemSample):
    """A short thick line in the series' colour (pyqtgraph draws a triangle for filled curves); clicking it
    still hides or shows the series."""

    def paint(self, p: Any, *args: Any) -> None:
        if not self.item.isVisible():
            super().paint(p, *args)  # pyqtgraph's "hidden" eye
            return
        pen = QPen(pg.mkPen(self.item.opts["pen"]))
        pen.setWidthF(3.0)
        p.setPen(pen)
        p.drawLine(2, 11, 18, 11)


DAY = 86400
# Round steps of time, close to one another (mostly 1.5 times the one before, at most twice): a narrow axis finds
# one that puts two of its labels (35 to 55 px wide) inside it without crowding them, whatever the span.
_TIME_STEPS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 45, 60, 120, 180, 300, 600, 900, 1200, 1800, 2700, 3600, 5400, 7200,
               10800, 14400, 21600, 28800, 43200, 64800, DAY, 2 * DAY, 3 * DAY, 5 * DAY, 7 * DAY, 14 * DAY, 21 * DAY,
               28 * DAY)
# The roundest of them (1, 2, 5, 10, 15, 30 of a unit; hours that divide a day): what an axis with room labels.
ROUND_STEPS = frozenset((1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, DAY,
                         2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY))
LABEL_GAP = 10.0  # px at least between two labels of a time axis
TICK_PX = 80.0  # px between labelled ticks where the axis has room for two that far apart (a wide chart)


def duration_tick(seconds: float) -> str:
    """A tick (or the readout's x) of time since the start, to the nearest second, as the backend writes a
    duration ("1:30", "2 d 00:00:00"; "-0:30" left of the start)."""
    return duration_text(round(seconds))


def whole_seconds(axis: pg.DateAxisItem) -> None:
    """Clock-time ticks no finer than whole seconds (12:04:05): pyqtgraph's finest level, which it takes for a few
    seconds across a wide chart (a young run), writes "05.000", "05.500". (ClockAxisItem, the charts' own, never
    labels less than a second; this keeps pyqtgraph's zoom levels of spans beyond its steps alike.)"""
    axis.zoomLevels = OrderedDict((spacing, level) for spacing, level in axis.zoomLevels.items()
                                  if not any("%f" in spec.format for spec in level.tickSpecs))


def fitted_ticks(low: float, high: float, pixels: float, steps: tuple[float, ...],
                 ticks_of: Callable[[float], list[float]], label_of: Callable[[float, float], str],
                 width_of: Callable[[str], float]) -> tuple[float | None, list[float]]:
    """(step, labelled ticks) of a time axis showing `low`..`high` over `pixels`: of `steps` (finest first), the
    finest of the ROUND_STEPS whose labels are TICK_PX apart and LABEL_GAP clear of one another, two at least
    (12:05, 12:06, never 12:05:45 where minutes have room); failing that (a narrow chart), the sparsest of `steps`
    with two labels clear of one another (half that gap if need be); failing that (too narrow for two), the finest
    with one. A label whole inside the axis is centred on its tick, one at an end is moved in to
    end with the axis (as inside_labels draws it) where that leaves it clear of the next, else left out: none is
    cut. `ticks_of(step)` gives a step's ticks in low..high, `label_of(value, step)` a tick's label, `width_of(text)`
    its width in px."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low or pixels <= 0:
        return None, []
    scale = pixels / (high - low)
    widths: dict[str, float] = {}

    def width(text: str) -> float:  # each label measured once a call
        if text not in widths:
            widths[text] = width_of(text)
        return widths[text]

    narrowest = width("0:00")  # no label is narrower: steps closer than this are not measured at all
    candidates = [step for step in steps if step * scale >= narrowest + LABEL_GAP / 2]
    lone: tuple[float, list[float]] | None = None
    for step in [step for step in candidates if step * scale >= TICK_PX and step in ROUND_STEPS]:
        values = _labelled(low, scale, pixels, LABEL_GAP, step, ticks_of(step), label_of, width)
        if values is not None and len(values) >= 2:
            return step, values
        if values and lone is None:
            lone = (step, values)
    closer = candidates[::-1]  # the sparsest first
    for gap in (LABEL_GAP, LABEL_GAP / 2):
        for step in closer:
            values = _labelled(low, scale, pixels, gap, step, ticks_of(step), label_of, width)
            if values is not None and len(values) >= 2:
                return step, values
    return lone or (None, [])


def _labelled(low: float, scale: float, pixels: float, gap: float, step: float, ticks: list[float],
              label_of: Callable[[float, float], str], width_of: Callable[[str], float]) -> list[float] | None:
    """The ticks of one step that get a label (see fitted_ticks); None where the labels centred on their ticks
    crowd one another."""
    inner: list[tuple[float, float, float]] = []  # (value, left, right) of the labels centred on their ticks
    ends: list[tuple[float, float, float]] = []  # those moved in at an end
    for value in ticks:
        width = width_of(label_of(value, step))
        centred = (value - low) * scale - width / 2
        left = min(max(centred, 1.0), pixels - 1 - width)
        if width <= pixels - 2:
            (inner if left == centred else ends).append((value, left, left + width))
    if any(b[1] - a[2] < gap for a, b in zip(inner, inner[1:], strict=False)):
        return None
    placed = list(inner)
    for end in ends:  # in at an end where it stays clear of its neighbour
        if all(end[1] - other[2] >= gap or other[1] - end[2] >= gap for other in placed):
            placed.append(end)
    return sorted(value for value, _, _ in placed)


def inside_labels(axis: pg.AxisItem, draw: Callable[[], Any]) -> Any:
    """An x axis' draw specs (AxisItem.generateDrawSpecs, called as `draw`) with every label kept, a label that
    would stick out at an end moved in to end with the axis: pyqtgraph leaves such a label out, which on a narrow
    chart leaves one label, or none."""
    hide = axis.style["hideOverlappingLabels"]
    axis.style["hideOverlappingLabels"] = 1_000_000  # (a margin in px: none left out; moved in below)
    try:
        specs = draw()
    finally:
        axis.style["hideOverlappingLabels"] = hide
    if specs is None:
        return None
    line, ticks, texts = specs
    bounds = axis.mapRectFromParent(axis.geometry())
    moved = []
    for rect, flags, text in texts:
        rect = QRectF(rect)
        if rect.left() < bounds.left():
            rect.moveLeft(bounds.left())
        if rect.right() > bounds.right():
            rect.moveRight(bounds.right())
        moved.append((rect, flags, text))
    return line, ticks, moved


def label_width(axis: pg.AxisItem) -> Callable[[str], float]:
    """The width in px of a tick label of `axis`, in its tick font, as pyqtgraph measures it to draw it."""
    font = axis.style["tickFont"]
    metrics = QFontMetricsF(font if font is not None else axis.font())
    return lambda text: max(metrics.horizontalAdvance(text), metrics.boundingRect(text).width()) + 1


class ClockAxisItem(pg.DateAxisItem):
    """An x axis of clock time (UNIX seconds shown in local time) whose labels fit the chart: at round steps of
    whole seconds, minutes, hours or days (12:04:05, 12:05, 02 Jan at midnight), as many as stay TICK_PX apart, two
    at least where the axis holds two, and none cut at either end. Spans beyond four weeks are pyqtgraph's
    (months, years)."""

    def __init__(self, orientation: str = "bottom", **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self._fitted = True  # the ticks were chosen here (else by pyqtgraph's zoom levels, also their labels)

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802
        step, values = fitted_ticks(minVal, maxVal, size, _TIME_STEPS, lambda step: clock_ticks(minVal, maxVal, step),
                                    clock_label, label_width(self))
        if step is None or maxVal - minVal > 2 * _TIME_STEPS[-1]:
            self._fitted = False
            return super().tickValues(minVal, maxVal, size)
        self._fitted = True
        return [(step, values)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        if not self._fitted:
            return super().tickStrings(values, scale, spacing)
        return [clock_label(value, spacing) for value in values]

    def generateDrawSpecs(self, p: Any) -> Any:  # noqa: N802
        return inside_labels(self, lambda: super(ClockAxisItem, self).generateDrawSpecs(p))


def _utc_offset(t: float) -> float:
    """Seconds the local clock is ahead of UTC at `t`."""
    return float(time.localtime(t).tm_gmtoff)


def clock_ticks(low: float, high: float, step: float) -> list[float]:
    """The times in low..high on the local clock's round multiples of `step` seconds (12:05, 12:10; days from local
    midnight), through a change of summer time too."""
    offset = _utc_offset(low)
    ticks: list[float] = []
    k = math.ceil((low + offset) / step)
    while True:
        value = k * step - offset
        if step >= 3600:
            value -= _utc_offset(value) - offset  # local round hours and days where the offset changed since low
        if value > high:
            return ticks
        if value >= low:
            ticks.append(value)
        k += 1


def clock_label(value: float, step: float) -> str:
    """A clock-time tick's label at `step` seconds apart: 12:04:05 for steps of seconds, 12:05 for steps of
    minutes and hours, and the date (02 Jan) at midnight or at steps of days."""
    local = time.localtime(value)
    if step % 60:
        return time.strftime("%H:%M:%S", local)
    if step % DAY and (local.tm_hour, local.tm_min) != (0, 0):
        return time.strftime("%H:%M", local)
    return time.strftime("%d %b", local)


class DurationAxisItem(pg.AxisItem):
    """An x axis of seconds since the run's start, ticked at round durations (30 s, 5 min, 1 h) whose labels fit the
    chart as ClockAxisItem's do."""

    def __init__(self, orientation: str = "bottom", **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self.enableAutoSIPrefix(False)
        self.setLabel("time since start")

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:  # noqa: N802
        span = abs(maxVal - minVal)
        if span == 0 or not math.isfinite(span):
            return []
        steps = _TIME_STEPS
        if span > 2 * steps[-1]:  # months: whole days in 1, 2, 5 steps
            steps = (*steps, *(factor * 10**n * DAY for n in range(2, 4) for factor in (1, 2, 5)))

        def ticks_of(step: float) -> list[float]:
            return [k * step for k in range(math.ceil(minVal / step), math.floor(maxVal / step) + 1)]

        step, values = fitted_ticks(minVal, maxVal, size, steps, ticks_of, lambda value, _: duration_tick(value),
                                    label_width(self))
        return [(step, values)] if step is not None else []

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:  # noqa: N802
        return [duration_tick(v) for v in values]

    def generateDrawSpecs(self, p: Any) -> Any:  # noqa: N802
        return inside_labels(self, lambda: super(DurationAxisItem, self).generateDrawSpecs(p))

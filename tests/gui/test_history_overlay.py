"""History's overlay smoothed as the Runs page's charts are: TensorBoard's debiased EMA chosen on the same slider,
each smoothed curve over its faint raw line, the weight remembered in the settings. Real run directories, a real run
store, offscreen widgets."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402

from traindeck.backend.runs import ema  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

STEPS = 60


def _noisy_loss(started: float, seed: int) -> list[tuple[str, int, float, float, int]]:
    rng = np.random.default_rng(seed)
    return [("loss", s, started + 30 + s, float(3.0 * np.exp(-s / 30) + 0.5 + rng.normal(0, 0.2)), 0)
            for s in range(1, STEPS + 1)]


@pytest.fixture
def make_page(make_history_page):
    return lambda: make_history_page((1200, 800))


def _overlaid(qtbot, page, ids):
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == len(ids), timeout=10000)
    overlay = page.compare_panel.overlay
    page.compare_panel.tabs.setCurrentWidget(overlay)  # a hidden chart is not drawn
    page.run_table.select_runs(ids)
    page.compare_selected()
    qtbot.waitUntil(lambda: overlay.result is not None and len(overlay.result.curves) == len(ids), timeout=10000)
    overlay.chart.flush()
    return overlay


def test_overlay_smooths_each_curve_over_its_faint_raw_line_and_remembers_the_weight(qtbot, make_page):
    with RunStore() as store:
        runs = [make_run(store, f"noisy-{i}", started=T0 + 600 * i, steps=STEPS, samples=0, port=29600 + i,
                         metrics=_noisy_loss(T0 + 600 * i, i)) for i in range(2)]
    page = make_page()
    overlay = _overlaid(qtbot, page, [r.id for r in runs])
    chart = overlay.chart
    assert overlay.smoothing.weight == pytest.approx(0.6)  # TensorBoard's default, as on the Runs page
    assert chart.smoothing == pytest.approx(0.6)

    def drawn(weight: float) -> None:
        chart.flush()
        for name in chart.series_names():
            series = chart._series[name]
            raw = chart.data(name)[1]
            assert series.raw_curve is not None, name
            np.testing.assert_allclose(series.raw_curve.getData()[1], raw)
            np.testing.assert_allclose(series.curve.getData()[1], ema(raw, weight))
            assert series.raw_curve.opts["pen"].color().alpha() < series.curve.opts["pen"].color().alpha()

    drawn(0.6)
    overlay.smoothing.slider.setValue(90)  # as the user drags it
    assert overlay.smoothing.figure.text() == "0.90" and chart.smoothing == pytest.approx(0.9)
    drawn(0.9)

    # Remembered on its own key: a new window's overlay starts smoothed alike; the Runs page keeps its weight.
    again = make_page()
    assert again.compare_panel.overlay.smoothing.weight == pytest.approx(0.9)
    assert again.compare_panel.overlay.chart.smoothing == pytest.approx(0.9)
    assert page.ctx.settings.value("runs/charts/smoothing") is None

    overlay.smoothing.slider.setValue(0)  # off: one line a run, as logged
    chart.flush()
    assert all(chart._series[name].raw_curve is None for name in chart.series_names())
    np.testing.assert_allclose(chart._series[chart.series_names()[0]].curve.getData()[1],
                               chart.data(chart.series_names()[0])[1])


def test_runs_page_and_overlay_share_one_smoothing_widget(qtbot, make_page, make_runs_page):
    from traindeck.gui.widgets.smoothing_slider import SmoothingSlider

    overlay = make_page().compare_panel.overlay
    charts = make_runs_page().charts
    assert isinstance(overlay.smoothing, SmoothingSlider) and isinstance(charts.smoothing_choice, SmoothingSlider)
    charts.smoothing_slider.setValue(25)
    assert charts.smoothing == pytest.approx(0.25) and charts.smoothing_choice.figure.text() == "0.25"
    assert overlay.smoothing.weight == pytest.approx(0.6)  # each remembers its own

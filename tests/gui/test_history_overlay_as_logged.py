"""History's overlay of a short run beside a longer one with smoothing on: the short run's curve is drawn as logged
(its points marked) while the longer one is smoothed, and the note under the options says so, so a raw curve is not
read against a smoothed one unawares; with smoothing off the note says nothing of it. Real runs, a real run store,
offscreen widgets."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402

from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402


@pytest.fixture
def make_page(make_history_page):
    return lambda: make_history_page((1200, 800))


def test_the_note_names_the_curve_left_unsmoothed(qtbot, make_page):
    with RunStore() as store:
        longer = make_run(store, "long", started=T0, steps=100, samples=0, port=29720,
                          metrics=[("loss", s, T0 + s, 1.0 / s, 0) for s in range(1, 101)])
        short = make_run(store, "short", started=T0 + 300, steps=8, samples=0, port=29721,
                         metrics=[("loss", s, T0 + 300 + s, 1.0 / s, 0) for s in range(1, 9)])
    page = make_page()
    page.page_shown()
    qtbot.waitUntil(lambda: page.run_table.proxy.rowCount() == 2, timeout=10000)
    overlay = page.compare_panel.overlay
    page.compare_panel.tabs.setCurrentWidget(overlay)
    page.run_table.select_runs([longer.id, short.id])
    page.compare_selected()
    qtbot.waitUntil(lambda: overlay.result is not None and len(overlay.result.curves) == 2, timeout=10000)
    overlay.chart.flush()
    assert overlay.chart.smoothing > 0
    labels = {c.label.split(": ")[1]: c.label.split(":")[0] for c in overlay.result.curves}
    marked, smoothed = labels["short"], labels["long"]
    drawn = {c.opts["name"].split(": ")[1].split()[0]: c.opts["symbol"]
             for c in overlay.chart.plot_item.listDataItems() if c.opts.get("name")}
    assert drawn["short"] is not None and drawn["long"] is None  # the short curve as logged, marked
    note = overlay.note.text()
    assert f"{marked} has fewer than 20 points: drawn as logged (points marked), not smoothed like {smoothed}." \
        in note, note

    overlay.smoothing.slider.setValue(0)  # smoothing off: every curve as logged, nothing to say
    assert "not smoothed" not in overlay.note.text()
    overlay.smoothing.slider.setValue(60)
    assert "not smoothed" in overlay.note.text()

"""Both themes' text colours, computed from the palettes the app applies: every (text, background) pair people
read reaches WCAG AA 4.5:1 (issue 12: a run's subtitle and metric names were nearly invisible in the dark theme),
and secondary text follows a theme switch."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtGui import QColor, QPalette  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

from traindeck.gui.theme import READ_PAIRS, apply_theme, contrast, set_muted, theme_palette  # noqa: E402


def test_contrast_formula_matches_known_values():
    assert contrast(QColor("#000000"), QColor("#ffffff")) == pytest.approx(21.0)
    assert contrast(QColor("#777777"), QColor("#ffffff")) == pytest.approx(4.48, abs=0.01)
    half_black = QColor(0, 0, 0, 128)  # Qt's light placeholder text: 3.9:1 once blended over white
    assert contrast(half_black, QColor("#ffffff")) < 4.5


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_colour_reads_at_4_5_to_1(qapp, theme):
    palette = theme_palette(theme, qapp)
    low = []
    for text, background in READ_PAIRS:
        ratio = contrast(palette.color(QPalette.ColorGroup.Active, text),
                         palette.color(QPalette.ColorGroup.Active, background))
        if ratio < 4.5:
            low.append(f"{text.name} on {background.name}: {ratio:.2f}")
    assert not low, low


def test_muted_text_follows_a_theme_switch(qapp, qtbot):
    saved = QPalette(qapp.palette())
    try:
        label = QLabel("ZeRO-2 · cpu-demo · 2 processes")
        qtbot.addWidget(label)
        set_muted(label)
        apply_theme(qapp, "light")
        qapp.processEvents()
        apply_theme(qapp, "dark")
        qtbot.waitUntil(lambda: label.palette().color(QPalette.ColorRole.Window).lightness() < 100)
        shown = label.palette().color(label.foregroundRole())
        assert contrast(shown, label.palette().color(QPalette.ColorRole.Window)) >= 4.5
    finally:
        qapp.setPalette(saved)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_message_colours_read_on_the_theme_they_are_used_in(qapp, theme):
    from traindeck.gui.widgets.config_form import note_style
    from traindeck.gui.widgets.message_list import _STYLE

    palette = theme_palette(theme, qapp)
    window, base = palette.color(QPalette.ColorRole.Window), palette.color(QPalette.ColorRole.Base)
    column = 1 if theme == "light" else 2
    colours = {severity: style[column] for severity, style in _STYLE.items() if style[column]}
    label = QLabel()
    label.setPalette(palette)
    for severity in ("error", "warning"):
        colours[f"note {severity}"] = note_style(severity, label).removeprefix("color: ").rstrip(";")
    low = [f"{name} {colour}: {min(contrast(QColor(colour), window), contrast(QColor(colour), base)):.2f}"
           for name, colour in colours.items()
           if min(contrast(QColor(colour), window), contrast(QColor(colour), base)) < 4.5]
    assert not low, low


def test_the_focus_ring_around_a_splitters_pane_adds_no_pane(qapp, qtbot):
    from PySide6.QtCore import QPoint, QRect, Qt
    from PySide6.QtWidgets import QListWidget, QSplitter, QVBoxLayout, QWidget

    from traindeck.gui.theme import FOCUS_RING_WIDTH, FocusRing, show_keyboard_focus

    show_keyboard_focus(qapp)
    window = QWidget()
    qtbot.addWidget(window)
    splitter = QSplitter()
    pages, other = QListWidget(), QListWidget()
    splitter.addWidget(pages)
    splitter.addWidget(other)
    QVBoxLayout(window).addWidget(splitter)
    window.resize(600, 300)
    window.show()
    window.activateWindow()
    qtbot.waitActive(window)
    pages.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(pages.hasFocus)
    assert splitter.count() == 2  # the ring is not a third pane
    (ring,) = [r for r in window.findChildren(FocusRing) if r.isVisible()]
    around = QRect(pages.mapTo(ring.parentWidget(), QPoint(0, 0)), pages.size())
    grown = around.adjusted(-FOCUS_RING_WIDTH, -FOCUS_RING_WIDTH, FOCUS_RING_WIDTH, FOCUS_RING_WIDTH)
    assert ring.geometry() == grown.intersected(ring.parentWidget().rect())

"""Every character the dashboard's text can show is one the fonts it runs with draw: no emoji drawn as a box.

The characters are taken from the string literals of gui/ and backend/ (labels, tooltips, field descriptions,
messages); the font is DejaVu Sans, the sans-serif font of the Linux desktops and containers traindeck runs on.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtGui import QFont, QFontInfo, QFontMetrics  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2]


def _shown_characters() -> dict[str, str]:
    """Each non-ASCII character of a string literal, with the first place it is found."""
    found: dict[str, str] = {}
    for folder in ("gui", "backend"):
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type != tokenize.STRING and getattr(tokenize, "FSTRING_MIDDLE", None) != token.type:
                    continue
                for ch in token.string:
                    if ord(ch) > 127 and ch not in found:
                        found[ch] = f"{path.relative_to(PACKAGE)}:{token.start[0]}"
    return found


def test_every_character_in_the_ui_strings_is_drawn_by_the_font(qapp):
    font = QFont("DejaVu Sans")
    if QFontInfo(font).family() != "DejaVu Sans":
        pytest.skip("DejaVu Sans is not installed here")
    metrics = QFontMetrics(font)
    missing = {f"U+{ord(ch):04X} {ch} ({where})" for ch, where in _shown_characters().items()
               if ord(ch) > 0xFFFF or not metrics.inFontUcs4(ord(ch))}
    assert not missing, sorted(missing)

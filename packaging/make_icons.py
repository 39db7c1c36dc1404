"""Render packaging/icons/traindeck.svg to the PNG sizes desktops look for (hicolor 48, 128, 256).

    python packaging/make_icons.py        # writes packaging/icons/traindeck-{48,128,256}.png

Uses Qt's own SVG renderer (PySide6's QtSvg), so no Inkscape or rsvg is needed; works offscreen.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = (48, 128, 256)
HERE = Path(__file__).resolve().parent / "icons"


def render(svg: Path, size: int, out: Path) -> None:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    if not image.save(str(out), "PNG"):
        raise SystemExit(f"cannot write {out}")


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - fonts/painting need one
    svg = HERE / "traindeck.svg"
    for size in SIZES:
        out = HERE / f"traindeck-{size}.png"
        render(svg, size, out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The dashboard's pages. Each `*_page.py` module defines `PAGE`, a `Page` subclass; the main window finds them
here, so adding a page touches no other file."""

from __future__ import annotations

import importlib
import pkgutil

from traindeck.gui.pages.base import Page

# Listed for frozen builds, where walking the package may not see modules PyInstaller did not collect.
KNOWN = ("configure_page", "launch_page", "runs_page", "monitor_page", "estimate_page", "history_page")


def discover() -> list[type[Page]]:
    names = {m.name for m in pkgutil.iter_modules(__path__) if m.name.endswith("_page")} | set(KNOWN)
    found: list[type[Page]] = []
    for name in sorted(names):
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":  # a known page not written (yet): skip it
                continue
            raise
        page = getattr(module, "PAGE", None)
        if page is not None:
            found.append(page)
    return sorted(found, key=lambda p: p.order)

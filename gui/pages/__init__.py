"""The dashboard's pages. Each page is a package here whose `__init__` assembles its panels and defines `PAGE`, a
`Page` subclass; the main window finds them here, so adding a page touches no other file."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass

from traindeck.gui.context import AppContext
from traindeck.gui.pages.base import Page

# Listed for frozen builds, where walking the package may not see modules PyInstaller did not collect.
KNOWN = ("configure", "launch", "runs", "monitor", "estimate", "history", "queue")


def discover() -> list[type[Page]]:
    names = {m.name for m in pkgutil.iter_modules(__path__) if m.ispkg} | set(KNOWN)
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


@dataclass(frozen=True)
class PageEntry:
    """A page as the main window lists it before it is built: key, title and order read from the module's source.

    The module itself (and what it imports: numpy, pyqtgraph, the config schemas) loads only when the page is first
    built, which keeps the window's start to Qt and the first page shown. Calling the entry builds the page, like
    calling the class.
    """

    key: str
    title: str
    order: int
    module: str

    def load(self) -> type[Page]:
        return importlib.import_module(self.module).PAGE

    def __call__(self, ctx: AppContext) -> Page:
        return self.load()(ctx)


def discover_entries() -> list[PageEntry]:
    """Like discover(), without importing the page modules (a module whose attributes are not plain literals in its
    source, or whose source is not shipped, is imported to read them)."""
    names = {m.name for m in pkgutil.iter_modules(__path__) if m.ispkg} | set(KNOWN)
    found: list[PageEntry] = []
    for name in sorted(names):
        module = f"{__name__}.{name}"
        spec = importlib.util.find_spec(module)
        if spec is None:  # a known page not written (yet)
            continue
        entry = _entry_from_source(module, spec)
        if entry is None:
            page = getattr(importlib.import_module(module), "PAGE", None)
            if page is None:
                continue
            entry = PageEntry(page.key, page.title, page.order, module)
        found.append(entry)
    return sorted(found, key=lambda p: p.order)


def _entry_from_source(module: str, spec: importlib.machinery.ModuleSpec) -> PageEntry | None:
    try:
        source = spec.loader.get_source(module) if spec.loader is not None else None  # type: ignore[attr-defined]
    except (ImportError, OSError):
        source = None
    if not source:
        return None
    tree = ast.parse(source)
    page_class = next((node.value.id for node in tree.body if isinstance(node, ast.Assign)
                       and any(isinstance(t, ast.Name) and t.id == "PAGE" for t in node.targets)
                       and isinstance(node.value, ast.Name)), None)
    body = next((node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == page_class), None)
    if body is None:
        return None
    values: dict[str, object] = {}
    for node in body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            try:
                if isinstance(target, ast.Name) and value is not None:
                    values[target.id] = ast.literal_eval(value)
                elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    for t, v in zip(target.elts, value.elts, strict=True):
                        if isinstance(t, ast.Name):
                            values[t.id] = ast.literal_eval(v)
            except (ValueError, TypeError, SyntaxError):
                continue
    key, title, order = values.get("key"), values.get("title"), values.get("order")
    if not (isinstance(key, str) and isinstance(title, str) and isinstance(order, int)):
        return None
    return PageEntry(key, title, order, module)

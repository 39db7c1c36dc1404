"""The architecture's hard lines, checked by tools rather than left to convention."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

HEAVY = {"torch", "deepspeed", "accelerate", "transformers"}
QT = {"PySide6", "pyqtgraph", "shiboken6"}


def _imported_top_modules(path: Path) -> set[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add((node.module.split(".")[0], node.lineno))
            if node.module.startswith("traindeck.gui"):
                found.add(("traindeck.gui", node.lineno))
    return found


def test_backend_never_imports_qt_or_gui():
    offenders = []
    for path in sorted((REPO / "backend").rglob("*.py")):
        for module, line in _imported_top_modules(path):
            if module in QT or module == "traindeck.gui":
                offenders.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert offenders == []


def test_import_linter_contract_holds():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is part of the test extra"
    result = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gui_never_imports_training_libraries_at_module_level():
    offenders = []
    for path in sorted((REPO / "gui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: lazy imports inside functions are the allowed way
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n in HEAVY]
    assert offenders == []


def test_cli_start_does_not_import_heavy_or_qt_modules():
    code = (
        "import sys; from traindeck.backend.cli import build_parser; build_parser();"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in %r); print(bad); sys.exit(1 if bad else 0)"
        % (HEAVY | QT)
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_heavy_import_guard_sees_imports_even_after_an_earlier_test_loaded_torch(heavy_imports):
    import importlib

    with pytest.raises(ImportError, match="test guard"):
        importlib.import_module("torch.nn")
    assert heavy_imports == ["torch"]

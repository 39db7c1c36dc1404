"""The architecture's hard lines, checked by tools rather than left to convention."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

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


# The dashboard and the command line are the backend's clients: they import each package through its face (the
# package itself, whose __init__.pyi declares what it offers), never one of its modules, so modules can move inside
# a package without their callers changing. These modules are used whole, as a namespace, and are listed by name.
MODULES_USED_WHOLE = {
    "traindeck.backend.runs.control.leftbehind",  # `runs show`'s sections, field by field
    "traindeck.backend.runs.control.view",  # read_view and the stop actions, patched in the page tests
    "traindeck.backend.runs.record.log_follow",  # `logs --follow`, loaded only when following
    "traindeck.backend.runs.supervisor.alerts",  # the alert settings the Alerts dialog edits
}


def _backend_faces() -> set[str]:
    """`traindeck.backend.<package>` for every package, and the backend's top-level modules (crash, system_check)."""
    faces = set()
    for entry in (REPO / "backend").iterdir():
        if (entry / "__init__.py").is_file():
            faces.add(f"traindeck.backend.{entry.name}")
        elif entry.suffix == ".py" and entry.stem != "__init__":
            faces.add(f"traindeck.backend.{entry.stem}")
    return faces


def _names_of_face(dotted: str) -> set[str]:
    """The names a face declares (`from .module import name as name` in its __init__.pyi)."""
    stub = REPO.joinpath(*dotted.split(".")[1:], "__init__.pyi")
    if not stub.is_file():
        return set()
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    return {a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}


def _is_module(dotted: str) -> bool:
    where = REPO.joinpath(*dotted.split(".")[1:])
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _deep_backend_imports(path: Path, faces: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from package import module` imports that module
            # `from package import module` imports that module, unless the package's face declares that name
            modules = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}")
                       and a.name not in _names_of_face(node.module) else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in dict.fromkeys(modules):
            if not module.startswith("traindeck.backend.") or module in faces or module in MODULES_USED_WHOLE:
                continue
            if path.is_relative_to(REPO / "backend" / "cli") and module.startswith("traindeck.backend.cli"):
                continue  # the command line's own modules
            where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            found.append(f"{where}:{node.lineno}: {module}")
    return found


def test_the_dashboard_and_the_command_line_import_backend_packages_through_their_faces():
    faces = _backend_faces()
    clients = sorted((REPO / "gui").rglob("*.py")) + sorted((REPO / "backend" / "cli").rglob("*.py"))
    offenders = [line for path in clients for line in _deep_backend_imports(path, faces)]
    assert offenders == []


def test_the_face_check_catches_a_deep_import(tmp_path: Path):
    client = tmp_path / "page.py"
    client.write_text("from traindeck.backend.runs.record.run_store import RunStore\n"
                      "from traindeck.backend.runs import RunStore\n")
    assert _deep_backend_imports(client, _backend_faces()) == [f"{client}:1: traindeck.backend.runs.record.run_store"]


def test_every_name_a_face_declares_is_importable():
    import importlib

    for face in sorted(_backend_faces()):
        module = importlib.import_module(face)
        for name in getattr(module, "__all__", []):
            assert getattr(module, name) is not None, f"{face}.{name}"


def test_no_face_name_is_also_a_module_of_its_package():
    """Once a package's module X is imported, Python sets the package's attribute X to that module, so a face name
    X meaning something else (a function) would turn into the module for every later `from package import X`."""
    clashes = []
    for face in sorted(_backend_faces()):
        folder = REPO.joinpath(*face.split(".")[1:])
        if not folder.is_dir():
            continue
        modules = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
        stub = folder / "__init__.pyi"
        whole = {a.name for node in ast.parse(stub.read_text(encoding="utf-8")).body
                 if isinstance(node, ast.ImportFrom) and not node.module for a in node.names} if stub.is_file() else set()
        clashes += [f"{face}.{name}" for name in (_names_of_face(face) - whole) & modules]
    assert clashes == []

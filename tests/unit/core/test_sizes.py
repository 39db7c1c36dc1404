"""Byte counts have one formatter (core.sizes): its wordings are the ones the reports, tables and commands showed
(memory as "1.5 GiB" / "390 MiB", a trial table's "1.50G" / "390M", any size from "512 B" to "1.2 TiB"), and no
other module of the backend or the GUI keeps a copy of its own or borrows another module's private one."""

from __future__ import annotations

import ast

from support import REPO

from traindeck.backend.core import format_bytes, format_size

GIB, MIB = 1 << 30, 1 << 20


def test_memory_reads_in_gib_from_one_gib_up_and_whole_mib_below() -> None:
    assert format_bytes(None) == "-"
    assert format_bytes(0) == "0 MiB" and format_bytes(390 * MIB) == "390 MiB"
    assert format_bytes(GIB - 1) == "1024 MiB" and format_bytes(GIB) == "1.0 GiB"
    assert format_bytes(1.5 * GIB) == "1.5 GiB" and format_bytes(1.5 * GIB, digits=2) == "1.50 GiB"
    assert format_bytes(1.5 * GIB, digits=2, compact=True) == "1.50G"
    assert format_bytes(390 * MIB, digits=2, compact=True) == "390M"
    assert format_bytes(None, compact=True) == "-"


def test_any_size_reads_in_the_unit_that_fits_to_a_tenth() -> None:
    assert format_size(None) == "-"
    assert [format_size(n) for n in (0, 512, 1023, 1024, 1536, 3.3 * MIB, 7 * GIB, 1024 * GIB, 3 * 1024 * GIB)] == [
        "0 B", "512 B", "1023 B", "1.0 KiB", "1.5 KiB", "3.3 MiB", "7.0 GiB", "1.0 TiB", "3.0 TiB"]
    assert format_size(-1.5 * GIB) == "-1.5 GiB"  # a shrinking figure keeps its sign


def test_no_other_module_keeps_or_borrows_a_byte_formatter() -> None:
    home = REPO / "backend" / "core" / "sizes.py"
    names = {"_bytes", "format_bytes", "format_size", "human_bytes", "fmt_bytes"}
    found = []
    for path in sorted([*(REPO / "backend").rglob("*.py"), *(REPO / "gui").rglob("*.py")]):
        if path == home:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: defines {node.name}")
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("traindeck."):
                found += [f"{path.relative_to(REPO)}:{node.lineno}: imports {a.name} from {node.module}"
                          for a in node.names if a.name == "_bytes"]
    assert found == []

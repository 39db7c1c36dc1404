"""History's part of issue 14 over a real run store and run folders: a resume chain shown as one line of work,
the compare's "Code and packages" tab (git commits, dirty state, which packages differ in pip freeze, and how),
Bundle written off the UI thread, and Rerun's failure as one line."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fixtures.history_runs import T0, make_run  # noqa: E402

from traindeck.backend.runs.control.resume import Lineage, save_lineage  # noqa: E402
from traindeck.backend.runs.record.provenance_diff import package_differences, parse_freeze  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402


def test_freeze_differences_say_how_each_package_differs() -> None:
    a = parse_freeze("torch==2.3.0\nFoo_Bar==1.0\n-e git+https://x/y.git@abc#egg=mylib\nold==1\n")
    b = parse_freeze("torch==2.4.1\nfoo-bar==1.0\nnumpy==1.26\nold==0.9\n")
    differences, same = package_differences(a, b)
    assert same == 1  # Foo_Bar and foo-bar are one package
    assert [(d.name, d.a, d.b, d.how) for d in differences] == [
        ("mylib", "git+https://x/y.git@abc#egg=mylib", None, "only in A"), ("numpy", None, "1.26", "only in B"),
        ("old", "1", "0.9", "downgraded"), ("torch", "2.3.0", "2.4.1", "upgraded")]


def _provenance(run_dir: str, commit: str, dirty: bool, freeze: str) -> None:
    Path(run_dir, "provenance.json").write_text(json.dumps({
        "git": {"commit": commit, "branch": "main", "dirty": dirty, "diff_file": "git.diff" if dirty else None},
        "versions": {"python": "3.11.9", "torch": "2.3.0"}, "host": {"hostname": "box", "gpus": []},
        "packages_file": "requirements.txt"}))
    Path(run_dir, "requirements.txt").write_text(freeze)


def test_chain_compare_provenance_and_bundle(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.history import HistoryPage

    with RunStore() as store:
        first = make_run(store, "first", started=T0)
        second = make_run(store, "second", started=T0 + 600)
        third = make_run(store, "third", started=T0 + 1200)
        alone = make_run(store, "alone", started=T0 + 1800)
    save_lineage(second.run_dir, Lineage(first.id, "/out/checkpoint-40", "resume"))
    save_lineage(third.run_dir, Lineage(second.id, "/out/checkpoint-90", "resume"))
    _provenance(first.run_dir, "a" * 40, False, "torch==2.3.0\ntransformers==4.44.0\nnumpy==1.26.4\n")
    _provenance(third.run_dir, "b" * 40, True, "torch==2.4.1\ntransformers==4.44.0\naccelerate==0.33.0\n")

    said: list[str] = []
    ctx = AppContext()
    ctx.status.connect(said.append)
    page = HistoryPage(ctx)
    qtbot.addWidget(page)
    page.show()
    page.page_shown()
    qtbot.waitUntil(lambda: len(page.run_table.model.rows) == 4, timeout=20000)
    try:
        page.run_table.select_runs([third.id])
        qtbot.waitUntil(lambda: page.chain_label.isVisible(), timeout=20000)
        text = page.chain_label.text()
        assert text.startswith("Line of work: first → second (from checkpoint-40) → ")
        assert "<b>third</b> (from checkpoint-90)" in text
        page.run_table.select_runs([alone.id])
        qtbot.waitUntil(lambda: not page.chain_label.isVisible(), timeout=20000)

        page.compare_panel.compare(first.id, third.id)
        qtbot.waitUntil(lambda: page.compare_panel.tabs.tabText(3).startswith("Code and packages ("), timeout=20000)
        table = page.compare_panel.provenance_table
        cells = [tuple(table.item(r, c).text() if table.item(r, c) else "" for c in range(4))
                 for r in range(table.rowCount())]
        assert ("git commit", "a" * 40, "b" * 40, "differs") in cells
        assert ("uncommitted changes", "no", "yes (uncommitted changes, kept as git.diff)", "differs") in cells
        assert ("  torch", "2.3.0", "2.4.1", "upgraded") in cells
        assert ("  numpy", "1.26.4", "-", "only in A") in cells
        assert ("  accelerate", "-", "0.33.0", "only in B") in cells
        assert any(c[0] == "Packages that differ (3; 1 the same)" for c in cells)
        # The column of "differs" / "upgraded" has a heading, as on Figures (it was blank).
        assert table.horizontalHeaderItem(3).text() == "B vs A"

        page.run_table.select_runs([first.id])
        assert page.leftovers.rerun_button.isEnabled() and page.leftovers.bundle_button.isEnabled()
        target = tmp_path / "first.zip"
        page.leftovers.write_bundle(first.id, str(target))
        qtbot.waitUntil(lambda: any(s.startswith(f"wrote {target}") for s in said), timeout=30000)
        with zipfile.ZipFile(target) as archive:
            assert any(name.endswith("provenance.json") for name in archive.namelist())
        page.leftovers.rerun_selected()  # made by hand: no launch request kept, so it cannot be started again
        qtbot.waitUntil(lambda: any(s.startswith(f"Cannot rerun {first.id}: ") for s in said), timeout=30000)
        failure = next(s for s in said if s.startswith("Cannot rerun"))
        assert "request.json" in failure and "\n" not in failure and "Traceback" not in failure
    finally:
        page.shutdown()
        ctx.tasks.wait(10000)

"""The Runs page on a real hung 2-rank run (tests/fixtures/scripts/hang_in_load.py under torchrun): the stall banner
shows where the ranks were (the supervisor's automatic stacks), and the Stacks button dumps them again on request
without stopping the run."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from support.runhelp import SCRIPTS, get, launch, wait_finished

from traindeck.backend.core import paths
from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunStore
from traindeck.gui.context import AppContext
from traindeck.gui.pages.runs import RunsPage

pytestmark = [pytest.mark.slow, pytest.mark.train]


@pytest.mark.launch
def test_stall_banner_and_stacks_button_name_the_stuck_rank(qtbot) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch", reason="needs the train extra")
    run = launch(SCRIPTS / "hang_in_load.py", launcher="python", nproc=2, name="hang", stall_min_s=6.0)
    page = RunsPage(AppContext(settings=QSettings(str(paths.config_dir() / "w.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(page)
    page.show()
    try:
        page.open_run(run.id)
        qtbot.waitUntil(lambda: "rank 1 is in hang_in_load.py:1" in page.header.stall_label.text(), timeout=120000)
        assert page.header.stall_panel.isVisible()
        assert page.header.stall_label.text().startswith("⚠ The run looks stalled: no output or progress for ")
        assert "load_batch; rank 0 waits in all_reduce" in page.header.stall_label.text()

        assert page.stop_panel.stacks_button.isVisible()
        page.stop_panel.stacks_button.click()
        qtbot.waitUntil(lambda: page.stop_panel.last_stacks is not None, timeout=60000)
        # The collectives ledger leads (rank 1 never reached the all_reduce rank 0 waits in), then who is where.
        assert page.stop_panel.last_stacks.summary.startswith("rank 1 never entered all_reduce #1 (process group 0)")
        assert "; rank 1 is in hang_in_load.py:1" in page.stop_panel.last_stacks.summary
        assert page.stop_panel.stacks_box is not None and "load_batch" in page.stop_panel.stacks_box.detailedText()
        page.stop_panel.stacks_box.close()
        assert get(run.id).state == "running", "taking stacks never stops the run"
    finally:
        with RunStore() as store:
            stop_run(store, run.id, grace_s=2.0)
        page.shutdown()
        page.ctx.tasks.wait(30000)
    assert wait_finished(run.id, 60).state == "stopped"

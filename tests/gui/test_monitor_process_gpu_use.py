"""The Processes tab says which GPUs each process is on and how much of them it keeps busy (nvitop's GPU and %SM
columns): real processes, the real sampler and pynvml over a fake driver (tests/fixtures/nvml), the real panel."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fixtures.monitor_run_tree import run_tree  # noqa: E402
from fixtures.nvml.fake_driver import FakePynvml, recording  # noqa: E402
from PySide6.QtCore import QSettings, Qt  # noqa: E402

from traindeck.backend.monitor.nvml import NvmlLibrary  # noqa: E402
from traindeck.backend.monitor.sampler import ResourceSampler  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402


@pytest.fixture
def panel(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor.processes_panel import ProcessesPanel

    ctx = AppContext(settings=QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat))
    widget = ProcessesPanel(ctx)
    qtbot.addWidget(widget)
    widget.resize(1200, 520)
    yield widget
    ctx.tasks.wait(10000)


def _column(panel, title: str) -> int:
    model = panel.model
    titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert title in titles, titles
    return titles.index(title)


def test_a_ranks_gpus_and_sm_use_are_columns_and_sort_the_busiest_first(panel):
    with run_tree(ranks=2, mib=1) as tree:
        rank0, rank1 = tree["ranks"]
        fake = FakePynvml(recording("dual_rtx_a5000"), pid_map={100477: rank0}, pcie_delay_s=0)
        with ResourceSampler(tree["launcher"], gpu_library=NvmlLibrary(fake, host_pid_namespace=True)) as sampler:
            sampler.sample(machine=True)
            fake.driver.add_sm_sample(0, 100477, 97)
            fake.driver.add_sm_sample(1, 100477, 12)
            sample = sampler.sample(machine=True)
    assert sample.machine is not None
    panel.show_snapshot(sample.machine)
    gpu, sm = _column(panel, "GPU"), _column(panel, "SM %")
    rows = [p.pid for p in panel.table.rows]
    assert panel.model.index(rows.index(rank0), gpu).data() == "0,1"
    assert panel.model.index(rows.index(rank0), sm).data() == "109"
    assert panel.model.index(rows.index(rank1), gpu).data() == ""
    assert panel.model.index(rows.index(rank1), sm).data() == ""
    assert "nvitop" in panel.model.headerData(sm, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    panel.view.sortByColumn(sm, Qt.SortOrder.DescendingOrder)
    assert panel.table.rows[0].pid == rank0  # the process keeping the GPUs busy comes first


def test_how_long_each_process_has_run_is_a_column_that_sorts_the_oldest_first(panel):
    import subprocess
    import sys

    import psutil

    from traindeck.backend.monitor import MachineProcessSampler
    from traindeck.gui.pages.monitor.processes_panel import elapsed_text

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        snapshot = MachineProcessSampler().sample()
        panel.show_snapshot(snapshot)
        by_pid = {p.pid: p for p in snapshot.processes}
        assert by_pid[child.pid].started_at == pytest.approx(psutil.Process(child.pid).create_time(), abs=1.0)
        column = _column(panel, "Time")
        rows = [p.pid for p in panel.table.rows]
        ours = panel.model.index(rows.index(child.pid), column).data()
        assert ours == elapsed_text(snapshot.t - by_pid[child.pid].started_at) and ours.startswith("0:0")
        panel.view.sortByColumn(column, Qt.SortOrder.DescendingOrder)
        shown = [p.pid for p in panel.table.rows]
        assert shown.index(1) < shown.index(child.pid)  # PID 1 has run longest
    finally:
        child.kill()
        child.wait()
    assert [elapsed_text(s) for s in (5, 245, 3723, 3 * 86400 + 3723)] == ["0:05", "4:05", "1:02:03", "3-01:02:03"]

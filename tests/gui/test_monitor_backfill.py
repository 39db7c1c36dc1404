"""A watched run's recording fills the Monitor's charts back to the run's start: the Host tab's CPU, RAM, disk and
network lines and the Run tab's per-rank lines (not only its "all ranks" totals), where live samples do not reach.
A recording of the run's first 10 minutes (the demo's samples, written as the run's recorder writes them) and a
real process as its launcher, sampled live from the moment the page opens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings  # noqa: E402

from traindeck.gui.context import AppContext  # noqa: E402

WAIT_MS = 15000
SHOTS = Path(os.environ.get("TRAINDECK_PROCACTION_SHOTS", "/tmp/s16-procs"))


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.5)
    settings.setValue("monitor/window", "24 hours")
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    qtbot.addWidget(page)
    page.resize(1280, 800)
    yield page
    page.shutdown()
    ctx.tasks.wait(10000)


def test_host_and_rank_lines_fill_back_to_the_runs_start(page, qtbot, traindeck_home):
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor import demo_samples
    from traindeck.backend.monitor.sample_store import ResourceWriter
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        opened = time.time()
        me = psutil.Process()  # its supervisor: this test process, alive (a run without one is lost)
        samples = demo_samples(seconds=600, end=opened - 5)  # recorded before the page opened
        with RunStore() as store:
            store.add_run(RunRecord(id="20260101-120000-ef56", run_dir=str(traindeck_home), created_at=samples[0].t,
                                    name="tiny", state="running", started_at=samples[0].t,
                                    launcher_pid=launcher.pid, supervisor_pid=me.pid,
                                    supervisor_started=me.create_time()))
        writer = ResourceWriter(run_store_path(), "20260101-120000-ef56", interval_s=1.0, started_at=samples[0].t)
        for sample in samples:
            writer.write(sample, commit=False)
        writer.commit()
        writer.close()

        page.show()
        qtbot.waitExposed(page)
        page.page_shown()
        qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)
        host, run = page.host_panel, page.run_panel

        def earliest(chart, name: str) -> float:
            x, y = chart.data(name)
            finite = x[~np.isnan(y)]
            return float(finite[0]) if len(finite) else np.inf

        for chart, name in ((host.cpu_chart, "CPU"), (host.ram_chart, "used"), (host.disk_chart, "write"),
                            (host.net_chart, "received"), (run.rank_rss_chart, "rank 0"),
                            (run.rank_cpu_chart, "rank 1"), (run.rank_locked_chart, "rank 0")):
            qtbot.waitUntil(lambda c=chart, n=name: earliest(c, n) < samples[10].t, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: host.cpu_chart.data("CPU")[0][-1] > opened, timeout=WAIT_MS)  # and on live
        recorded_rss = {p.rank: p.rss_bytes for p in samples[300].run.processes if p.role == "rank"}
        x, y = run.rank_rss_chart.data("rank 1")
        assert y[np.searchsorted(x, samples[300].t)] == pytest.approx(recorded_rss[1], rel=0.05)
        x_range = host.cpu_chart.plot_item.viewRange()[0]
        assert x_range[0] < samples[60].t  # the window fits the run's whole stretch, not the seconds since opening
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.tabs.setCurrentWidget(host)
        qtbot.wait(1500)  # the charts redraw on their timer once on screen
        page.grab().save(str(SHOTS / "host-backfill.png"))
        page.tabs.setCurrentWidget(run)
        qtbot.wait(1500)
        page.grab().save(str(SHOTS / "run-backfill.png"))
    finally:
        launcher.kill()
        launcher.wait()

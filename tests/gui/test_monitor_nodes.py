"""The Monitor page's Nodes tab (issue 15): a running multi-node run's nodes side by side, from the files the
launch and the node watch write (nodes.json from backend/nodes/node_plan.py, nodes_state.json from the watch's own
save(), fed the agents' messages as backend/nodes/agent.py sends them), refreshed while the tab is shown; absent for
a one-machine run. The slow multinode test launches a real 2-node run from the Launch page and watches it here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings  # noqa: E402

from traindeck.backend.core.paths import run_store_path  # noqa: E402
from traindeck.backend.nodes.hostfile import Host  # noqa: E402
from traindeck.backend.nodes.node_plan import NODES_FILE, nodes_document  # noqa: E402
from traindeck.backend.runs.record.layout import create_run_dir  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402
from traindeck.backend.runs.supervisor.node_sampler import NodeWatch  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402

GIB = 1024**3
WAIT_MS = 15000


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.5)
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    qtbot.addWidget(page)
    page.resize(1280, 800)
    yield page
    page.shutdown()
    ctx.tasks.wait(10000)


@pytest.fixture
def launcher():
    """A process standing for the run's launcher (the Monitor samples a running run's tree from its pid)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield proc.pid
    proc.stdin.close()
    proc.wait(10)


def _run(name: str, launcher_pid: int | None, hosts: list[Host] | None) -> tuple[str, Path]:
    run_dir = create_run_dir()
    if hosts:
        run_dir.path.joinpath(NODES_FILE).write_text(json.dumps(nodes_document(hosts, 2222, sys.executable)))
    with RunStore() as store:
        store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=time.time(), name=name,
                                state="running", started_at=time.time(), launcher_pid=launcher_pid))
    return run_dir.run_id, run_dir.path


def _agent_sample(watch: NodeWatch, host: str, rank: int, rss: int, ram_used: int, cpu: float) -> None:
    """What one node's agent sends each second (agent.py Agent.sample), taken as the watch takes it."""
    node = next(n for n in watch.nodes if n.host == host)
    node.take({"event": "rank_started", "rank": rank, "pid": 1000 + rank})
    node.take({"event": "sample", "host": host, "ranks": [{"rank": rank, "pid": 1000 + rank, "rss": rss, "cpu": 95.0}],
               "others": [], "cpu": cpu, "ram_used": ram_used, "ram_total": 16 * GIB, "gpus": None})


def _cells(page) -> list[list[str]]:  # type: ignore[no-untyped-def]
    table = getattr(page, "nodes_view", page).table  # the page, or the Nodes tab alone
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


@pytest.mark.parametrize("pid_recorded", [True, False], ids=["launcher-pid-recorded", "launcher-pid-not-yet"])
def test_a_running_multi_node_runs_nodes_are_side_by_side_and_follow_the_watch(page, qtbot, launcher,
                                                                              pid_recorded: bool) -> None:
    """Also for a run listed before its supervisor recorded the launcher's pid (the first seconds of a launch):
    the nodes are read from files, so they follow all the same (they stayed frozen there once)."""
    hosts = [Host("127.0.0.2", 1), Host("127.0.0.3", 1)]
    run_id, run_dir = _run("two-nodes", launcher if pid_recorded else None, hosts)
    watch = NodeWatch(run_dir, str(run_store_path()))
    _agent_sample(watch, "127.0.0.2", 0, 2 * GIB, 5 * GIB, 40.0)
    _agent_sample(watch, "127.0.0.3", 1, 3 * GIB, 7 * GIB, 60.0)
    watch.save()

    page.show()
    qtbot.waitExposed(page)
    page.page_shown()  # follows the running run
    qtbot.waitUntil(lambda: page.tabs.isTabVisible(page._nodes_tab), timeout=WAIT_MS)
    assert page.picker.watched is not None and page.picker.watched.id == run_id
    page.tabs.setCurrentIndex(page._nodes_tab)
    qtbot.waitUntil(lambda: page.nodes_view.table.rowCount() == 2, timeout=WAIT_MS)
    first, second = _cells(page)
    assert first == ["127.0.0.2", "0", "2 GiB", "95 %", "5 GiB of 16 GiB", "40 %", "-", "2 GiB", "5 GiB",
                     "1 rank(s) running"]
    assert second[:3] == ["127.0.0.3", "1", "3 GiB"] and second[5] == "60 %" and second[-1] == "1 rank(s) running"
    assert "2 nodes" in page.nodes_view.title.text() and "latest figures" in page.nodes_view.title.text()
    assert page.nodes_view.ram_chart.series_names() == ["127.0.0.2", "127.0.0.3"]

    # The watch writes again (node 2 lost a rank and its agent): the tab follows at the Monitor's cadence.
    time.sleep(0.05)
    _agent_sample(watch, "127.0.0.2", 0, 2 * GIB, 6 * GIB, 80.0)
    node2 = next(n for n in watch.nodes if n.host == "127.0.0.3")
    node2.take({"event": "rank_ended", "rank": 1, "pid": 1001})
    node2.reachable, node2.said_unreachable = False, "the agent's ssh ended (exit 255)"
    watch.save()
    qtbot.waitUntil(lambda: _cells(page)[1][-1].startswith("unreachable"), timeout=WAIT_MS)
    first, second = _cells(page)
    assert first[4] == "6 GiB of 16 GiB" and first[5] == "80 %" and first[8] == "6 GiB"  # peak RAM follows
    # An unreachable node's last figures are not its figures now: only its peaks are shown.
    assert second == ["127.0.0.3", "1", "-", "-", "-", "-", "-", "3 GiB", "7 GiB",
                      "unreachable: the agent's ssh ended (exit 255); ended ranks 1"]
    assert page.nodes_view.ram_chart.point_count("127.0.0.2") == 2
    assert page.nodes_view.ram_chart.last("127.0.0.2") == 6 * GIB

    # Off screen: no more reads (the timer stops with the page's other timers).
    page.hide()
    assert not page.nodes_view.timer.isActive()
    page.show()
    page.page_shown()
    assert page.nodes_view.timer.isActive()

    # The run ends: its peaks stay, the latest-figure columns and the charts go, and the reads stop.
    with RunStore() as store:
        store.finish_run(run_id, "succeeded")
    page.picker.refresh()
    qtbot.waitUntil(lambda: page.nodes_view.table.isColumnHidden(2) and _cells(page)[0][-1] == "ended",
                    timeout=WAIT_MS)
    assert _cells(page)[0][7:9] == ["2 GiB", "6 GiB"] and not page.nodes_view.charts.isVisible()
    assert page.nodes_view.after_note.isVisible() and not page.nodes_view.timer.isActive()
    watch.store.close()


def test_each_nodes_line_comes_in_the_tables_order_whichever_node_reports_first(qtbot, traindeck_home: Path) -> None:
    """CI saw the second node's figures first: its line was made first and took the first colour."""
    from traindeck.gui.pages.monitor.nodes_panel import MonitorNodes

    ctx = AppContext(settings=QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat))
    view = MonitorNodes(ctx.tasks, 1.0)
    qtbot.addWidget(view)
    view.live = True
    nodes = [{"host": "127.0.0.2", "now": {}}, {"host": "127.0.0.3", "now": {"written_at": time.time(),
                                                                               "ram_used_bytes": GIB}}]
    view._arrived(view._request, None, nodes)
    assert view.ram_chart.series_names() == view.cpu_chart.series_names() == ["127.0.0.2", "127.0.0.3"]
    assert view.ram_chart.point_count("127.0.0.2") == 0 and view.ram_chart.last("127.0.0.3") == GIB
    view.show()
    qtbot.waitExposed(view)
    view.ram_chart.flush()  # a line with no point yet draws nothing, and nothing fails


def test_a_run_that_ends_while_a_read_is_under_way_is_read_again(qtbot, traindeck_home: Path) -> None:
    """CI, under load: the run ended while the tab's read was on its way. The old answer is dropped (it is for the
    run as it was), and the new read is not held back by it: the tab froze on "running" for good once."""
    from traindeck.gui.pages.monitor.nodes_panel import MonitorNodes

    run_id, run_dir = _run("ends-mid-read", None, [Host("127.0.0.2", 1), Host("127.0.0.3", 1)])
    watch = NodeWatch(run_dir, str(run_store_path()))
    _agent_sample(watch, "127.0.0.2", 0, 2 * GIB, 5 * GIB, 40.0)
    watch.save()
    ctx = AppContext(settings=QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat))
    view = MonitorNodes(ctx.tasks, 1.0)
    qtbot.addWidget(view)
    view.set_run(run_id, True)
    qtbot.waitUntil(lambda: view.table.rowCount() == 2, timeout=WAIT_MS)
    view.refresh(force=True)  # a read under way (its answer comes through the event loop, after the next line)
    view.set_run(run_id, False)
    qtbot.waitUntil(lambda: view.table.rowCount() == 2 and view.table.isColumnHidden(2), timeout=WAIT_MS)
    assert _cells(view)[0][-1] == "ended" and not view.live
    ctx.tasks.wait(10000)
    watch.store.close()


def test_a_one_machine_run_has_no_nodes_tab(page, qtbot, launcher) -> None:
    run_id, _ = _run("one-machine", launcher, None)
    page.show()
    qtbot.waitExposed(page)
    page.page_shown()
    qtbot.waitUntil(lambda: page.picker.watched is not None and page.picker.watched.id == run_id, timeout=WAIT_MS)
    page.ctx.tasks.wait(5000)
    qtbot.wait(100)
    assert not page.tabs.isTabVisible(page._nodes_tab) and page.nodes_view.table.rowCount() == 0
    assert not page.nodes_view.timer.isActive()

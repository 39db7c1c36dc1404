"""The Launch page's Several machines box (issue 15): hosts edited in the table and saved into a hostfile the backend
reads back (its comments kept), the plan of a launch from the page equal to `traindeck run --hostfile`'s, and Check
hosts against two real SSH "nodes" on loopback (tests/sshnodes.py) with a host that has no sshd."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from support.probe_fixture import probe_cache  # noqa: F401 (a fixture)

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings  # noqa: E402
from support.sshnodes import PORT, SshNodes  # noqa: E402

from traindeck.backend.core import paths  # noqa: E402
from traindeck.backend.nodes.hostfile import read_hostfile  # noqa: E402
from traindeck.backend.presets import load_preset  # noqa: E402
from traindeck.backend.runs.record.run_store import RunStore  # noqa: E402

HOSTFILE = """# the lab's machines
node1 slots=2  # the big one

node2 slots=1
# end of list
"""


@pytest.fixture
def page(qtbot, traindeck_home, probe_cache, tmp_path):  # noqa: F811
    from traindeck.gui.context import AppContext
    from traindeck.gui.pages.launch import LaunchPage

    shutil.copytree(probe_cache, traindeck_home / "cache" / "probes")
    settings = QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)
    ctx = AppContext(settings=settings)
    ctx.draft.replace(load_preset("cpu-demo"), "cpu-demo")
    page = LaunchPage(ctx)
    qtbot.addWidget(page)
    page.resize(1280, 900)
    page.show()
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    page.script_box.script.setText(str(script))
    page.script_box.cwd.setText(str(tmp_path))
    page.script_box.args.setText("--deepspeed_config {ds_config} --steps 3")
    page.env_box.env.set_env({})
    page.runner.interpreter.set_python(sys.executable)
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("deepspeed"))
    yield page
    page.shutdown()
    ctx.tasks.wait(60000)
    qtbot.wait(50)  # answers already queued arrive while the page still exists


def _open(qtbot, page, path: Path, rows: int) -> None:
    page.hosts.setChecked(True)
    page.hosts.path.setText(str(path))
    page.hosts.open_file(str(path))
    qtbot.waitUntil(lambda: page.hosts.table.rowCount() == rows and page.hosts._loaded_path == str(path),
                    timeout=10000)


def _cell(page, row: int, column: int):  # type: ignore[no-untyped-def]
    return page.hosts.table.cellWidget(row, column)


def _launch_blocked_by(page, words: str) -> bool:
    return any(words in reason for reason in page.launch_bar.why_not_launchable())


def test_hosts_edited_on_the_page_are_saved_into_the_hostfile_with_its_comments(qtbot, page, tmp_path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(HOSTFILE)
    assert not page.hosts.isHidden()  # the deepspeed launcher: the box is offered
    _open(qtbot, page, path, rows=2)
    assert [(r.name, r.slots) for r in page.hosts.rows()] == [("node1", 2), ("node2", 1)]
    assert not page.hosts.dirty and not _launch_blocked_by(page, "save the hostfile")

    _cell(page, 1, 1).setValue(4)  # node2: 4 slots
    _cell(page, 0, 2).click()  # node1 removed
    page.hosts.add_button.click()
    _cell(page, 1, 0).setText("10.0.0.7")
    assert page.hosts.dirty and _launch_blocked_by(page, "save the hostfile")
    assert not page.launch_bar.launch_button.isEnabled()

    _cell(page, 1, 0).setText("bad name!")  # said beside the table, naming the row, and nothing is written
    assert "row 2: host 'bad name!' is not a host name or address" in page.hosts.problems.plain_text()
    page.hosts.save()
    qtbot.waitUntil(lambda: page.hosts.save_button.isEnabled(), timeout=10000)
    assert path.read_text() == HOSTFILE
    _cell(page, 1, 0).setText("10.0.0.7")

    page.hosts.save()
    qtbot.waitUntil(lambda: not page.hosts.dirty, timeout=10000)
    assert [(h.name, h.slots) for h in read_hostfile(path)] == [("node2", 4), ("10.0.0.7", 1)]
    text = path.read_text()
    assert text == "# the lab's machines\n\nnode2 slots=4\n10.0.0.7 slots=1\n# end of list\n"
    assert not _launch_blocked_by(page, "Several machines")
    assert f"Saved {path}" in page.hosts.problems.plain_text()

    # Saved twice, the rows rewrite their own lines (no duplicates), and the choice is remembered.
    _cell(page, 1, 1).setValue(2)
    page.hosts.save()
    qtbot.waitUntil(lambda: not page.hosts.dirty, timeout=10000)
    assert path.read_text() == "# the lab's machines\n\nnode2 slots=4\n10.0.0.7 slots=2\n# end of list\n"
    page._save_settings()
    assert page.ctx.settings.value("launch/hostfile") == str(path)
    assert str(page.ctx.settings.value("launch/hosts_on")).lower() == "true"

    # Another launcher: the box goes away and the launch is this machine's again.
    page.runner.launcher.setCurrentIndex(page.runner.launcher.findData("python"))
    assert page.hosts.isHidden() and page.request().hostfile is None


def test_a_launch_from_the_page_has_the_plan_of_traindeck_run_with_the_same_hostfile(
        qtbot, page, tmp_path, monkeypatch) -> None:
    from traindeck.backend.cli import build_parser
    from traindeck.backend.cli.run_inputs import launch_request
    from traindeck.backend.launch.preview import preview_plan

    path = tmp_path / "hostfile"
    path.write_text("# two nodes\n127.0.0.2 slots=1\n127.0.0.3 slots=1\n")
    _open(qtbot, page, path, rows=2)
    page.hosts.ssh_port.setValue(PORT)
    qtbot.waitUntil(lambda: page.command_box.plan is not None and not page._preview_timer.isActive(),
                    timeout=20000)
    mine = page.command_box.plan
    assert mine.ok, mine.errors

    monkeypatch.chdir(tmp_path)  # `traindeck run` starts the run where it is run; the page in its working directory
    args = build_parser().parse_args(["run", "--preset", "cpu-demo", "--launcher", "deepspeed", "--python",
                                      sys.executable, "--hostfile", str(path), "--ssh-port", str(PORT),
                                      str(tmp_path / "train.py"), "--deepspeed_config", "{ds_config}",
                                      "--steps", "3"])
    request = launch_request(args, args.command[0], args.command[1:], None)
    theirs = preview_plan(request, page.runner.interpreter.environment)
    assert mine.argv == theirs.argv
    assert ["--hostfile", str(path), "--master_addr", "127.0.0.2", "--no_ssh_check", "--ssh_port", str(PORT)] == [
        a for a in mine.argv if a in ("--hostfile", str(path), "--master_addr", "127.0.0.2", "--no_ssh_check",
                                      "--ssh_port", str(PORT))]
    assert mine.files == theirs.files and "nodes.json" in mine.files
    assert mine.env.get("DS_ENV_FILE") == theirs.env.get("DS_ENV_FILE")
    assert page.request().hostfile == request.hostfile and page.request().ssh_port == request.ssh_port == PORT


@pytest.mark.multinode
def test_check_hosts_shows_every_check_and_a_host_without_sshd_blocks_the_launch(
        qtbot, page, tmp_path, monkeypatch, ssh_nodes: SshNodes) -> None:
    monkeypatch.setenv("PDSH_SSH_ARGS_APPEND", ssh_nodes.env["PDSH_SSH_ARGS_APPEND"])
    path = tmp_path / "hostfile"
    path.write_text("# a node and an address where no sshd listens\n127.0.0.2 slots=1\n127.0.0.9 slots=1\n")
    _open(qtbot, page, path, rows=2)
    page.hosts.ssh_port.setValue(PORT)
    # Launched before any check: the launch runs the checks itself and refuses (as `traindeck run --hostfile`
    # does), nothing is recorded, and the page then shows every check.
    qtbot.waitUntil(lambda: page.command_box.plan is not None and page.launch_bar.launch_button.isEnabled(),
                    timeout=20000)
    page.launch()
    qtbot.waitUntil(lambda: page.hosts.checking, timeout=120000)
    assert "Not launched: 127.0.0.9: ssh: not reachable by SSH" in page.launch_bar.result.text()
    assert not page.hosts.check_button.isEnabled() and "Checking 2 host(s)" in page.hosts.check_status.text()
    with RunStore() as store:
        assert store.list_runs() == []
    qtbot.waitUntil(lambda: not page.hosts.checking, timeout=120000)

    table = page.hosts.results
    rows = [[table.item(r, c).text() for c in range(4)] for r in range(table.rowCount())]
    assert table.isVisible() and rows
    good = {row[1]: row for row in rows if row[0] == "127.0.0.2"}
    for check in ("SSH without a password", "Training interpreter", "torch and DeepSpeed", "Training script",
                  "Working directory", "Network for NCCL"):
        assert good[check][2] == "✔ ok", rows
    bad = [row for row in rows if row[0] == "127.0.0.9"]
    assert len(bad) == 1 and bad[0][1:3] == ["SSH without a password", "✖ failed"], rows
    assert "not reachable by SSH" in bad[0][3] and "Connection refused" in bad[0][3], bad
    assert "1 of" in page.hosts.check_status.text() and "checks failed" in page.hosts.check_status.text()

    # Refused before launch, with the host and its reason beside the Launch button.
    qtbot.waitUntil(lambda: page.command_box.plan is not None and not page._preview_timer.isActive(),
                    timeout=20000)
    assert not page.launch_bar.launch_button.isEnabled()
    assert _launch_blocked_by(page, "Several machines: 127.0.0.9: SSH without a password: ")
    assert "127.0.0.9: SSH without a password" in page.launch_bar.result.text()

    # The host removed: the failure is stale (no longer blocks), and a new check passes on every host.
    _cell(page, 1, 2).click()
    assert not _launch_blocked_by(page, "127.0.0.9")
    assert "check again" in page.hosts.check_status.text()
    page.hosts.check_button.click()  # saves the file first: the checks read it, as the launch does
    qtbot.waitUntil(lambda: not page.hosts.checking and not page.hosts.dirty, timeout=120000)
    assert [h.name for h in read_hostfile(path)] == ["127.0.0.2"]
    assert path.read_text().startswith("# a node and an address where no sshd listens\n")
    assert all(page.hosts.results.item(r, 2).text() == "✔ ok" for r in range(page.hosts.results.rowCount()))
    assert page.hosts.check_status.text().startswith("All ") and "on 1 host(s)" in page.hosts.check_status.text()
    qtbot.waitUntil(lambda: page.command_box.plan is not None and not page._preview_timer.isActive(),
                    timeout=20000)
    assert not _launch_blocked_by(page, "Several machines"), page.launch_bar.why_not_launchable()


@pytest.mark.launch
@pytest.mark.slow
@pytest.mark.multinode
def test_a_two_node_run_launched_from_the_page_is_watched_node_by_node_on_the_monitor(
        qtbot, page, tmp_path, monkeypatch, ssh_nodes: SshNodes) -> None:
    """The whole path on two loopback "nodes": the page's launch (its checks, DeepSpeed's pdsh runner, the node
    watch) and the Monitor's Nodes tab showing both nodes' ranks live; stopped from the backend at the end."""
    from support.runhelp import DEMO, job_env, wait_finished

    from traindeck.backend.launch.builders import DS_CONFIG_PLACEHOLDER
    from traindeck.backend.runs.control.lifecycle import stop_run
    from traindeck.gui.pages.monitor import MonitorPage

    monkeypatch.setenv("PDSH_SSH_ARGS_APPEND", ssh_nodes.env["PDSH_SSH_ARGS_APPEND"])
    page.script_box.script.setText(str(DEMO))
    page.script_box.args.setText(f"--deepspeed_config {DS_CONFIG_PLACEHOLDER} --steps 100000 --batch-size 4 "
                                 "--step-time 0.05 --log-every 5 --no-tqdm")
    page.env_box.env.set_env({"DS_ACCELERATOR": "cpu",
                              "TORCH_EXTENSIONS_DIR": job_env()["TORCH_EXTENSIONS_DIR"]})
    _open(qtbot, page, ssh_nodes.hostfile(tmp_path / "hostfile"), rows=2)
    page.hosts.ssh_port.setValue(PORT)
    monitor = MonitorPage(page.ctx)
    qtbot.addWidget(monitor)
    monitor.resize(1280, 800)
    monitor.show()
    monitor.page_shown()
    qtbot.waitUntil(lambda: page.command_box.plan is not None and page.launch_bar.launch_button.isEnabled(),
                    timeout=30000)
    started: list[str] = []
    page.ctx.run_started.connect(started.append)
    page.launch()
    qtbot.waitUntil(lambda: bool(started) or not page.launch_bar.launching, timeout=300000)
    assert started, page.launch_bar.result.text()
    run_id = started[0]
    try:
        qtbot.waitUntil(lambda: monitor.tabs.isTabVisible(monitor._nodes_tab), timeout=60000)
        monitor.tabs.setCurrentIndex(monitor._nodes_tab)

        def both_running() -> bool:
            table = monitor.nodes_view.table
            return table.rowCount() == 2 and all(
                table.item(r, 9).text() == "1 rank(s) running" and table.item(r, 2).text() != "-" for r in range(2))

        qtbot.waitUntil(both_running, timeout=900000)
        hosts = [monitor.nodes_view.table.item(r, 0).text() for r in range(2)]
        assert hosts == list(ssh_nodes.hosts) and monitor.nodes_view.ram_chart.series_names() == hosts
    finally:
        with RunStore() as store:
            stop_run(store, run_id, grace_s=5.0)
        done = wait_finished(run_id, 600)
        monitor.shutdown()
    assert done.state == "stopped", done.state_detail

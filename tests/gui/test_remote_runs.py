"""The dashboard watching another machine over SSH (a real sshd on 127.0.0.4:2224, tests/sshhelp.py): File >
Connect to machine... through the window's connector; the Runs page lists the remote's runs (not the local ones),
follows a run's log, stops it (nothing left), launches one there; the title names the machine, and the line above
every page which machine that page shows; the Queue page shows and acts on the remote's queue."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.sshhelp import VENV_TRAINDECK, Remote, remote_processes

import traindeck

pytestmark = pytest.mark.ssh
# The runs' interpreter: this one (`run` checks it has torch; under load that probe is the slow part).
PLAIN_PYTHON = sys.executable


def script(tmp: Path, name: str, steps: int, pause: float) -> Path:
    path = tmp / name
    path.write_text("import time\n"
                    f"for i in range({steps}):\n"
                    f"    print(f'remote step {{i}}', flush=True)\n"
                    f"    time.sleep({pause})\n")
    return path


@pytest.fixture
def window(qapp, sshd: Remote, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:  # type: ignore[no-untyped-def]  # noqa: F811
    from traindeck.gui.app import create_window

    monkeypatch.setenv("TRAINDECK_SSH_CONFIG", str(sshd.ssh_config))
    monkeypatch.setenv("TRAINDECK_NO_CLOSE_PROMPT", "1")
    _app, win = create_window()
    win.resize(1200, 800)
    win.show()
    yield win
    win.close()
    win.ctx.tasks.wait(30000)
    qapp.processEvents()


@pytest.mark.launch
def test_runs_page_shows_the_remote_run_and_its_log_then_stops_it(window, sshd: Remote, tmp_path: Path,  # type: ignore[no-untyped-def]  # noqa: F811
                                                                   qtbot) -> None:
    slow = script(tmp_path, "gui_remote.py", 10_000, 0.2)
    started = subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "run", "--name", "over-ssh", "--detach",
                              "--python", PLAIN_PYTHON, str(slow)], capture_output=True, text=True, env=sshd.env(), timeout=120,
                             stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    local = subprocess.run([str(VENV_TRAINDECK), "run", "--name", "only-here", "--detach", "--python", PLAIN_PYTHON,
                            str(script(tmp_path, "local_only.py", 10_000, 0.2))],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert local.returncode == 0, local.stderr
    local_id = local.stdout.split()[-1]
    try:
        connector = window.remote
        connector.connect_to(sshd.host, sshd.traindeck)
        qtbot.waitUntil(lambda: connector.remote is not None or bool(connector.last_error), timeout=60000)
        assert connector.last_error == ""
        assert sshd.host in window.windowTitle()
        assert connector.recent_hosts()[0] == sshd.host
        control_dir = connector.remote.session.dir
        assert oct(control_dir.stat().st_mode & 0o777) == "0o700"

        page = window.page("runs")
        page.confirm_stop = False
        qtbot.waitUntil(lambda: "over-ssh" in [page.run_list.item(i).text().split("\n")[0]
                                               for i in range(page.run_list.count())], timeout=60000)
        names = [page.run_list.item(i).text().split("\n")[0] for i in range(page.run_list.count())]
        assert "only-here" not in names  # this machine's run is not listed while connected
        qtbot.waitUntil(lambda: page.run_id == run_id, timeout=30000)  # the running run, reattached
        assert "not over SSH" in page.lower_tabs.tabText(0)  # its charts stay empty: said on their tab
        qtbot.waitUntil(lambda: "remote step 2" in page.console.text(), timeout=60000)  # its log, followed
        qtbot.waitUntil(lambda: connector.resources.startswith(sshd.host + ": CPU"), timeout=60000)

        page.stop_run()
        qtbot.waitUntil(lambda: page.record is not None and page.record.finished, timeout=90000)
        assert remote_processes(str(slow)) == []  # nothing of the remote run is left

        connector.launch(f"--name launched-from-gui --python {PLAIN_PYTHON} {script(tmp_path, 'short.py', 3, 0.01)}")
        qtbot.waitUntil(lambda: page.record is not None and page.record.name == "launched-from-gui", timeout=90000)
        qtbot.waitUntil(lambda: "remote step 2" in page.console.text(), timeout=60000)

        connector.back_to_local()
        assert window.windowTitle() == "traindeck"
        qtbot.waitUntil(lambda: "only-here" in [page.run_list.item(i).text().split("\n")[0]
                                                for i in range(page.run_list.count())], timeout=60000)
        qtbot.waitUntil(lambda: not control_dir.exists(), timeout=30000)  # connection and log mirror ended
        assert remote_processes(f"logs {run_id}") == []
    finally:  # whatever failed above, neither run is left going
        subprocess.run([str(VENV_TRAINDECK), "stop", local_id, "--grace", "1"], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
        subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "stop", run_id, "--grace", "1"],
                       capture_output=True, timeout=120, env=sshd.env(), stdin=subprocess.DEVNULL)


@pytest.mark.launch
def test_the_remote_runs_header_shows_samples_per_second_as_a_local_runs_does(window, sshd: Remote,  # type: ignore[no-untyped-def]  # noqa: F811
                                                                            tmp_path: Path, qtbot) -> None:
    """A remote run's record names a local mirror of its log as its folder, which holds none of the run's configs:
    its batch (here the script's HF Trainer arguments) now comes with its record, and the header multiplies the
    progress bar's it/s by it as for a local run. The remote side runs the traindeck these tests import, with a home
    of its own."""
    home = tmp_path / "remote-home"
    home.mkdir()
    checkout = Path(traindeck.__file__).resolve().parent.parent
    there = f"env TRAINDECK_HOME={home} PYTHONPATH={checkout} PYTHONUNBUFFERED=1 {VENV_TRAINDECK}"
    bar = tmp_path / "bar_remote.py"
    bar.write_text("import time\n"
                   "for i in range(1, 10_001):\n"
                   "    print(f'train: {i * 100 // 10_000:3d}%| {i}/10000 [00:01<00:30,  5.00it/s]', flush=True)\n"
                   "    time.sleep(0.2)\n")
    started = subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "run", "--name", "rate-over-ssh", "--detach",
                              "--python", PLAIN_PYTHON, str(bar), "--per_device_train_batch_size", "4",
                              "--gradient_accumulation_steps", "2", "--seq_len", "128"], capture_output=True,
                             text=True, env=sshd.env(TRAINDECK_REMOTE=there), timeout=120, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    try:
        connector = window.remote
        connector.connect_to(sshd.host, there)
        qtbot.waitUntil(lambda: connector.remote is not None or bool(connector.last_error), timeout=60000)
        assert connector.last_error == ""
        page = window.page("runs")
        qtbot.waitUntil(lambda: page.run_id == run_id, timeout=60000)  # the running run, reattached
        qtbot.waitUntil(lambda: "it/s" in page.header.progress_label.text(), timeout=60000)
        qtbot.waitUntil(lambda: page.header.rate_label.text() != "", timeout=30000)
        steps = re.search(r" ([\d.]+) it/s", page.header.progress_label.text())
        rate = re.fullmatch(r"· ([\d.,]+) samples/s · ([\d,]+) tokens/s", page.header.rate_label.text())
        assert steps and rate, (page.header.progress_label.text(), page.header.rate_label.text())
        assert float(rate.group(1).replace(",", "")) == pytest.approx(8 * float(steps.group(1)), rel=0.01)
        assert page.header.rate_label.isVisible()
        tooltip = page.header.rate_label.toolTip()
        assert tooltip.startswith("From step rate (") and "x sequence length 128" in tooltip, tooltip
        assert "x batch 8 (per-device batch 4 x grad accum 2 x 1 process (the script's arguments))" in tooltip
    finally:
        subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "stop", run_id, "--grace", "1"],
                       capture_output=True, timeout=120, env=sshd.env(TRAINDECK_REMOTE=there),
                       stdin=subprocess.DEVNULL)


def test_unreachable_machine_is_one_line_and_stays_local(window, qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TRAINDECK_SSH_CONFIG", os.devnull)  # port 22 on 127.0.0.4: nothing listens
    connector = window.remote
    connector.connect_to("root@127.0.0.4")
    qtbot.waitUntil(lambda: connector.connecting is None, timeout=60000)
    assert connector.remote is None
    assert "host unreachable" in connector.last_error and "\n" not in connector.last_error
    assert window.windowTitle() == "traindeck"


def test_each_page_names_its_machine_and_the_queue_is_the_remotes(window, sshd: Remote, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   qtbot) -> None:
    """Connected, the Queue page showed this machine's queue, and nothing on Monitor, History or Launch said which
    machine they show; the remote run's charts were empty axes without a word."""
    from traindeck.backend.queue.entries import QueuedLaunch, QueueStore
    from traindeck.gui.pages.queue import COLUMNS, REFRESH_MS, REMOTE_REFRESH_MS

    held = subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "queue", "add", "--hold", "--name",
                           "queued-over-there", "--python", PLAIN_PYTHON, str(script(tmp_path, "q.py", 1, 0))],
                          capture_output=True, text=True, env=sshd.env(), timeout=120, stdin=subprocess.DEVNULL)
    assert held.returncode == 0, held.stderr
    with QueueStore() as queue:  # this machine's queue: paused, so nothing here starts
        queue.update_settings(paused=True)
        queue.add(QueuedLaunch(script="t.py"), name="queued-here")
    keys = [page_type.key for page_type in window.page_types]
    line = window.machine_line
    for key in keys:  # this machine alone: no line at all
        window.show_page(key)
        assert line.isHidden()

    connector = window.remote
    connector.connect_to(sshd.host, sshd.traindeck)
    qtbot.waitUntil(lambda: connector.remote is not None or bool(connector.last_error), timeout=60000)
    assert connector.last_error == ""
    here = connector.here
    for key in keys:
        window.show_page(key)
        assert line.isVisible() and f"Showing {'this machine' if key not in ('runs', 'queue') else sshd.host}" \
            in line.text(), (key, line.text())
        assert sshd.host in line.text() and (key in ("runs", "queue") or here in line.text())
    window.show_page("monitor")
    assert "resource charts are not shown for another machine's runs (connected to " + sshd.host in line.text()

    window.show_page("queue")
    page = window.page("queue")
    qtbot.waitUntil(lambda: [r["name"] for r in page.rows] == ["queued-over-there"], timeout=60000)
    assert page.summary.text().startswith(f"{sshd.host}'s queue")
    assert page.poller.interval() == REMOTE_REFRESH_MS  # an ssh call each read: less often than here
    page.table.selectRow(0)
    page.act("remove")  # acts there, through the connection
    qtbot.waitUntil(lambda: page.table.rowCount() == 0 and "empty" in page.summary.text(), timeout=60000)
    listed = subprocess.run([str(VENV_TRAINDECK), "--host", sshd.host, "queue", "list", "--all", "--json"],
                            capture_output=True, text=True, env=sshd.env(), timeout=120, stdin=subprocess.DEVNULL)
    assert '"queued-over-there"' not in listed.stdout and listed.returncode == 0

    connector.back_to_local()
    assert line.isHidden() and page.poller.interval() == REFRESH_MS
    qtbot.waitUntil(lambda: page.table.rowCount() == 1 and page.table.item(0, COLUMNS.index("Name")).text() == "queued-here",
                    timeout=60000)

"""The Processes tab acts on a process as htop and nvitop do, safely (real child processes, a real snapshot of the
machine): a right-click menu and keys send SIGTERM / SIGINT / SIGKILL to one of the person's own processes (and its
tree) after a confirmation naming the PID and command; a run's process offers its run's Stop first; another user's
process cannot be signalled. The Command column shows the program's basename and arguments; Tree indents children;
a zombie's memory reads "-"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402

from traindeck.backend.monitor import MachineProcessSampler  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402
from traindeck.gui.pages.monitor.processes_panel import COLUMNS  # noqa: E402

SHOTS = Path(os.environ.get("TRAINDECK_PROCACTION_SHOTS", "/tmp/s16-procs"))
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
RSS, COMMAND = COLUMNS.index("RSS"), COLUMNS.index("Command")  # the table's columns


@pytest.fixture
def ctx(traindeck_home: Path):
    context = AppContext(settings=QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat))
    yield context
    context.tasks.wait(10000)


@pytest.fixture
def panel(qtbot, ctx):
    from traindeck.gui.pages.monitor.processes_panel import ProcessesPanel

    widget = ProcessesPanel(ctx)
    qtbot.addWidget(widget)
    widget.resize(1200, 520)
    widget.asked = []  # the confirmations' texts; each answered yes unless a test says otherwise
    widget.answer = True
    widget.confirm = lambda title, text, details: widget.asked.append(f"{title}\n{text}\n{details}") or widget.answer
    return widget


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()


def _spawn(children: list, argv: list[str], **kwargs) -> subprocess.Popen:
    child = subprocess.Popen(argv, **kwargs)
    children.append(child)
    return child


def _show(panel, sampler=None) -> None:
    panel.show_snapshot((sampler or MachineProcessSampler()).sample())


def _row(panel, pid: int) -> int:
    return [p.pid for p in panel.table.rows].index(pid)


def _action(menu, starts: str):
    found = [a for a in menu.actions() if a.text().startswith(starts)]
    assert found, [a.text() for a in menu.actions()]
    return found[0]


def _grab(widget, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    widget.grab().save(str(SHOTS / name))


def test_the_context_menu_terminates_my_process_after_naming_it(panel, children, qtbot):
    child = _spawn(children, SLEEP)
    _show(panel)
    panel.view.selectRow(_row(panel, child.pid))
    process = panel.selected_process()
    assert process is not None and process.pid == child.pid
    menu = panel.menu_for(process)
    texts = [a.text() for a in menu.actions() if a.text()]
    assert texts[:3] == ["Terminate (SIGTERM)…", "Interrupt (SIGINT)…", "Kill (SIGKILL)…"]
    assert texts[3].startswith("Terminate and its children (0)")
    panel.answer = False  # Cancel: nothing is sent
    _action(menu, "Terminate (SIGTERM)").trigger()
    assert child.poll() is None and not panel.action_line.isVisible()
    panel.answer = True
    _action(menu, "Terminate (SIGTERM)").trigger()
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert f"PID {child.pid}" in panel.asked[-1] and "time.sleep(60)" in panel.asked[-1]
    assert panel.action_line.text().startswith(f"SIGTERM sent to PID {child.pid}")
    panel.show()
    qtbot.waitExposed(panel)
    _grab(panel, "proc-after-sigterm.png")


def test_keys_kill_the_selected_process_and_its_tree(panel, children, qtbot):
    parent = _spawn(children, [sys.executable, "-c", "import subprocess, sys\np = subprocess.Popen([sys.executable, "
                               "'-c', 'import time; time.sleep(60)'])\nprint(p.pid, flush=True)\nimport time; time.sleep(60)"],
                    stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    panel.show()
    qtbot.waitExposed(panel)
    _show(panel)
    panel.view.selectRow(_row(panel, parent.pid))
    panel.view.setFocus()
    qtbot.keyClick(panel.view, Qt.Key.Key_K, Qt.KeyboardModifier.ShiftModifier)  # Shift+K: SIGKILL to the tree
    assert parent.wait(timeout=30) == -signal.SIGKILL
    assert f"PID {grandchild}" in panel.asked[-1] and f"PID {parent.pid}" in panel.asked[-1]
    assert "and 1 descendant" in panel.asked[-1]
    assert panel.action_line.text().startswith("SIGKILL sent to PIDs")


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="starting another user's process needs root")
def test_another_users_process_cannot_be_signalled_from_the_menu(panel, children):
    other = _spawn(children, ["sleep", "60"], user=65534, group=65534)
    _show(panel)
    process = panel.table.find(other.pid)
    assert process is not None
    menu = panel.menu_for(process)
    signals = [a for a in menu.actions() if "(SIG" in a.text()]
    assert len(signals) == 6 and not any(a.isEnabled() for a in signals)
    assert any("belongs to another user" in a.text() for a in menu.actions())
    panel.view.selectRow(_row(panel, other.pid))
    panel.signal_selected("SIGKILL")  # as the key would: refused before any confirmation
    assert not panel.asked and other.poll() is None
    assert "belongs to another user" in panel.action_line.text()


def test_a_runs_process_offers_the_runs_stop_first(panel, children, traindeck_home, qtbot):
    from traindeck.backend.runs.record.layout import RunDir
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    run_id = "20260101-120000-cd34"
    child = _spawn(children, SLEEP, env=dict(os.environ, TRAINDECK_RUN_ID=run_id))
    with RunStore() as store:  # as `traindeck run` records a run it starts
        store.add_run(RunRecord(id=run_id, run_dir=str(traindeck_home), created_at=time.time(), name="tiny",
                                state="running", started_at=time.time(), launcher_pid=child.pid))
    panel.set_run_labels({run_id: "tiny · cd34"})
    _show(panel)
    menu = panel.menu_for(panel.table.find(child.pid))
    assert menu.actions()[0].text() == "Stop run “tiny · cd34” (through its supervisor)…"
    menu.actions()[0].trigger()
    assert "Stop the run “tiny · cd34”" in panel.asked[-1]
    qtbot.waitUntil(lambda: not panel.action_line.text().startswith("Stopping"), timeout=15000)
    assert panel.action_line.text().startswith(f"asked run {run_id} to stop: SIGINT now, SIGTERM after 10 s")
    request = RunDir(traindeck_home).stop_request()  # what the run's supervisor acts on, as after the Runs page's
    assert request is not None and request["grace_s"] == 10.0
    assert child.poll() is None  # no raw signal from here: the supervisor escalates


def test_the_command_column_tree_and_a_zombies_memory(panel, children, qtbot, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'pass'])\n"
                      "print('ready', flush=True)\ntime.sleep(60)\n")
    launcher = _spawn(children, [sys.executable, "-u", str(script), "--deepspeed", "ds.json"],
                      stdout=subprocess.PIPE, text=True)
    assert launcher.stdout.readline().strip() == "ready"  # its child was started; it is never waited for: a zombie
    sampler = MachineProcessSampler()
    zombie = None
    while zombie is None:
        _show(panel, sampler)
        zombie = next((p for p in panel.table.descendants(launcher.pid) if p.zombie), None)
    row = _row(panel, launcher.pid)
    python = os.path.basename(sys.executable)
    assert panel.model.index(row, COMMAND).data() == f"{python} -u train.py --deepspeed ds.json"
    assert str(script) in panel.model.index(row, COMMAND).data(Qt.ItemDataRole.ToolTipRole)
    assert panel.model.index(row, RSS).data() not in ("-", "0 B")
    zombie_row = _row(panel, zombie.pid)
    assert panel.model.index(zombie_row, RSS).data() == "-"
    assert panel.model.index(zombie_row, COMMAND).data().endswith("<defunct>")
    panel.tree_box.setChecked(True)
    row = _row(panel, launcher.pid)
    assert _row(panel, zombie.pid) == row + 1
    assert "└─ " in panel.model.index(row + 1, COMMAND).data()
    panel.filter_edit.setText(str(launcher.pid))
    panel.show()
    qtbot.waitExposed(panel)
    panel.tree_box.setChecked(False)
    panel.filter_edit.setText("python")
    _grab(panel, "proc-commands.png")
    panel.tree_box.setChecked(True)
    _grab(panel, "proc-tree.png")
    panel.view.selectRow(_row(panel, launcher.pid))
    menu = panel.menu_for(panel.table.find(launcher.pid))
    menu.popup(panel.view.viewport().mapToGlobal(panel.view.visualRect(
        panel.model.index(_row(panel, launcher.pid), COMMAND)).center()))
    qtbot.waitExposed(menu)
    _grab(panel.window(), "proc-menu-panel.png")
    menu.grab().save(str(SHOTS / "proc-menu.png"))
    menu.close()


def test_a_right_click_selects_the_row_and_opens_its_menu(panel, children, qtbot):
    child = _spawn(children, SLEEP)
    panel.show()
    qtbot.waitExposed(panel)
    _show(panel)
    row = _row(panel, child.pid)
    panel.view.scrollTo(panel.model.index(row, 0))
    point = panel.view.visualRect(panel.model.index(row, COMMAND)).center()
    panel.view.customContextMenuRequested.emit(point)  # what a right-click on the row sends
    assert panel.menu is not None and panel.menu.isVisible()
    assert panel.selected_process().pid == child.pid
    assert [a.text() for a in panel.menu.actions()][0] == "Terminate (SIGTERM)…"
    panel.menu.close()


def test_a_run_this_windows_store_does_not_hold_stops_with_words(traindeck_home):
    from traindeck.gui.pages.monitor.processes_panel import stop_run_in_store

    assert stop_run_in_store("20260101-120000-0000") == [
        "run 20260101-120000-0000 is not in this window's run store: stop it where it was started"]

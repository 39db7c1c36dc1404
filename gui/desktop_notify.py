"""Desktop notifications while a dashboard window is open: a run ended (succeeded, failed, stopped, lost), stalled,
or its loss became NaN. The summary names the run and the event, the body is the diagnosis' first line; clicking
one opens the run where the desktop supports actions.

What happened comes from the run store (backend.runs.alert_feed): one reader for the whole window, so an event is
shown once however many pages watch its run. The user's own notify command is not run here (the supervisor runs
it, window or not); `traindeck notify` and the Launch page's alert settings turn these notifications off.

How it reaches the desktop, first that works: org.freedesktop.Notifications.Notify on the session bus, sent with
`gdbus call` (an argv; PySide6's QtDBus cannot type the uint32 argument Notify takes) while QtDBus listens for
ActionInvoked (the click); `notify-send` (no click); the system tray's balloon (QSystemTrayIcon.showMessage).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QSystemTrayIcon, QWidget

from traindeck.backend.runs import Alert
from traindeck.gui.context import AppContext

SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
APP_NAME = "traindeck"
POLL_MS = 2000
_CALL_TIMEOUT_S = 5


@dataclass(frozen=True)
class Delivery:
    """How one notification went out: `how` is dbus, notify-send, tray or none; `id` the server's (dbus only)."""

    how: str
    id: int = 0
    problem: str = ""


def notify_argv(alert: Alert, actions: bool, gdbus: str = "gdbus") -> list[str]:
    """The `gdbus call` argv for Notify (GVariant text: strings quoted, the action list only with actions)."""
    def text(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    action_list = "['default', 'Open the run']" if actions else "@as []"
    return [gdbus, "call", "--session", "--timeout", str(_CALL_TIMEOUT_S), "--dest", SERVICE, "--object-path", PATH,
            "--method", SERVICE + ".Notify", "--", text(APP_NAME), "0", "''", text(alert.summary),
            text(alert.diagnosis), action_list, "@a{sv} {}", "-1"]


def send_notification(alert: Alert, actions: bool) -> Delivery:
    """Hand one alert to the desktop (on a worker thread: it runs a process). Never raises."""
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        gdbus = shutil.which("gdbus")
        if gdbus:
            try:
                done = subprocess.run(notify_argv(alert, actions, gdbus), capture_output=True, text=True,
                                      timeout=_CALL_TIMEOUT_S + 2, stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired) as exc:
                problem = f"gdbus: {exc}"
            else:
                found = re.search(r"uint32 (\d+)", done.stdout)
                if done.returncode == 0 and found:
                    return Delivery("dbus", int(found.group(1)))
                problem = "gdbus: " + (done.stderr.strip().splitlines() or ["no answer"])[0]
        else:
            problem = "gdbus not found"
        sender = shutil.which("notify-send")
        if sender:
            try:
                sent = subprocess.run([sender, "--app-name", APP_NAME, alert.summary, alert.diagnosis],
                                      capture_output=True, timeout=_CALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
                if sent.returncode == 0:
                    return Delivery("notify-send")
            except (OSError, subprocess.TimeoutExpired):
                pass
        return Delivery("tray", problem=problem)
    return Delivery("tray", problem="no session bus (DBUS_SESSION_BUS_ADDRESS is not set)")


def server_has_actions() -> bool:
    """Whether the notification server shows buttons/clicks (GetCapabilities lists "actions")."""
    from PySide6.QtDBus import QDBusInterface

    bus = _bus()
    if bus is None:
        return False
    interface = QDBusInterface(SERVICE, PATH, SERVICE, bus)
    interface.setTimeout(2000)  # asked once, on the UI thread: a hung server must not hang the window
    args = interface.call("GetCapabilities").arguments()
    return bool(args) and "actions" in (args[0] or [])


_BUS_NAME = "traindeck-notifications"


def _bus() -> Any:  # a QDBusConnection, or None without a session bus
    """Our own connection to the session bus named by the environment now (not Qt's cached sessionBus(): a bus
    started after the app, as in the tests, is then still found)."""
    from PySide6.QtDBus import QDBusConnection

    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not address:
        return None
    # Named after the address: a connection name is kept per process, and a new bus must get a new connection.
    bus = QDBusConnection.connectToBus(address, f"{_BUS_NAME} {address}")
    return bus if bus.isConnected() else None


class DesktopNotifier(QObject):
    """Reads new alerts every POLL_MS while started and shows each once."""

    shown = Signal(object, object)  # the Alert and its Delivery, once handed to the desktop
    clicked = Signal(str)  # a run id whose notification was clicked

    def __init__(self, ctx: AppContext, window: QWidget, poll_ms: int = POLL_MS):
        super().__init__(window)
        self.ctx, self.window = ctx, window
        self._mark: int | None = None  # the newest event id read (None: not read yet)
        self._seen: set[int] = set()
        self._by_notification: dict[int, str] = {}  # server's notification id -> run id
        # Clicks on ids not known yet: the server shows the notification (and can be clicked) before gdbus's answer,
        # with its id, has come back through the worker to this thread.
        self._early_clicks: dict[int, None] = {}  # ordered: the oldest is dropped first
        self._busy = False
        self._actions: bool | None = None
        self._listening = False
        self._tray: QSystemTrayIcon | None = None
        self._reader = _AlertReader()
        self.timer = QTimer(self, interval=poll_ms)
        self.timer.timeout.connect(self.poll)
        self.clicked.connect(self._open)

    def start(self) -> None:
        if not self.timer.isActive():
            self.timer.start()
            self.poll()

    def stop(self) -> None:
        self.timer.stop()
        self._reader.close()

    def poll(self) -> None:
        if self._busy:
            return
        self._busy = True
        self.ctx.tasks.run(self._reader, self._mark, done=self._read, failed=lambda _e: self._done_reading())

    def _done_reading(self) -> None:
        self._busy = False

    def _read(self, result: tuple[int | None, list[Alert], bool]) -> None:
        self._busy = False
        mark, alerts, enabled = result
        self._mark = mark
        if not self.timer.isActive():
            return  # the window closed meanwhile: nothing is shown without it
        for alert in alerts:
            if alert.event_id in self._seen or not enabled:
                continue
            self._seen.add(alert.event_id)
            self._deliver(alert)

    def _deliver(self, alert: Alert) -> None:
        if self._actions is None:
            self._actions = self._listen()
        self.ctx.tasks.run(send_notification, alert, self._actions, done=lambda d: self._delivered(alert, d))

    def _delivered(self, alert: Alert, delivery: Delivery) -> None:
        if delivery.how == "tray":
            self._tray_message(alert)
        elif delivery.id:
            self._by_notification[delivery.id] = alert.run_id
        self.shown.emit(alert, delivery)
        if delivery.id and delivery.id in self._early_clicks:
            del self._early_clicks[delivery.id]
            self.clicked.emit(alert.run_id)

    def _listen(self) -> bool:
        """Listen for clicks when the server supports actions; returns whether it does."""
        try:
            if not server_has_actions():
                return False
            bus = _bus()
            if bus is None:
                return False
            # Any sender: QtDBus filters a named service by its owner at connect time, and a notification server
            # started later (a desktop restarting its shell) would be missed.
            self._listening = bus.connect("", PATH, SERVICE, "ActionInvoked", self,
                                          "1_action_invoked(uint,QString)")
            return self._listening
        except Exception:  # a desktop without D-Bus must not stop the dashboard: notifications without clicks
            return False

    @Slot("uint", str)
    def _action_invoked(self, notification_id: int, _key: str) -> None:
        run_id = self._by_notification.get(int(notification_id))
        if run_id is not None:
            self.clicked.emit(run_id)
        else:  # kept a while, bounded: clicks on other apps' notifications arrive here too
            self._early_clicks[int(notification_id)] = None
            if len(self._early_clicks) > 64:
                del self._early_clicks[next(iter(self._early_clicks))]

    def _tray_message(self, alert: Alert) -> None:
        if not QSystemTrayIcon.isSystemTrayAvailable():
            return
        if self._tray is None:
            self._tray = QSystemTrayIcon(self.window.windowIcon(), self)
            self._tray.messageClicked.connect(self._tray_clicked)
        self._last_tray = alert.run_id
        self._tray.show()
        self._tray.showMessage(alert.summary, alert.diagnosis)

    _last_tray = ""

    def _tray_clicked(self) -> None:
        if self._last_tray:
            self.clicked.emit(self._last_tray)

    def _open(self, run_id: str) -> None:
        self.ctx.open_run.emit(run_id)
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()


class _AlertReader:
    """Worker side: new alerts after `mark` (the first read only sets the mark) and whether they are wanted.

    Keeps its store open between reads: opening one (connection, pragmas, the schema check's write transaction)
    every POLL_MS would be most of this reader's cost, which a window left open for days pays every two seconds.
    Opened again when the store's file is another one (moved, or TRAINDECK_HOME changed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # reads run on the task pool's threads: one at a time; close() takes it if free
        self._store: Any = None
        self._key: tuple[str, int] | None = None

    def __call__(self, mark: int | None) -> tuple[int | None, list[Alert], bool]:
        from traindeck.backend.core import run_store_path
        from traindeck.backend.runs import RunStore, alert_mark, alerts_after, desktop_notifications

        path = run_store_path()
        try:
            key = (str(path), os.stat(path).st_ino)
        except OSError:
            self.close()
            return (0 if mark is None else mark), [], False
        with self._lock:
            if self._key != key:
                self._close()
                self._store, self._key = RunStore(path, busy_timeout_s=2.0), key
            if mark is None:
                return alert_mark(self._store), [], False
            new_mark, alerts = alerts_after(self._store, mark)
        return new_mark, alerts, desktop_notifications() if alerts else False

    def close(self) -> None:
        """Close the store now, unless a read holds it (it can wait on SQLite's lock up to 2 s): the UI thread,
        closing the window, never waits for that; the read's connection then goes with the reader."""
        if self._lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self._lock.release()

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store, self._key = None, None

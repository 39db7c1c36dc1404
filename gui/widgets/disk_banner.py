"""A line above every page while the disk holding traindeck's data folder is low or full (the backend's
data_disk_notice): a run's log is cut when it fills, so the warning has to be seen wherever the person is, not only
as one notification. Asked every CHECK_MS off the GUI thread; gone as soon as space is freed."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QWidget

from traindeck.backend.runs import DiskNotice, data_disk_notice
from traindeck.gui.tasks import Tasks
from traindeck.gui.widgets.message_list import MessageList

CHECK_MS = 5_000  # a statvfs: microseconds


class DiskBanner(MessageList):
    """Hidden while the data folder's disk has room; its notice (a warning, or an error once full) otherwise."""

    def __init__(self, tasks: Tasks, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("diskBanner")
        self.setContentsMargins(8, 4, 8, 4)
        self.tasks = tasks
        self.notice: DiskNotice | None = None
        self._asking = False
        self.timer = QTimer(self, interval=CHECK_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()
        self.check()

    def check(self) -> None:
        if self._asking:
            return
        self._asking = True
        self.tasks.run(data_disk_notice, done=self.show_notice, failed=self._failed)

    def _failed(self, _error: str) -> None:
        self._asking = False

    def show_notice(self, notice: DiskNotice | None) -> None:
        self._asking = False
        if notice == self.notice:
            return
        self.notice = notice
        self.set_items([] if notice is None else [("error" if notice.full else "warning", notice.text)])

"""The pages' Poller: the live pace while news comes, backing off while none does, the hidden pace or a pause off
screen, and the live pace again on return."""

from __future__ import annotations

from PySide6.QtCore import QObject

from traindeck.gui.polling import Poller


def test_a_poller_backs_off_while_nothing_changes_and_reads_at_the_hidden_pace_off_screen(qtbot):
    reads: list[int] = []
    owner = QObject()
    poller = Poller(owner, lambda: reads.append(1), live_ms=100, max_ms=400, hidden_ms=1000)
    poller.start()
    assert poller.active() and poller.interval() == 100
    poller.settle(news=False, on_screen=True)
    assert poller.interval() == 200
    poller.settle(news=False, on_screen=True)
    poller.settle(news=False, on_screen=True)
    assert poller.interval() == 400  # doubling stops at max_ms
    poller.settle(news=True, on_screen=True)
    assert poller.interval() == 100
    poller.off_screen()
    assert poller.active() and poller.interval() == 1000
    poller.settle(news=True, on_screen=False)
    assert poller.interval() == 1000  # news read off screen does not bring the live pace back
    poller.on_screen()
    assert poller.active() and poller.interval() == 100
    qtbot.waitUntil(lambda: len(reads) >= 2, timeout=2000)


def test_a_poller_without_a_hidden_pace_pauses_off_screen_and_resumes_on_return(qtbot):
    reads: list[int] = []
    owner = QObject()
    poller = Poller(owner, lambda: reads.append(1), live_ms=50)
    poller.start()
    qtbot.waitUntil(lambda: len(reads) >= 1, timeout=2000)
    poller.off_screen()
    assert not poller.active()
    count = len(reads)
    qtbot.wait(200)
    assert len(reads) == count
    poller.on_screen()
    assert poller.active()
    qtbot.waitUntil(lambda: len(reads) > count, timeout=2000)
    poller.stop()
    poller.off_screen()
    poller.on_screen()
    assert not poller.active()  # stopped by its page (a finished run), not paused: it stays stopped

"""The notify command's time limit bounds the whole call: a command that exits at once but leaves a process in a
session of its own holding its stderr returns at once, and one that hangs is ended with what it started."""

from __future__ import annotations

import time

import psutil
import pytest

from traindeck.backend.runs.supervisor import alerts


def _sleepers(seconds: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if (proc.info["cmdline"] or [])[-2:] == ["sleep", seconds]:
            found.append(proc)
    return found


@pytest.fixture
def cleanup():
    marks: list[str] = []
    yield marks
    for seconds in marks:
        for proc in _sleepers(seconds):
            proc.kill()


def _announce(command: list[str], limit: float) -> tuple[str, float]:
    alerts.save_command(command, limit)
    started = time.monotonic()
    thread = alerts.announce("failed", "20260101-000000-abcd", "test run", "boom")
    assert thread is not None
    thread.join(limit + 10)
    return thread.name, time.monotonic() - started


def test_a_command_that_leaves_a_daemon_holding_stderr_returns_at_once(cleanup):
    cleanup.append("41.5")
    name, took = _announce(["sh", "-c", "setsid sleep 41.5 & echo started >&2; exit 0"], 5.0)
    assert took < 3.0, took
    assert name.endswith("exit code 0"), name  # it exited at once: not "killed after 5 s"


def test_a_hanging_command_is_ended_with_what_it_started_within_the_limit(cleanup):
    cleanup += ["42.5", "43.5"]
    # The daemon leaves for a session of its own only after a moment: the limit finds it there, not in the group.
    name, took = _announce(["sh", "-c", "(sleep 0.2; exec setsid sleep 42.5) & sleep 43.5"], 1.0)
    assert took < 3.0, took
    assert "killed after 1 s (time limit)" in name
    deadline = time.monotonic() + 2.0  # a killed process leaves the table once its new parent reaps it
    while (_sleepers("42.5") or _sleepers("43.5")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers("42.5") == [] and _sleepers("43.5") == []


def test_a_failing_command_says_its_exit_code_and_first_error_line(cleanup):
    name, _took = _announce(["sh", "-c", "echo 'cannot reach the webhook' >&2; echo more >&2; exit 3"], 5.0)
    assert name.endswith("exit code 3: cannot reach the webhook"), name

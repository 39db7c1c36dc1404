"""`traindeck monitor` on a terminal redraws one screen in place, as top and nvitop do (a real pseudo-terminal, a
real subprocess); piped, it prints one plain block per sample."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable

import psutil

from traindeck.backend.cli.monitor_cmd import (
    ALT_SCREEN_OFF,
    ALT_SCREEN_ON,
    CLEAR_BELOW,
    CLEAR_LINE_END,
    CURSOR_SHOW,
    HOME,
)

ROWS, COLUMNS = 24, 90


def _read(fd: int, seconds: float, *, until: Callable[[bytes], bool] | None = None) -> bytes:
    """What the terminal shows within `seconds`, or until `until(what was shown)` holds."""
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (until is not None and until(out)):
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            out += chunk
    return out


def test_on_a_terminal_each_sample_redraws_the_screen_in_place_and_ctrl_c_gives_the_shell_back():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "traindeck", "monitor", "--interval", "0.5", "--processes"],
                            stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, close_fds=True)
    os.close(slave)
    try:
        output = _read(master, 6.0)
        proc.send_signal(signal.SIGINT)
        output += _read(master, 3.0)
        assert proc.wait(10) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = output.decode("utf-8", "replace")
    assert text.startswith(ALT_SCREEN_ON)  # the alternate screen: the shell's screen comes back on exit
    assert text.rstrip().endswith(CURSOR_SHOW + ALT_SCREEN_OFF)
    frames = text.split(HOME)[1:]
    assert len(frames) >= 4  # ~ one a 0.5 s after start-up, each from the top-left corner
    for frame in frames[:-1]:
        assert frame.endswith(CLEAR_BELOW)  # what the last frame drew below this one is cleared
        lines = [line.rstrip("\r") for line in frame[: -len(CLEAR_BELOW)].split("\n")]  # the tty adds a \r
        assert len(lines) <= ROWS  # never scrolls
        for line in lines:
            assert line.endswith(CLEAR_LINE_END)  # a shorter line than last time leaves nothing behind
            assert len(line) - len(CLEAR_LINE_END) <= COLUMNS  # never wraps
    assert "CPU" in frames[1] and "RAM" in frames[1]
    # The machine's busiest processes below the samples, within the screen (how many depends on the machine).
    assert re.search(r"PID +USER +CPU%", frames[-2])
    assert len(frames[-2].split("\n")) <= ROWS
    assert len(re.findall(r"^ +\d+ \S+ +[\d.-]+ ", frames[-2], flags=re.M)) >= 3  # this test, the monitor, init


def test_piped_it_prints_one_plain_block_per_sample():
    proc = subprocess.Popen([sys.executable, "-m", "traindeck", "monitor", "--interval", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    seen = b""  # Ctrl+C once three samples are out (each block is flushed as it is printed)
    while len(re.findall(rb"^\d\d:\d\d:\d\d  CPU", seen, flags=re.M)) < 3:
        line = proc.stdout.readline()
        assert line, f"the monitor ended before its third sample: {proc.wait(10)}"
        seen += line
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    text = (seen + out).decode()
    assert "\x1b" not in text
    assert len(re.findall(r"^\d\d:\d\d:\d\d  CPU", text, flags=re.M)) >= 3


def test_on_a_terminal_the_live_runs_processes_are_redrawn_in_each_frame_within_the_screen(traindeck_home):
    from fixtures.monitor_run_tree import run_tree

    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    me = psutil.Process()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with run_tree(ranks=2, mib=1) as tree, RunStore() as store:
        store.add_run(RunRecord(id="20260101-120000-ab12", run_dir="/nonexistent/a", created_at=time.time(),
                                name="train_tiny-zero2", supervisor_pid=me.pid, supervisor_started=me.create_time(),
                                launcher_pid=tree["launcher"]))
        proc = subprocess.Popen([sys.executable, "-m", "traindeck", "monitor", "--interval", "0.5"],
                                stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, close_fds=True)
        os.close(slave)
        try:
            # At least 4 frames (a busy machine takes seconds to start the command), then Ctrl+C.
            output = _read(master, 30.0, until=lambda shown: shown.count(HOME.encode()) >= 4)
            proc.send_signal(signal.SIGINT)
            output += _read(master, 3.0)
            assert proc.wait(10) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
    frames = output.decode("utf-8", "replace").split(HOME)[1:]
    assert len(frames) >= 3
    for frame in frames[1:-1]:
        lines = [line.rstrip("\r").removesuffix(CLEAR_LINE_END)
                 for line in frame.removesuffix(CLEAR_BELOW).split("\n")]
        assert len(lines) <= ROWS and all(len(line) <= COLUMNS for line in lines)
        assert sum("GPUs: none" in line or " GPU0 " in line for line in lines) <= 1 or "GPU1" in frame
        rows = [line.split()[:4] for line in lines if "train_tiny-zero2 ·ab12" in line]
        assert rows == [["train_tiny-zero2", "·ab12", "launcher", str(tree["launcher"])],
                        ["train_tiny-zero2", "·ab12", "0", str(tree["ranks"][0])],
                        ["train_tiny-zero2", "·ab12", "1", str(tree["ranks"][1])]]

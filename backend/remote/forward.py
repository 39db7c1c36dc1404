"""`traindeck --host USER@MACHINE COMMAND...`: run one command with the remote machine's traindeck.

stdout and the remote's stderr pass through as they come (so `logs --follow` streams), and the remote exit status
becomes ours. Failures before the remote traindeck ran are one line each (exit codes in backend/remote/ssh.py).

Ctrl+C: on a terminal, ssh gets `-tt`: the remote side has a terminal too, Ctrl+C reaches the remote traindeck as it
would locally (a `run` asks its run to stop, `logs --follow` ends). Without a terminal (a script, a pipe, the
dashboard) stdout and stderr must stay apart and unmangled, so no pty: instead ssh's stdin is a pipe we hold and
the remote traindeck is told (TRAINDECK_END_WITH_STDIN) to interrupt itself when that stdin ends, which happens
when we close it on SIGINT/SIGTERM or when the connection drops. Nothing of the command is left on the remote.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

from traindeck.backend.remote.ssh import (
    SSH_FAILED,
    RemoteError,
    Target,
    explain_ssh_failure,
    is_not_found_line,
    missing_traindeck,
    remote_command,
    ssh_argv,
)


def run_remote(target: Target, args: list[str]) -> int:
    """Run `traindeck ARGS` on the target; returns the exit status (the remote one, or ours for ssh failures)."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    with tempfile.TemporaryDirectory(prefix="traindeck-ssh-") as tmp:  # created 0700 by tempfile
        log_file = Path(tmp) / "ssh.log"
        argv = ssh_argv(target, remote_command(target, args, end_with_stdin=not interactive), tty=interactive,
                        log_file=log_file)
        if interactive:
            return _finish(target, _run_on_terminal(argv), log_file, held=[])
        return _run_piped(target, argv, log_file)


def _run_on_terminal(argv: list[str]) -> int:
    # ssh puts the terminal in raw mode: Ctrl+C is a byte for the remote pty, not a signal here. A SIGINT that
    # still reaches us (kill -INT) is ssh's to act on: we wait for it to finish.
    proc = subprocess.Popen(argv)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def _run_piped(target: Target, argv: list[str], log_file: Path) -> int:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    held: list[bytes] = []  # the remote shell's "traindeck: not found", replaced by our one line if that was it
    relay = threading.Thread(target=_relay_stderr, args=(target, proc.stderr, held), daemon=True)
    relay.start()
    ended_by: int | None = None

    def end_remote(signum: int, _frame: object) -> None:
        nonlocal ended_by
        ended_by = signum
        _close(proc.stdin)  # the remote traindeck sees EOF and interrupts itself; ssh then exits with its status

    previous = {s: signal.signal(s, end_remote) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _close(proc.stdin)
    relay.join(timeout=5)
    code = _finish(target, code, log_file, held)
    if ended_by is not None and code == SSH_FAILED:
        return 128 + ended_by
    return code


def _relay_stderr(target: Target, stream: IO[bytes] | None, held: list[bytes]) -> None:
    if stream is None:
        return
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    for line in iter(stream.readline, b""):
        if is_not_found_line(target, line.decode(errors="replace")):
            held.append(line)
            continue
        if out is not None:
            out.write(line)
            out.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))


def _finish(target: Target, code: int, log_file: Path, held: list[bytes]) -> int:
    if code == SSH_FAILED:
        try:
            messages = log_file.read_text(errors="replace")
        except OSError:
            messages = ""
        if messages.strip():  # ssh said why: its failure, not the remote command's 255
            _error(explain_ssh_failure(target, messages))
            return explain_ssh_failure(target, messages).code
    if code == 127 and held:
        _error(missing_traindeck(target))
        return code
    for line in held:  # not what it looked like: pass it on after all
        sys.stderr.write(line.decode(errors="replace"))
    return code


def _error(exc: RemoteError) -> None:
    print(f"traindeck: {exc}", file=sys.stderr)


def _close(stream: IO[bytes] | None) -> None:
    try:
        if stream is not None:
            stream.close()
    except OSError:
        pass


def start_stdin_watch() -> None:
    """On the remote side (TRAINDECK_END_WITH_STDIN=1): interrupt this traindeck, as Ctrl+C would, when stdin ends
    (the ssh connection closed). The variable is removed so the run's own processes never inherit it."""
    os.environ.pop("TRAINDECK_END_WITH_STDIN", None)

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="end-with-stdin", daemon=True).start()

"""One persistent SSH connection to a remote traindeck (the dashboard's): an ssh ControlMaster whose socket lives in
a private temp directory (0700), so each later call is a new ssh process that skips the TCP and key exchange.

Every call is an argv list to `ssh` with the remote command line quoted per word (backend/remote/ssh.py); there is
never a shell on our side. Calls block: callers on a UI keep them off the UI thread.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from traindeck.backend.remote.ssh import (
    CONNECT_TIMEOUT_S,
    MISSING,
    SSH_FAILED,
    RemoteError,
    Target,
    explain_ssh_failure,
    is_not_found_line,
    missing_traindeck,
    remote_command,
    ssh_argv,
)

CALL_TIMEOUT_S = 120.0


class Session:
    """`open()` starts the master and checks there is a traindeck there; `call`/`json` run one remote command;
    `stream` starts one that keeps printing (a followed log); `close()` ends all of them and the master."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.dir = Path(tempfile.mkdtemp(prefix="traindeck-remote-"))  # mkdtemp: mode 0700, ours alone
        self.control = self.dir / "cm"
        self.remote_version = ""
        self._master: subprocess.Popen[bytes] | None = None
        self._streams: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    # ---- the connection -------------------------------------------------------------------------------------
    def open(self) -> str:
        """Connect (raises RemoteError with the one-line reason) and return the remote traindeck's version line."""
        log = self.dir / "master.log"
        self._master = subprocess.Popen(ssh_argv(self.target, None, control_path=self.control, master=True,
                                                 log_file=log),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + CONNECT_TIMEOUT_S + 5
        while not self.control.exists():
            if self._master.poll() is not None or time.monotonic() > deadline:
                exited = self._master.poll() is not None
                messages = _read(log)  # before close(): it removes the folder the log is in
                self.close()
                raise explain_ssh_failure(self.target, messages or ("ssh exited without a message" if exited
                                                                    else "connection timed out"))
            time.sleep(0.02)
        self.remote_version = self.call(["--version"]).stdout.decode(errors="replace").strip()
        return self.remote_version

    @property
    def connected(self) -> bool:
        return self._master is not None and self._master.poll() is None

    def close(self) -> None:
        with self._lock:
            streams, self._streams = self._streams, []
        for proc in streams:
            end_stream(proc)
        if self._master is not None and self._master.poll() is None:
            self._master.terminate()
            try:
                self._master.wait(5)
            except subprocess.TimeoutExpired:
                self._master.kill()
                self._master.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- calls ------------------------------------------------------------------------------------------------
    def _argv(self, args: list[str], end_with_stdin: bool) -> list[str]:
        if not self.connected:
            raise RemoteError(f"{self.target.host}: not connected (the connection ended)", SSH_FAILED)
        return ssh_argv(self.target, remote_command(self.target, args, end_with_stdin=end_with_stdin),
                        control_path=self.control)

    def call(self, args: list[str], timeout: float = CALL_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """`traindeck ARGS` there, its output captured. With check, a failure raises RemoteError with the
        remote's own last error line (its exit status as the code)."""
        result = subprocess.run(self._argv(args, False), stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise self.failure(result.returncode, result.stderr.decode(errors="replace"))
        return result

    def json(self, args: list[str], timeout: float = CALL_TIMEOUT_S) -> Any:
        return json.loads(self.call(args, timeout).stdout)

    def failure(self, code: int, stderr: str) -> RemoteError:
        if code == MISSING and any(is_not_found_line(self.target, line) for line in stderr.splitlines()):
            return missing_traindeck(self.target)
        if code == SSH_FAILED and not self.connected:
            return RemoteError(f"{self.target.host}: the connection ended", SSH_FAILED)
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        text = lines[-1].removeprefix("traindeck: ") if lines else f"exit status {code}"
        return RemoteError(f"{self.target.host}: {text}", code)

    def stream(self, args: list[str], out: IO[bytes]) -> subprocess.Popen[bytes]:
        """`traindeck ARGS` there writing into `out` as it prints, until it ends or end_stream()/close(). Its stdin
        is a pipe we hold: closing it makes the remote traindeck interrupt itself (nothing left there)."""
        proc = subprocess.Popen(self._argv(args, True), stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.DEVNULL)
        with self._lock:
            self._streams = [p for p in self._streams if p.poll() is None] + [proc]
        return proc


def end_stream(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """End a `stream`: EOF on its stdin (the remote side interrupts itself), then wait; kill ssh if it lingers."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""

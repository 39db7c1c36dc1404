"""A real sshd on 127.0.0.4:2224 for the remote-machine tests: keys and configs in a temp dir, its own pid file.

The "remote" traindeck is this worktree's .venv/bin/traindeck with its own TRAINDECK_HOME (set through the remote
command: sshd does not pass our environment), so a test sees data that really came from the other side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.sshleftover import claim, end_orphaned_sshds

ADDRESS, PORT = "127.0.0.4", 2224
REPO = Path(__file__).resolve().parent.parent
VENV_TRAINDECK = Path(sys.executable).parent / "traindeck"


@dataclass
class Remote:
    host: str  # what --host gets
    ssh_config: Path  # the client config (TRAINDECK_SSH_CONFIG)
    home: Path  # the remote side's TRAINDECK_HOME
    traindeck: str  # what --remote-traindeck gets

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["TRAINDECK_SSH_CONFIG"] = str(self.ssh_config)
        env["TRAINDECK_REMOTE"] = self.traindeck
        env.update(extra)
        return env


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (sshd on a loopback address with its own host key)"
    if not Path("/usr/sbin/sshd").exists() or shutil.which("ssh") is None:
        return "needs openssh-server and ssh (apt-get install -y openssh-server)"
    if not VENV_TRAINDECK.exists():
        return f"needs the traindeck entry point beside this Python ({VENV_TRAINDECK})"
    return None


def _listening(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ADDRESS, PORT), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def sshd() -> Iterator[Remote]:
    why = _why_not()
    if why:
        pytest.skip(f"remote-machine tests skipped: {why}")
    try:
        with running_sshd() as remote:
            yield remote
    except SshdNotStarted as exc:
        pytest.skip(f"remote-machine tests skipped: {exc}")


class SshdNotStarted(Exception):
    pass


@contextlib.contextmanager
def running_sshd() -> Iterator[Remote]:
    """The sshd (started here, stopped by its pid file at the end) and how to reach the traindeck behind it."""
    if _listening(0.3):  # a leftover of an interrupted session holds the port: end it, or say who does
        end_orphaned_sshds("traindeck-sshd-", lambda: _listening(0.3))
        if _listening(0.3):
            raise SshdNotStarted(f"something else already listens on {ADDRESS}:{PORT}")
    tmp = Path(tempfile.mkdtemp(prefix="traindeck-sshd-"))
    os.chmod(tmp, 0o700)
    claim(tmp)
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())
    pid_file = tmp / "sshd.pid"
    config = tmp / "sshd_config"
    config.write_text(f"""Port {PORT}
ListenAddress {ADDRESS}
HostKey {tmp / 'host_key'}
AuthorizedKeysFile {tmp / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile {pid_file}
StrictModes no
""")
    client = tmp / "ssh_config"
    client.write_text(f"""Host {ADDRESS}
    Port {PORT}
    IdentityFile {tmp / 'user_key'}
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile {tmp / 'known_hosts'}
    LogLevel ERROR
""")
    Path("/run/sshd").mkdir(exist_ok=True)
    started = subprocess.run(["/usr/sbin/sshd", "-f", str(config), "-E", str(tmp / "sshd.log")],
                             capture_output=True, text=True)
    if started.returncode != 0 or not _listening(10):
        shutil.rmtree(tmp, ignore_errors=True)
        raise SshdNotStarted(f"sshd did not start on {ADDRESS}:{PORT} "
                             f"({(started.stderr or '').strip() or 'not listening'})")
    home = tmp / "remote-home"
    home.mkdir()
    traindeck = f"env TRAINDECK_HOME={home} PYTHONUNBUFFERED=1 {VENV_TRAINDECK}"
    try:
        yield Remote(f"root@{ADDRESS}", client, home, traindeck)
    finally:
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        shutil.rmtree(tmp, ignore_errors=True)


def remote_processes(marker: str) -> list[str]:
    """Command lines of processes (any user, this machine = the "remote") holding `marker`, this one excluded."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if marker in line and proc.info["pid"] != os.getpid():
            found.append(f"{proc.info['pid']} {line}")
    return found

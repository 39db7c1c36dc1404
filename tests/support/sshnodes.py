"""Two SSH "nodes" on loopback for the multi-node tests: an sshd of our own on 127.0.0.2 and 127.0.0.3, port 2222.

Everything lives in one temp dir: host key, user key, authorized_keys (named by the sshd config, so the real
/root/.ssh is never touched), the sshd config, its pid file and log, and an SSH client config. ssh and pdsh find
the client config through PDSH_SSH_ARGS_APPEND="-F FILE", the variable DeepSpeed's pdsh runner and traindeck's own
ssh calls both honour. The sshd is ended by its pid file when the session ends. Skips (with the reason) where it
cannot run: not root, no sshd or pdsh, or sshd does not answer.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.sshleftover import claim, end_orphaned_sshds

NODES = ("127.0.0.2", "127.0.0.3")
PORT = 2222
SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshNodes:
    hosts: tuple[str, ...]
    client_config: Path
    dir: Path

    @property
    def env(self) -> dict[str, str]:
        return {"PDSH_SSH_ARGS_APPEND": f"-F {self.client_config}"}

    def hostfile(self, path: Path, slots: int = 1, hosts: tuple[str, ...] | None = None) -> Path:
        path.write_text("".join(f"{h} slots={slots}\n" for h in (hosts or self.hosts)))
        return path


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (sshd of its own on 127.0.0.2/127.0.0.3)"
    for tool in (SSHD, "ssh", "ssh-keygen", "pdsh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install openssh-server pdsh)"
    return None


def _listening(host: str) -> bool:
    try:
        with socket.create_connection((host, PORT), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def ssh_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodes]:
    why = _why_not()
    if why:
        pytest.skip(why)
    if any(_listening(h) for h in NODES):  # a leftover of an interrupted session: end it, or say who holds the port
        end_orphaned_sshds("sshnodes", lambda: any(_listening(h) for h in NODES))
        if any(_listening(h) for h in NODES):
            pytest.skip(f"something else already listens on {NODES[0]}:{PORT}")
    d = tmp_path_factory.mktemp("sshnodes")
    claim(d)
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    pid_file = d / "sshd.pid"
    (d / "sshd_config").write_text(
        f"Port {PORT}\n" + "".join(f"ListenAddress {h}\n" for h in NODES)
        + f"HostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {pid_file}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "StrictModes no\nUsePAM no\nPrintMotd no\nAcceptEnv none\nMaxStartups 100\nMaxSessions 100\n")
    (d / "ssh_config").write_text(
        f"Host {' '.join(NODES)}\n  Port {PORT}\n  User root\n  IdentityFile {d / 'user_key'}\n"
        f"  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile {d / 'known_hosts'}\n"
        "  LogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True)
    started = subprocess.run([SSHD, "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")],
                             capture_output=True, text=True)
    if started.returncode != 0:
        pytest.skip(f"sshd did not start: {started.stderr.strip()[-300:]}")
    deadline = time.monotonic() + 10
    while not all(_listening(h) for h in NODES):
        if time.monotonic() > deadline:
            _end(pid_file)
            pytest.skip(f"sshd does not answer on {NODES}:{PORT}; see {d / 'sshd.log'}")
        time.sleep(0.1)
    try:
        yield SshNodes(NODES, d / "ssh_config", d)
    finally:
        _end(pid_file)


def _end(pid_file: Path) -> None:
    """End the sshd we started (its listener; sessions still open end with their clients)."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass

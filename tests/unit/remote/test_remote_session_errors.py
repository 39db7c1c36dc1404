"""File > Connect to machine... says why a connection failed in ssh's own words (no sshd needed: a closed port).

Found in the walk-through: connecting to a machine whose SSH port refused said "host unreachable (connection timed
out)" at once, because the ssh log holding "Connection refused" was removed with the session's folder before it
was read.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from traindeck.backend.remote.session import Session
from traindeck.backend.remote.ssh import UNREACHABLE, RemoteError, Target

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client here")


def closed_loopback_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on: bound, noted, closed
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_refused_connection_is_said_as_refused_not_timed_out(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {closed_loopback_port()}\n"
                      "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    session = Session(Target("nobody@closed-port", ssh_config=str(config)))
    with pytest.raises(RemoteError) as caught:
        session.open()
    assert "connection refused" in str(caught.value).lower(), str(caught.value)
    assert "timed out" not in str(caught.value)
    assert caught.value.code == UNREACHABLE
    assert not session.dir.exists()  # the private folder is still cleaned up

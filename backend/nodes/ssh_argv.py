"""The ssh command lines traindeck runs itself (pre-flight checks, the per-node agents).

They get the same extra arguments DeepSpeed's pdsh runner gives its ssh: PDSH_SSH_ARGS_APPEND (e.g. `-F FILE`,
`-i KEY`, `-l USER`) and the --ssh-port, so a host that passes the checks is reached the way the run reaches it.
BatchMode: a host that would ask for a password fails at once instead of waiting on a prompt nobody sees.
Always an argv list; the remote command is one string quoted with shlex.join (the remote shell reads it).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

SSH_ARGS_ENV = "PDSH_SSH_ARGS_APPEND"
CONNECT_TIMEOUT_S = 10


def extra_ssh_args(env: Mapping[str, str] | None = None) -> list[str]:
    value = (os.environ if env is None else env).get(SSH_ARGS_ENV, "")
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def ssh_argv(host: str, remote: Sequence[str], *, port: int | None = None, env: Mapping[str, str] | None = None,
             batch: bool = True) -> list[str]:
    argv = ["ssh", "-o", "BatchMode=yes" if batch else "BatchMode=no", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", *extra_ssh_args(env)]
    if port is not None:
        argv += ["-p", str(port)]
    return [*argv, host, "--", shlex.join(remote)]


def ssh_failure(host: str, returncode: int, stderr: str) -> str:
    """One line for an ssh that did not get to run the command (exit 255)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("Warning:")]
    why = lines[-1] if lines else f"ssh exited with {returncode}"
    if "Permission denied" in why or "password" in why.lower():
        why += " (passwordless SSH is needed: a key in the host's authorized_keys, no passphrase prompt)"
    return f"{host}: not reachable by SSH: {why}"

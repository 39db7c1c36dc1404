"""How one `ssh` call to the remote traindeck is built, and what its failures mean in the user's words.

ssh always hands the remote side ONE string, which the remote user's login shell parses: there is no argv
across SSH. So the remote command line is built here with shlex.quote per argument (never by joining raw
strings), which keeps an argument with spaces, quotes or `;` one argument there. The local side is an argv list
(no shell of ours anywhere).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# Exit codes of `traindeck --host` for failures before the remote traindeck ran (sysexits where one fits);
# once it ran, its own exit status is passed through unchanged.
UNREACHABLE = 68  # EX_NOHOST: name not resolved, connection refused or timed out
AUTH_REFUSED = 77  # EX_NOPERM: the server refused our keys (BatchMode: never a password prompt)
SSH_FAILED = 255  # ssh's own failure code: any other ssh error
MISSING = 127  # the remote shell's "command not found": no traindeck there

# The remote traindeck raises SIGINT in itself when its stdin reaches EOF (the ssh connection ended): what ends a
# remote command when the local one is interrupted and no terminal carries the Ctrl+C (see backend/cli main()).
END_WITH_STDIN = "TRAINDECK_END_WITH_STDIN"
SSH_CONFIG_ENV = "TRAINDECK_SSH_CONFIG"  # an ssh client config file to use instead of ~/.ssh/config (-F)
REMOTE_ENV = "TRAINDECK_REMOTE"  # the remote traindeck command when --remote-traindeck is not given
CONNECT_TIMEOUT_S = 10

HOST_FORM = "user@host[:port]"
# A host name, ssh config Host alias or IPv4 address; an IPv6 address in brackets (a port may follow) or bare (then
# no port). Nothing ssh could read as an option, a second argument or a URI.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_BRACKETED_V6 = re.compile(r"\[(?P<addr>[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?)\]")
_BARE_V6 = re.compile(r"[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?")
_USER = re.compile(r"[^\s@:/\[\]-][^\s:/\[\]]*")


def parse_host(value: str) -> tuple[str, int | None]:
    """`--host`'s `[user@]host[:port]` -> (ssh's destination, port or None). A RemoteError (exit 2) names what is
    wrong with any other form, before ssh is called: ssh's own complaints are several lines of usage text."""

    def wrong(what: str) -> RemoteError:
        return RemoteError(f"--host: {value!r} {what} ({HOST_FORM})", 2)

    if value.startswith("-"):
        raise wrong("starts with '-' (an ssh option, not a host)")
    user, at, rest = value.rpartition("@")
    if at and not user:
        raise wrong("has an empty user before '@'")
    if at and not _USER.fullmatch(user):
        raise wrong("has no valid user before '@'")
    port_text: str | None = None
    if (v6 := _BRACKETED_V6.match(rest)) is not None:
        host, tail = v6.group("addr"), rest[v6.end():]
        if tail:
            if not tail.startswith(":"):
                raise wrong("is not a host name")
            port_text = tail[1:]
    elif _BARE_V6.fullmatch(rest):
        host = rest
    else:
        host, colon, port_text = rest.partition(":")
        if not colon:
            port_text = None
        if not _NAME.fullmatch(host):
            raise wrong("is not a host name")
    port: int | None = None
    if port_text is not None:
        if not port_text.isascii() or not port_text.isdigit():
            raise wrong("is not a host name")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise wrong("has a port outside 1-65535")
    return (f"{user}@{host}" if at else host), port


class RemoteError(Exception):
    """A failure of the connection or of finding traindeck there: one line for the user, and an exit code."""

    def __init__(self, text: str, code: int):
        super().__init__(text)
        self.code = code


@dataclass(frozen=True)
class Target:
    """Where the remote traindeck is: `host` as ssh takes it (USER@MACHINE, or a Host alias of the ssh config)."""

    host: str
    traindeck: str = "traindeck"  # a command line for the remote side: a path, or e.g. `env X=1 /opt/td/traindeck`
    ssh_config: str | None = None  # -F FILE; None: the user's own ssh config (and the system's)
    port: int | None = None  # -p PORT; None: the ssh config's (or 22)

    @classmethod
    def make(cls, host: str, traindeck: str | None = None) -> Target:
        """From `--host`'s `[user@]host[:port]` (checked: see parse_host) and the remote traindeck command."""
        destination, port = parse_host(host)
        return cls(destination, traindeck or os.environ.get(REMOTE_ENV) or "traindeck",
                   os.environ.get(SSH_CONFIG_ENV) or None, port)

    def traindeck_words(self) -> list[str]:
        try:
            words = shlex.split(self.traindeck)
        except ValueError as exc:
            raise RemoteError(f"--remote-traindeck {self.traindeck!r}: {exc}", 2) from exc
        if not words:
            raise RemoteError("--remote-traindeck is empty", 2)
        return words


def remote_command(target: Target, args: list[str], *, end_with_stdin: bool) -> str:
    """The one string the remote shell runs. `env` (not `VAR=value cmd`) so that csh and fish users' shells
    take it too; every word quoted on its own."""
    words = ["env", f"{END_WITH_STDIN}=1"] if end_with_stdin else []
    words += target.traindeck_words() + list(args)
    return " ".join(shlex.quote(w) for w in words)


def ssh_argv(target: Target, command: str | None, *, tty: bool = False, control_path: Path | None = None,
             master: bool = False, log_file: Path | None = None) -> list[str]:
    """ssh's argv. BatchMode: a missing key fails at once instead of prompting (the dashboard has no terminal).
    `control_path`: go through (or, with master, be) the persistent connection there. `log_file` (-E) takes ssh's
    own messages, so the remote's stderr reaches ours untouched and ssh's errors can be read and explained."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
    if target.ssh_config:
        argv += ["-F", target.ssh_config]
    if target.port is not None:
        argv += ["-p", str(target.port)]
    if control_path is not None:
        argv += ["-o", f"ControlPath={control_path}", "-o", "ControlMaster=" + ("yes" if master else "no")]
        if master:
            argv += ["-o", "ControlPersist=no", "-N"]
    if log_file is not None:
        argv += ["-E", str(log_file)]
    if not master:
        argv.append("-tt" if tty else "-T")
    argv += ["--", target.host]  # `--`: a host can never be read as an ssh option
    if command is not None:
        argv.append(command)
    return argv


_UNREACHABLE = re.compile(r"could not resolve hostname|connection refused|connection timed out|timed out|"
                          r"no route to host|network is unreachable|connection closed by|connection reset",
                          re.IGNORECASE)
_AUTH = re.compile(r"permission denied|too many authentication failures|host key verification failed",
                   re.IGNORECASE)


def explain_ssh_failure(target: Target, ssh_messages: str) -> RemoteError:
    """ssh exited 255 before (or instead of) running the command: which of our one-line errors it is."""
    lines = [ln.strip() for ln in ssh_messages.splitlines() if ln.strip() and not ln.startswith("debug")]
    last = lines[-1] if lines else "ssh failed without a message"
    if _AUTH.search(ssh_messages):
        return RemoteError(f"{target.host}: authentication refused ({last}); traindeck needs key-based SSH "
                           "without a password prompt (ssh-copy-id, ssh-agent)", AUTH_REFUSED)
    if _UNREACHABLE.search(ssh_messages):
        return RemoteError(f"{target.host}: host unreachable ({last})", UNREACHABLE)
    return RemoteError(f"{target.host}: ssh failed ({last})", SSH_FAILED)


def missing_traindeck(target: Target) -> RemoteError:
    return RemoteError(f"{target.host}: no `{target.traindeck}` there (not on the PATH a non-interactive ssh "
                       f"session gets); give its path with --remote-traindeck PATH or {REMOTE_ENV}", MISSING)


def is_not_found_line(target: Target, line: str) -> bool:
    """The remote shell's or env's complaint that the traindeck command does not exist."""
    names = [w for w in target.traindeck_words() if "=" not in w]
    return any(n in line for n in names) and ("not found" in line or "No such file or directory" in line)

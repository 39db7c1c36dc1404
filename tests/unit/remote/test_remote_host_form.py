"""`--host` takes `[user@]host[:port]`; any other form is one traindeck line and exit 2 before ssh is called (no
ssh needed here), and nothing given as a host ever reaches ssh's argv as an option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from traindeck.backend.remote.ssh import RemoteError, Target, ssh_argv


def cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=str(tmp_path))  # no ssh on the PATH: a form that got as far as ssh would fail there
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)


@pytest.mark.parametrize(("host", "why"), [
    ("-oProxyCommand=x", "starts with '-'"),
    ("user@", "is not a host name"),
    ("a b", "is not a host name"),
    ("@machine", "has an empty user"),
    ("machine:0", "port"),
    ("machine:http", "is not a host name"),
    ("user@-machine", "is not a host name"),
])
def test_a_malformed_host_is_one_line_and_exit_2(host: str, why: str, tmp_path: Path) -> None:
    done = cli("--host", host, "runs", "list", tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"traindeck: --host: {host!r} "), lines[0]
    assert why in lines[0] and "(user@host[:port])" in lines[0], lines[0]
    assert done.stdout == ""


def test_the_message_names_the_form() -> None:
    with pytest.raises(RemoteError) as caught:
        Target.make("a b")
    assert str(caught.value) == "--host: 'a b' is not a host name (user@host[:port])"
    assert caught.value.code == 2


@pytest.mark.parametrize(("host", "destination", "port"), [
    ("machine", "machine", None),
    ("alice@gpu-01.lab.example", "alice@gpu-01.lab.example", None),
    ("alice@gpu-01:2222", "alice@gpu-01", 2222),
    ("my_alias", "my_alias", None),
    ("10.0.0.7:22", "10.0.0.7", 22),
    ("bob@[fe80::1]:2200", "bob@fe80::1", 2200),
    ("fe80::1", "fe80::1", None),
])
def test_good_forms_reach_ssh_after_double_dash(host: str, destination: str, port: int | None) -> None:
    target = Target.make(host)
    argv = ssh_argv(target, "traindeck runs list")
    assert argv[argv.index("--") + 1] == destination and argv[-1] == "traindeck runs list"
    options = argv[:argv.index("--")]
    assert (options[options.index("-p") + 1] if "-p" in options else None) == (str(port) if port else None)
    assert not any(word.startswith("-") for word in argv[argv.index("--") + 1:])

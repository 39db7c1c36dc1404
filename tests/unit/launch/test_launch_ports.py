"""Rendezvous ports: a free one is picked; a fixed busy one is refused before launch, naming who holds it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.ports import busy_port_message, pick_free_port, port_holder, port_in_use

# A separate process holds the port, so the holder named must be that process (its pid and its command line),
# not merely "some pid": a port_holder that names the test's own process, or any process, fails here.
_HOLDER = ("import socket, sys, time\n"
           "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
           "print(s.getsockname()[1], flush=True)\n"
           "sys.stdin.read()\n")


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
def test_a_listening_socket_makes_its_port_busy(address):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert port_in_use(port)
    assert not port_in_use(port)


def test_a_bound_but_not_listening_socket_makes_its_port_busy():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        assert port_in_use(sock.getsockname()[1])


def test_pick_free_port_gives_a_usable_port():
    port = pick_free_port()
    assert 1024 <= port <= 65535
    assert not port_in_use(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # what torch's TCPStore does with it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen()


def test_busy_fixed_port_names_the_port_and_the_process_holding_it(tmp_path: Path):
    (tmp_path / "train.py").write_text("")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path, launcher="deepspeed", master_port=port),
                          tmp_path / "run")
    assert plan.master_port == port
    [error] = [e for e in plan.errors if "port" in e]
    assert f"port {port} is already in use" in error
    if sys.platform.startswith("linux"):  # psutil always sees its own process's sockets there
        assert f"pid {os.getpid()}" in error


def test_unset_port_is_picked_free_for_each_plan(tmp_path: Path):
    (tmp_path / "train.py").write_text("")
    plan = build_plan(LaunchRequest(script="train.py", cwd=tmp_path, launcher="deepspeed"), tmp_path / "run")
    assert plan.master_port is not None and not port_in_use(plan.master_port)
    assert ["--master_port", str(plan.master_port)] == plan.argv[5:7]


def test_busy_message_for_a_free_port_has_no_holder():
    port = pick_free_port()
    message = busy_port_message(port)
    assert message.endswith("or leave the port unset so traindeck picks a free one")
    assert message.startswith(f"port {port} is already in use: ")  # no " by pid ...": nobody holds it
    assert port_holder(port) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="psutil sees other processes' sockets on Linux")
def test_the_holder_named_is_the_process_that_listens(tmp_path: Path):
    marker = f"holder-{os.getpid()}-{time.monotonic_ns()}"
    with subprocess.Popen([sys.executable, "-c", f"# {marker}\n" + _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout is not None
            port = int(holder.stdout.readline())
            named = port_holder(port)
            assert named is not None and named.startswith(f"pid {holder.pid} (")
            assert marker in named  # its own command line, not some other process's
            assert f"by pid {holder.pid} (" in busy_port_message(port)
        finally:
            holder.communicate("")
    assert port_holder(port) is None


def test_pick_free_port_skips_a_port_the_kernel_offers_but_another_address_holds(monkeypatch: pytest.MonkeyPatch):
    """The kernel's choice is free on 0.0.0.0 only; a job holding it on loopback or IPv6 makes it unusable for
    torch's TCPStore, so pick_free_port asks port_in_use about every candidate and passes over the busy ones."""
    from traindeck.backend.launch import ports

    asked: list[int] = []

    def busy_for_the_first_two(port: int) -> bool:
        asked.append(port)
        return len(asked) <= 2

    monkeypatch.setattr(ports, "port_in_use", busy_for_the_first_two)
    port = ports.pick_free_port()
    assert len(asked) == 3 and port == asked[2]

"""Rendezvous ports: a free one is picked; a fixed busy one is refused before launch, naming who holds it."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.ports import busy_port_message, pick_free_port, port_in_use


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
    assert busy_port_message(pick_free_port()).endswith("or leave the port unset so traindeck picks a free one")

"""The multi-node part of a DeepSpeed launch plan (a hostfile given): runner options, files, checks.

- The hosts the run uses are the hostfile's after DeepSpeed's --include, --num_nodes and --num_gpus
  (hostfile.active_hosts), worked out before the launch so that a filter naming a missing host or slot is refused
  with its reason, and nodes.json, the rank count and the master are those of the hosts that run.
- `--master_addr` is always the first of those hosts: left out, DeepSpeed's runner asks that host
  `hostname -I` over ssh and takes the first address it prints, which may be an interface the other nodes cannot
  reach (on a cloud VM, its own public address).
- `--force_multi` when one host other than this machine is left: DeepSpeed's runner starts a one-host run on the
  machine it runs on, whatever host the hostfile or filter names, with that host as the master its ranks then
  cannot meet.
- `--no_ssh_check`: traindeck's pre-flight (preflight.py) has checked every host, with the ssh options pdsh gets
  (PDSH_SSH_ARGS_APPEND); DeepSpeed's own check runs a bare `ssh FIRST hostname` that ignores them.
- `--ssh_port N` when asked for: DeepSpeed adds `-p N` to PDSH_SSH_ARGS_APPEND itself.
- the remote environment file (envfile.py) and DS_ENV_FILE pointing at it;
- nodes.json: hosts, their global ranks, the ssh port, the interpreter, for the supervisor's node watch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.nodes.envfile import ENV_FILE, remote_env
from traindeck.backend.nodes.hostfile import Host, HostfileError, active_hosts, rank_layout, read_hostfile

NODES_FILE = "nodes.json"


@dataclass
class MultiNode:
    argv: list[str] = field(default_factory=list)  # after the runner's own options
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hosts: list[Host] = field(default_factory=list)

    @property
    def ranks(self) -> int:
        return sum(h.slots for h in self.hosts)


def multi_node(hostfile: Path, run_dir: Path, *, ssh_port: int | None, overrides: Mapping[str, str],
               env: Mapping[str, str], cwd: str, python: str, include: str | None = None,
               num_nodes: int | None = None, num_gpus: int | None = None) -> MultiNode:
    """The multi-node part of a plan for `hostfile` (with the runner's --include / --num_nodes / --num_gpus):
    runner options, remote environment file, nodes.json, problems."""
    out = MultiNode()
    try:
        out.hosts = active_hosts(read_hostfile(Path(hostfile)), include=include, num_nodes=num_nodes,
                                 num_gpus=num_gpus)
    except HostfileError as exc:
        out.errors += exc.problems
        return out
    if ssh_port is not None and not 1 <= ssh_port <= 65535:
        out.errors.append(f"--ssh-port {ssh_port} is not a valid port number (1-65535)")
    first = out.hosts[0].name
    out.argv = ["--hostfile", str(Path(hostfile).absolute()), "--master_addr", first, "--no_ssh_check"]
    if len(out.hosts) == 1 and not is_this_machine(first):
        out.argv.append("--force_multi")
        out.warnings.append(f"one host to run on ({first}): started there through pdsh (--force_multi), where "
                            "DeepSpeed alone would start a one-host run on this machine")
    if ssh_port is not None:
        out.argv += ["--ssh_port", str(ssh_port)]
    text, warnings = remote_env(run_dir.name, overrides, env, cwd)
    out.warnings += warnings
    out.files[ENV_FILE] = text
    out.env["DS_ENV_FILE"] = str(run_dir / ENV_FILE)  # absolute: os.path.join(home or '.', it) is this path
    out.files[NODES_FILE] = json.dumps(nodes_document(out.hosts, ssh_port, python), indent=1)
    return out


def is_this_machine(host: str) -> bool:
    """Whether `host` names this machine: localhost, a loopback address or this machine's own name (no lookup
    that could wait on DNS)."""
    import ipaddress
    import socket

    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def nodes_document(hosts: list[Host], ssh_port: int | None, python: str) -> dict[str, Any]:
    """nodes.json's content: each host with its slots and global ranks, the ssh port and the interpreter."""
    layout = rank_layout(hosts)
    return {"hosts": [{"host": h.name, "slots": h.slots, "ranks": layout[h.name]} for h in hosts],
            "ssh_port": ssh_port, "python": python}


def read_nodes(run_dir: Path) -> dict[str, Any] | None:
    """The run's nodes.json (None for a one-machine run, or one that cannot be read)."""
    try:
        data = json.loads((Path(run_dir) / NODES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("hosts"), list) else None

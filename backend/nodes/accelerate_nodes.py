"""The nodes of an accelerate run whose own config starts several machines through DeepSpeed's pdsh runner
(distributed_type DEEPSPEED, num_machines > 1, deepspeed_multinode_launcher pdsh, a deepspeed_hostfile): the run's
nodes.json (node_plan.py), so the node watch puts an agent on each node as it does for a hostfile launch, and a
stop ends the ranks on every node through them while DeepSpeed's runner (whose SIGINT/SIGTERM handler runs
`pkill -f` for every DeepSpeed launcher of the same Python on the nodes) is not signalled.

accelerate starts `deepspeed --hostfile H --no_local_rank --launcher pdsh --num_gpus P/M ...`: every host of the
hostfile, in its order (pdsh's `--node_rank=%n`), with num_processes // num_machines ranks each. It copies the
whole environment into `.deepspeed_env`, so the run's marker (TRAINDECK_RUN_ID) reaches the ranks on every node,
where the agents find them. An inclusion or exclusion filter picks the hosts and slots as DeepSpeed's runner does
(hostfile.active_hosts); one that leaves a single host makes DeepSpeed start the run on this machine: no nodes.json
then.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.nodes.hostfile import HostfileError, active_hosts, read_hostfile
from traindeck.backend.nodes.node_plan import NODES_FILE, nodes_document


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of `name VALUE` or `name=VALUE` in accelerate's argv (the last one, as argparse takes it)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def deepspeed_runner(data: Any, argv: Sequence[str] = ()) -> tuple[int, str] | None:
    """(machines, DeepSpeed's multi-node launcher: pdsh, standard, openmpi, ...) of an accelerate config that runs
    DeepSpeed, as `accelerate launch` with `argv` reads them (its options win over the config); None for others."""
    if not isinstance(data, dict) or str(data.get("distributed_type", "")).upper() != "DEEPSPEED":
        return None
    ds = data.get("deepspeed_config")
    ds = ds if isinstance(ds, dict) else {}
    machines = _int(_option(argv, "--num_machines") or data.get("num_machines"), 1)
    launcher = _option(argv, "--deepspeed_multinode_launcher") or ds.get("deepspeed_multinode_launcher") or "pdsh"
    return machines, str(launcher)


def accelerate_nodes(config: Path, argv: Sequence[str], cwd: str, python: str) -> dict[str, Any] | None:
    """nodes.json's content for an accelerate run started by `argv` with the accelerate config `config`, when that
    config starts several machines through DeepSpeed's pdsh runner from a hostfile that can be read; else None."""
    try:
        data = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return accelerate_nodes_of(data, argv, cwd, python)


def accelerate_nodes_of(data: Any, argv: Sequence[str], cwd: str, python: str) -> dict[str, Any] | None:
    """accelerate_nodes for the config's loaded content."""
    runner = deepspeed_runner(data, argv)
    if runner is None:
        return None
    machines, launcher = runner
    ds = data.get("deepspeed_config")
    ds = ds if isinstance(ds, dict) else {}
    hostfile = _option(argv, "--deepspeed_hostfile") or ds.get("deepspeed_hostfile")
    exclude, include = (_option(argv, f"--deepspeed_{k}_filter") or ds.get(f"deepspeed_{k}_filter")
                        for k in ("exclusion", "inclusion"))
    if machines < 2 or launcher != "pdsh" or not hostfile:
        return None
    path = Path(str(hostfile))
    # accelerate passes the exclusion filter, else the inclusion filter, else --num_gpus num_processes // machines
    # (that many ranks on every host, whatever its slots).
    per_node = _int(_option(argv, "--num_processes") or data.get("num_processes"), 0) // machines
    try:
        hosts = active_hosts(read_hostfile(path if path.is_absolute() else Path(cwd) / path),
                             exclude=str(exclude) if exclude else None,
                             include=None if exclude or not include else str(include),
                             num_gpus=None if exclude or include or per_node < 1 else per_node)
    except HostfileError:
        return None
    if len(hosts) < 2:  # DeepSpeed's runner starts a one-host run on this machine, without pdsh
        return None
    return nodes_document(hosts, None, python)


def write_accelerate_nodes(run_dir: Path, config: Path, argv: Sequence[str], cwd: str, python: str) -> bool:
    """Write the run's nodes.json when its accelerate config starts several machines through pdsh (see
    accelerate_nodes); whether it did."""
    doc = accelerate_nodes(config, argv, cwd, python)
    if doc is None:
        return False
    try:
        atomic_write_text(Path(run_dir) / NODES_FILE, json.dumps(doc, indent=1))
    except OSError:
        return False
    return True

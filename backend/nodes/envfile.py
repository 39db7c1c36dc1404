"""Which environment reaches the other nodes of a pdsh launch, and how.

DeepSpeed's pdsh runner starts every node with `export NAME=VALUE; ...` at the front of one remote command line.
It exports (1) the launcher's variables whose names start with PYTHON, MLFLOW, MV2, UCX (and the accelerator's
own prefixes: NCCL on CUDA) and (2) every line of one file, `.deepspeed_env` in the home or launch directory, or
the file DS_ENV_FILE names. Nothing else crosses: a variable set only here is unset on the other nodes.

traindeck writes that file into the run directory (DS_ENV_FILE points at it) with what the remote ranks need: the
run's marker (TRAINDECK_RUN_ID, how the node agents find the run's processes), TRAINDECK_LINE_FORWARDER=1 (every
rank's output reaches the supervisor through pdsh, which passes whole lines only: the run's sitecustomize then
turns a progress bar's carriage-return redraws into lines), the variables the user set for the run, and the
user's own .deepspeed_env lines (DS_ENV_FILE hides them otherwise), and the folder of the run on each node
(TRAINDECK_NODE_DIR: a rank writes its step timing, its stack dumps and its flight recorder dumps there; the node
agents send them back), and torch's flight recorder settings. Secrets are left out: DeepSpeed
could carry them only through a file on disk and then on the pdsh command line, which every user of every node
can read in `ps`; they are named in a warning and must be set on the nodes themselves (their own ~/.bashrc or
environment). Values DeepSpeed cannot quote safely (", $, `, \\, newlines) are left out with a warning too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from traindeck.backend.core.masking import is_secret_name, looks_like_secret_value

ENV_FILE = "deepspeed_env"  # in the run directory; DS_ENV_FILE names it by absolute path
CARRIED_PREFIXES = ("PYTHON", "MLFLOW", "MV2", "UCX", "NCCL")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE = re.compile(r"[\"$`\\\n\r]")
# traindeck's own variables a remote rank needs (the marker is added by name: it is the run id).
# torch's flight recorder settings (launch/environ.py arm_flight_recorder): without them a remote rank's buffer
# keeps nothing and its dump names no collective.
PASSED_THROUGH = ("TORCH_EXTENSIONS_DIR", "TRAINDECK_RANK_TAGS", "PYTHONUNBUFFERED", "TRAINDECK_STEP_TIMING",
                  "TRAINDECK_STEP_SYNC", "TRAINDECK_FLIGHT_RECORDER", "TORCH_FR_BUFFER_SIZE",
                  "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT")
# Where a rank on a node writes what the run directory would otherwise get: a folder of that node's own (the run
# directory is on the launching machine), `~` standing for the home of the user the node runs the rank as
# (DeepSpeed's runner quotes the value, so the rank's site hook expands it). It holds steps/ (step timing) and
# stacks/ (stack dumps) and collectives/ (flight recorder dumps, asked through a FIFO); the run's node agent sends
# them back and removes the folder at its end.
NODE_DIR_ENV = "TRAINDECK_NODE_DIR"


def node_run_dir(run_id: str) -> str:
    return f"~/.cache/traindeck/node-runs/{run_id}"


# Every rank of a pdsh launch (the first node's too) writes into pdsh, a forwarder of whole lines.
LINE_FORWARDER = "TRAINDECK_LINE_FORWARDER"


def _user_env_files(cwd: str, home: str | None) -> list[Path]:
    return [Path(home or os.path.expanduser("~")) / ".deepspeed_env", Path(cwd) / ".deepspeed_env"]


def remote_env(run_id: str, overrides: Mapping[str, str], env: Mapping[str, str], cwd: str,
               home: str | None = None) -> tuple[str, list[str]]:
    """(the file's text, warnings). `overrides` are the variables the user set for the run, `env` the whole
    environment the launcher gets."""
    chosen: dict[str, str] = {LINE_FORWARDER: "1"}  # the user's own value (0: off) replaces it
    warnings: list[str] = []
    for path in _user_env_files(cwd, home):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:1 << 20]
        except OSError:
            continue
        for line in text.splitlines():
            name, sep, raw = line.partition("=")
            if sep and _NAME.match(name.strip()):
                chosen[name.strip()] = raw.strip()
    secret: list[str] = []
    for name in [*PASSED_THROUGH, *overrides]:
        value = overrides[name] if name in overrides else env.get(name)
        if value is None or name.startswith(CARRIED_PREFIXES):
            continue  # DeepSpeed exports these itself
        if is_secret_name(name) or looks_like_secret_value(value):
            secret.append(name)
            continue
        if _UNSAFE.search(value):
            warnings.append(f"{name} is not sent to the other nodes: DeepSpeed's runner cannot quote its value "
                            "(it holds \", $, `, \\ or a newline); set it on the nodes themselves")
            continue
        chosen[name] = value
    chosen["TRAINDECK_RUN_ID"] = run_id
    chosen[NODE_DIR_ENV] = node_run_dir(run_id)  # stack dumps need it even when step timing is off
    if secret:
        warnings.append(f"{', '.join(sorted(secret))} not sent to the other nodes: DeepSpeed carries variables only "
                        "through a file on disk and the pdsh command line (readable in `ps` on every node); set "
                        "them in the nodes' own environment")
    return "".join(f"{k}={v}\n" for k, v in chosen.items()), warnings

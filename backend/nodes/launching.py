"""Before a hostfile launch starts: the pre-flight checks of every host (preflight.py), as one refusal line."""

from __future__ import annotations

import json
from pathlib import Path

from traindeck.backend.launch.builders import LaunchRequest
from traindeck.backend.launch.plan import LaunchPlan
from traindeck.backend.nodes.hostfile import HostfileError, read_hostfile
from traindeck.backend.nodes.node_plan import NODES_FILE
from traindeck.backend.nodes.preflight import Check, Target, check_hosts, failed


def preflight_checks(request: LaunchRequest, plan: LaunchPlan) -> list[Check]:
    """Every pre-flight check of the hosts the request's hostfile launch runs on, with what the plan runs (interpreter, script, working
    directory, rendezvous port, environment): what a launch checks, and what the dashboard's Check hosts shows.
    HostfileError when the hostfile cannot be read."""
    hosts = read_hostfile(Path(request.hostfile or ""))
    try:  # the hosts the run uses (after --include / --num_nodes): a host left out may well be down
        used = {h["host"] for h in json.loads(plan.files[NODES_FILE])["hosts"]}
        hosts = [h for h in hosts if h.name in used] or hosts
    except (KeyError, TypeError, ValueError):
        pass
    script = Path(request.script)
    script = script if script.is_absolute() else Path(plan.cwd) / script
    return check_hosts(hosts, Target(plan.python, script=str(script), cwd=plan.cwd, master_port=plan.master_port,
                                     ssh_port=request.ssh_port, env=plan.env))


def preflight_refusal(request: LaunchRequest, plan: LaunchPlan) -> str | None:
    """None when every host passes (or the run is not a hostfile launch), else one line saying what failed."""
    if request.hostfile is None or plan.launcher != "deepspeed":
        return None
    try:
        bad = failed(preflight_checks(request, plan))
    except HostfileError as exc:
        return exc.problems[0]
    if not bad:
        return None
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (f"not launched: {bad[0].host}: {bad[0].name}: {bad[0].detail}{more}; every check: traindeck "
            f"check-hosts --hostfile {request.hostfile}")

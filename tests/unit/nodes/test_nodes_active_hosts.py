"""The hosts and ranks a hostfile launch runs on, worked out before it starts as DeepSpeed's runner does
(--include / --exclude / --num_nodes / --num_gpus), held to DeepSpeed's own functions on every case; and what the
launch plan makes of them: the master, nodes.json, the rank count, the pre-flight's hosts, a lone remote host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.nodes.hostfile import Host, HostfileError, active_hosts
from traindeck.backend.nodes.launching import preflight_checks
from traindeck.backend.nodes.node_plan import NODES_FILE

POOL = [Host("node-a", 4, 1), Host("node-b", 2, 2), Host("node-c", 8, 3)]
# (include, exclude, num_nodes, num_gpus)
CASES = [
    ("", "", -1, -1), ("node-b", "", -1, -1), ("node-c:1,3@node-a", "", -1, -1), ("node-a:2@node-a", "", -1, -1),
    ("node-a:3,1,1", "", -1, -1), ("", "node-a", -1, -1), ("", "node-c:0,7@node-b:1", -1, -1),
    ("", "node-a@node-b@node-c", -1, -1), ("", "", 2, -1), ("", "", 1, 3), ("", "", -1, 16), ("", "", 5, -1),
    ("node-d", "", -1, -1), ("node-b:2", "", -1, -1), ("", "node-b:5", -1, -1), ("node-a:x", "", -1, -1),
    ("node-a", "node-b", -1, -1), ("node-a", "", 1, -1),
]

JUDGE = r"""
import json, sys
from collections import OrderedDict
from deepspeed.launcher.runner import apply_num_nodes_and_gpus, parse_inclusion_exclusion
pool, cases = json.load(sys.stdin)
out = []
for include, exclude, num_nodes, num_gpus in cases:
    try:
        if (include or exclude) and (num_nodes >= 0 or num_gpus >= 0):
            raise ValueError("Cannot specify num_nodes/gpus with include/exclude")  # runner.main's own check
        active = parse_inclusion_exclusion(OrderedDict(pool), include, exclude)
        active = apply_num_nodes_and_gpus(active, num_nodes, num_gpus)
        out.append([[h, len(s)] for h, s in active.items()] or "nothing left")
    except Exception as exc:
        out.append("refused")
print(json.dumps(out))
"""


def _ours(include: str, exclude: str, num_nodes: int, num_gpus: int) -> object:
    try:
        hosts = active_hosts(POOL, include=include or None, exclude=exclude or None,
                             num_nodes=num_nodes if num_nodes > 0 else None,
                             num_gpus=num_gpus if num_gpus > 0 else None)
    except HostfileError as exc:
        assert len(exc.problems) == 1 and exc.problems[0].startswith(("--", "--include", "--exclude")), exc.problems
        return "nothing left" if "no host is left" in exc.problems[0] else "refused"
    return [[h.name, h.slots] for h in hosts]


def test_the_hosts_and_ranks_are_deepspeeds_own_on_every_case() -> None:
    pytest.importorskip("deepspeed")
    pool = [[h.name, h.slots] for h in POOL]
    judged = json.loads(subprocess.run([sys.executable, "-c", JUDGE], input=json.dumps([pool, CASES]), text=True,
                                       capture_output=True, timeout=120, check=True).stdout.splitlines()[-1])
    for case, theirs in zip(CASES, judged, strict=True):
        ours = _ours(*case)
        assert ours == theirs, (case, ours, theirs)
    assert _ours("node-c:1,3@node-a", "", -1, -1) == [["node-a", 4], ["node-c", 2]]  # hostfile order, not the filter's


def _plan(tmp_path: Path, hostfile_text: str, **request: object):  # type: ignore[no-untyped-def]
    (tmp_path / "train.py").write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(hostfile_text)
    return build_plan(LaunchRequest(script="train.py", launcher="deepspeed", cwd=tmp_path, hostfile=hostfile,
                                    **request),  # type: ignore[arg-type]
                      tmp_path / "runs" / "20261128-050000-abcd", is_port_busy=lambda p: False,
                      free_port=lambda: 29511)


def test_an_include_filter_makes_its_first_host_the_master_and_its_hosts_the_nodes(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "node-a slots=4\nnode-b slots=2\nnode-c slots=8\n", include="node-c:0,1@node-b")
    assert plan.errors == [], plan.errors
    argv = plan.argv[plan.argv.index("deepspeed.launcher.runner") + 1:]
    assert argv[argv.index("--master_addr") + 1] == "node-b"  # the first host that runs, not the hostfile's first
    assert argv[argv.index("--include") + 1] == "node-c:0,1@node-b" and "--force_multi" not in argv
    assert json.loads(plan.files[NODES_FILE])["hosts"] == [{"host": "node-b", "slots": 2, "ranks": [0, 1]},
                                                          {"host": "node-c", "slots": 2, "ranks": [2, 3]}]
    assert plan.nproc == 4
    # The pre-flight checks only the hosts that run (node-a, left out, may well be down): no connection is made
    # for a host it never names, and each check names its host ("(this machine)": pdsh missing here, say).
    checks = preflight_checks(LaunchRequest(script="train.py", hostfile=tmp_path / "hostfile",
                                            include="node-c:0,1@node-b"), plan)
    assert {c.host for c in checks} <= {"node-b", "node-c", "(this machine)"}


def test_num_nodes_and_nproc_take_the_first_hosts_with_that_many_ranks_each(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "node-a slots=4\nnode-b slots=2\nnode-c slots=8\n", num_nodes=2, nproc=3)
    assert plan.errors == [], plan.errors
    assert [(h["host"], h["ranks"]) for h in json.loads(plan.files[NODES_FILE])["hosts"]] == [
        ("node-a", [0, 1, 2]), ("node-b", [3, 4, 5])]
    assert plan.nproc == 6


def test_a_filter_naming_what_the_hostfile_lacks_stops_the_plan_with_the_reason(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "node-a slots=4\nnode-b slots=2\n", include="node-b:0,2")
    assert plan.errors == ["--include node-b:0,2: host node-b has no slot 2 (slots 0-1 in the hostfile)"]
    plan = _plan(tmp_path, "node-a slots=4\nnode-b slots=2\n", include="gpu-node-7")
    assert plan.errors == ["--include gpu-node-7: host 'gpu-node-7' is not in the hostfile"]


def test_a_lone_remote_host_is_started_there_and_a_lone_local_one_here(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "node-a slots=4\nnode-b slots=2\n", include="node-b")
    argv = plan.argv[plan.argv.index("deepspeed.launcher.runner") + 1:]
    assert "--force_multi" in argv and argv[argv.index("--master_addr") + 1] == "node-b"
    assert any(w.startswith("one host to run on (node-b): started there through pdsh") for w in plan.warnings)
    local = _plan(tmp_path, "localhost slots=2\n")
    assert "--force_multi" not in local.argv and not any("--force_multi" in w for w in local.warnings)
    loopback = _plan(tmp_path, "127.0.0.2 slots=2\n127.0.0.3 slots=1\n", include="127.0.0.3")
    assert "--force_multi" not in loopback.argv  # a loopback address is this machine: DeepSpeed's own path is right

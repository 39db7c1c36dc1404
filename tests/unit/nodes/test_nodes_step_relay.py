"""A multi-node run's step timing on its way back: where a node's ranks are told to write it (the nodes'
environment file, off with --no-step-timing), the agent sending a rank's complete lines and removing only what it
sent, and the watch appending only step lines of a node's own ranks to the run directory."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.nodes import agent as agent_module
from traindeck.backend.nodes.envfile import ENV_FILE
from traindeck.backend.steps import RelayedSteps, StepFiles

STEP = '{"step":%d,"t":1700000000.5,"step_ms":50.0,"forward_ms":10.0,"other_ms":40.0}'


def _env_file(tmp_path: Path, **env: str) -> str:
    (tmp_path / "train.py").write_text("")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=1\nnode-b slots=1\n")
    plan = build_plan(LaunchRequest(script="train.py", launcher="deepspeed", cwd=tmp_path, hostfile=hostfile,
                                    env=env), tmp_path / "runs" / "20261128-060000-abcd",
                      is_port_busy=lambda p: False, free_port=lambda: 29511)
    return plan.files[ENV_FILE]


def test_the_nodes_ranks_get_a_folder_of_their_own_and_step_timing_off_reaches_them(tmp_path: Path) -> None:
    assert "TRAINDECK_NODE_DIR=~/.cache/traindeck/node-runs/20261128-060000-abcd\n" in _env_file(tmp_path)
    off = _env_file(tmp_path, TRAINDECK_STEP_TIMING="0")
    assert "TRAINDECK_STEP_TIMING=0\n" in off  # off on every node too
    assert "TRAINDECK_NODE_DIR=" in off  # where the ranks' stack dumps go, timing or not


def _agent(folder: Path, ranks: list[int]) -> tuple[agent_module.Agent, io.StringIO]:
    """An agent whose node folder holds `folder` as its steps/."""
    assert folder.name == "steps"
    out = io.StringIO()
    return agent_module.Agent("run-1", 0, ranks, out, node_dir=str(folder.parent)), out


def _sent(out: io.StringIO) -> list[tuple[int, list[str]]]:
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return [(e["rank"], e["lines"]) for e in events if e["event"] == "steps"]


def test_the_agent_sends_complete_lines_of_its_own_ranks_once_and_removes_only_what_it_sent(tmp_path: Path) -> None:
    folder = tmp_path / "node-run" / "steps"
    folder.mkdir(parents=True)
    (folder / "rank2.jsonl").write_text(STEP % 1 + "\n" + STEP % 2 + "\n" + '{"step":3,"t"')  # a line being written
    (folder / "rank5.jsonl").write_text(STEP % 1 + "\n")  # another node's rank (a shared home)
    agent, out = _agent(folder, [2, 3])
    assert agent.send_steps() is False  # rank 2's last line is not complete yet
    assert _sent(out) == [(2, [STEP % 1, STEP % 2])]
    with open(folder / "rank2.jsonl", "a") as f:
        f.write(':1700000001.0,"step_ms":50.0}\n')
    assert agent.send_steps() is True
    assert _sent(out)[1:] == [(2, ['{"step":3,"t":1700000001.0,"step_ms":50.0}'])]
    agent.remove_steps()  # the watch has not asked what is left (its end): nothing is removed
    assert (folder / "rank2.jsonl").exists()
    agent.relayed_all = True
    with open(folder / "rank2.jsonl", "a") as f:
        f.write(STEP % 4 + "\n")  # written after the last send: kept
    agent.remove_steps()
    assert (folder / "rank2.jsonl").exists() and (folder / "rank5.jsonl").exists()
    agent.send_steps()
    agent.remove_steps()
    assert not (folder / "rank2.jsonl").exists() and (folder / "rank5.jsonl").exists()  # not its own: kept
    (folder / "rank5.jsonl").unlink()
    agent.remove_steps()
    assert not folder.exists()


def test_the_agent_follows_no_link_planted_at_a_rank_file(tmp_path: Path) -> None:
    folder = tmp_path / "node-run" / "steps"
    folder.mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text('{"step":1,"t":1.0}\n')
    os.symlink(secret, folder / "rank0.jsonl")
    agent, out = _agent(folder, [0])
    agent.send_steps()
    assert _sent(out) == []


def test_the_watch_appends_only_step_lines_and_gives_back_what_came_late(tmp_path: Path) -> None:
    relay = RelayedSteps(tmp_path)
    assert relay.append(1, [STEP % 1, "not json", '{"other": 1}', STEP % 2 + "\n" + STEP % 9, 7]) == 1
    assert relay.append(1, "not a list") == 0
    assert relay.append(1, [STEP % 2]) == 1
    steps, _ = StepFiles(tmp_path).read_new()
    assert [(r.rank, r.step, r.step_ms) for r in steps] == [(1, 1, 50.0), (1, 2, 50.0)]
    assert oct((tmp_path / "steps" / "rank1.jsonl").stat().st_mode & 0o777) == "0o600"
    (when, rank, offset, size), second = relay.appends
    relay.appends = [(when - 60, rank, offset, size), second]  # the first came a minute before the second
    assert [r.step for r in relay.records_since(when - 90)] == [1, 2]
    assert [r.step for r in relay.records_since(when - 30)] == [2]


def test_the_agent_removes_other_runs_folders_left_unchanged_for_a_week(tmp_path: Path) -> None:
    runs = tmp_path / "node-runs"
    week = 7 * 24 * 3600
    old, fresh, mine = runs / "20261101-010000-aaaa", runs / "20261127-010000-bbbb", runs / "20261128-060000-abcd"
    for folder in (old, fresh, mine):
        (folder / "steps").mkdir(parents=True)
        (folder / "steps" / "rank0.jsonl").write_text(STEP % 1 + "\n")
    (runs / "not-a-run").mkdir()
    outside = tmp_path / "keep.txt"
    outside.write_text("x")
    os.symlink(outside, old / "steps" / "link")
    now = 2_000_000_000.0
    for folder in (old, mine, runs / "not-a-run"):
        for path in (folder / "steps" / "rank0.jsonl", folder / "steps", folder):
            if path.exists():
                os.utime(path, (now - week - 60, now - week - 60))
    os.utime(fresh / "steps" / "rank0.jsonl", (now - 60, now - 60))  # a rank wrote a minute ago
    agent = agent_module.Agent("20261128-060000-abcd", 0, [0], io.StringIO(), node_dir=str(mine))
    agent.prune_stale(now=now)
    assert not old.exists() and outside.read_text() == "x"  # the link removed, not what it points to
    assert fresh.exists() and mine.exists() and (runs / "not-a-run").exists()

"""Replays of real failing runs: the output.log and the evidence the supervisor recorded (evidence.json) of real
2-rank DeepSpeed runs on the CPU, made to fail the ways real runs fail (see tests/fixtures/logs/cascade/README.md
for the script, its repo and commit, and how each was produced). The diagnosis is made again from them and must
blame the rank that failed first, with its own error, and list the others' errors as follow-ons."""

from __future__ import annotations

import json

import pytest
from support import TESTS

from traindeck.backend.runs.diagnosis.diagnose import diagnose, evidence_from_json
from traindeck.backend.runs.diagnosis.evidence import log_tail

CASCADE = TESTS / "fixtures" / "logs" / "cascade"


def replay(name: str):  # type: ignore[no-untyped-def]
    recorded = json.loads((CASCADE / f"{name}.json").read_text())
    tail = log_tail(CASCADE / f"{name}.log", max_bytes=1 << 20, max_lines=2000)
    return diagnose(evidence_from_json(recorded["evidence"], tail)), recorded


def test_a_raise_on_rank_1_is_rank_1s_error_and_rank_0s_gloo_error_a_follow_on() -> None:
    d, _ = replay("raise_rank1")
    assert (d.kind, d.rank) == ("exception", 1), d
    assert d.summary == "Rank 1 raised RuntimeError: injected failure in rank 1."
    assert any(f.startswith("rank 0: ") and "Connection closed by peer" in f for f in d.follow_ons), d.follow_ons
    assert not any("Connection closed" in e for e in d.evidence)


def test_an_allocator_failure_on_rank_1_is_a_host_memory_failure_of_rank_1() -> None:
    d, _ = replay("alloc_rank1")
    assert (d.kind, d.rank, d.memory) == ("cpu_alloc", 1, "host"), d
    assert "ran out of host memory" in d.summary
    assert any(f.startswith("rank 0") for f in d.follow_ons), d.follow_ons


def test_a_kill_at_the_runs_cgroup_limit_is_that_limit() -> None:
    d, recorded = replay("cgroup_kill_rank1")
    assert (d.kind, d.rank, d.memory) == ("cgroup_oom", 1, "cgroup"), d
    limit = recorded["evidence"]["memory_limit"]
    assert limit["limit_bytes"] == 1536 << 20
    assert "at the run's memory limit (1.5 GiB, set by cgroup " in d.summary
    assert "add RAM" not in d.advice


def test_a_hung_rank_makes_rank_0_time_out_in_gloo() -> None:
    d, _ = replay("hang_rank1")
    assert (d.kind, d.rank) == ("collective_timeout", 0), d
    assert any("Timed out waiting 20000ms" in e for e in d.evidence)
    assert any(e.startswith("rank(s) 1 printed no error and were still running") for e in d.evidence), d.evidence
    assert d.follow_ons[0].startswith("rank 1 was killed by SIGTERM"), d.follow_ons


@pytest.mark.parametrize("name", ["raise_rank1", "alloc_rank1", "cgroup_kill_rank1", "hang_rank1"])
def test_the_replay_says_what_the_supervisor_said(name: str) -> None:
    d, recorded = replay(name)
    assert d.kind == recorded["diagnosis"]["kind"] and d.rank == recorded["diagnosis"]["rank"]
    assert sorted({e["rank"] for e in recorded["evidence"]["ends"] if e["role"] == "rank"}) == [0, 1]

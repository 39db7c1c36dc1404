"""The collectives ledger (backend/runs/diagnosis/collectives.py) on flight recorder dumps recorded from real gloo
runs (tests/fixtures/collectives, see its README): who never entered which collective, ranks that disagree, a
wrapped buffer compared on the overlap only, and a dump that names a class refused."""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from traindeck.backend.runs.diagnosis.collectives import (
    build_ledger,
    collect_dumps,
    divergence_in,
    load_dump,
    read_dumps,
    request_dumps,
)
from traindeck.backend.runs.diagnosis.run_stacks import add_ledger
from traindeck.backend.runs.diagnosis.stacks import RankStack, StackReport, report_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "collectives"


def _dumps(case: str) -> dict[int, dict[str, Any]]:
    dumps, missing = read_dumps(FIXTURES / case)
    assert missing == {}
    return dumps


def test_the_rank_that_never_entered_is_named_with_the_sequence_number_the_others_wait_in() -> None:
    ledger = build_ledger(_dumps("hang3"))
    world, pair = ledger.groups
    assert (world.id, world.ranks, world.last_sequence) == ("0", [0, 1, 2], {"0": 7, "1": 7, "2": 6})
    assert world.divergence == ("rank 2 never entered all_reduce #7 (process group 0) that ranks 0, 1 wait in "
                                "(called at make_dumps.py:44 main)")
    assert world.last_arrival is not None and world.last_arrival["sequence"] == 6
    assert (pair.id, pair.ranks, pair.divergence) == ("1", [0, 2], None)
    assert ledger.behind == [2]
    assert ledger.summary == world.divergence


def test_different_collectives_at_one_sequence_number_are_named() -> None:
    ledger = build_ledger(_dumps("op2"))
    assert ledger.groups[0].divergence == ("different collectives at #7 (process group 0): rank 0 all_reduce [4] "
                                           "float, rank 1 all_gather [4] float")
    assert ledger.behind == []


def test_different_sizes_are_named() -> None:
    dumps = copy.deepcopy(_dumps("hang3"))
    entry = next(e for e in dumps[1]["entries"] if e["collective_seq_id"] == 3 and e["process_group"][0] == "0")
    entry["input_sizes"] = [[8]]
    ledger = build_ledger(dumps)
    assert ledger.groups[0].divergence == ("different sizes or dtypes at #3 (process group 0): ranks 0, 2 "
                                           "all_reduce [4] float, rank 1 all_reduce [8] float")


def test_a_wrapped_buffer_is_compared_on_the_overlap_and_says_what_was_cut() -> None:
    dumps = _dumps("wrapped3")
    assert min(e["record_id"] for e in dumps[0]["entries"]) > 0  # the buffer did wrap
    ledger = build_ledger(dumps)
    world = ledger.groups[0]
    assert world.divergence is not None and world.divergence.startswith(
        "rank 2 never entered all_reduce #7 (process group 0) that ranks 0, 1 wait in")
    assert world.cut == ("rank 0's buffer wrapped: it starts at #5; rank 1's buffer wrapped: it starts at #4; "
                         "rank 2's buffer wrapped: it starts at #4 (#1 to #4 of process group 0 not compared)")
    assert "compared where buffers overlap: rank 0's buffer wrapped" in ledger.summary
    # Sequence numbers a wrapped rank no longer shows are not taken for "never entered".
    changed = copy.deepcopy(dumps)
    changed[2]["entries"] = [e for e in changed[2]["entries"] if e["collective_seq_id"] != 4]
    assert build_ledger(changed).groups[0].divergence == world.divergence
    # A rank whose buffer wrapped past every call of a group is left out of that group's comparison.
    changed[0]["entries"] = [e for e in changed[0]["entries"] if e["process_group"][0] != "1"]
    pair = build_ledger(changed).groups[1]
    assert pair.ranks == [0, 2] and pair.divergence is None
    assert pair.cut == "rank 0's buffer wrapped past every call of process group 1"


def test_a_rank_without_a_dump_is_said_so(tmp_path: Path) -> None:
    for rank in (0, 1):
        shutil.copy(FIXTURES / "hang3" / f"rank{rank}.pkl", tmp_path / f"rank{rank}.pkl")
    (tmp_path / "rank2.pkl").write_bytes(b"")
    dumps, missing = read_dumps(tmp_path, [0, 1, 2, 3])
    assert sorted(dumps) == [0, 1] and missing == {2: "no process group yet", 3: "no flight recorder dump"}
    ledger = build_ledger(dumps, missing)
    assert ledger.summary.startswith("ranks agree on every collective (process group 0 at #7")
    assert ledger.summary.endswith("rank 2: no process group yet; rank 3: no flight recorder dump")


def test_a_dump_naming_a_class_is_refused(tmp_path: Path) -> None:
    real = (FIXTURES / "op2" / "rank0.pkl").read_bytes()
    assert isinstance(load_dump(real)["entries"], list)
    with pytest.raises(ValueError, match="refused"):
        load_dump(pickle.dumps({"entries": [Path("/etc/passwd")]}))
    (tmp_path / "rank0.pkl").write_bytes(pickle.dumps({"entries": [], "x": shutil.rmtree}))
    _dumps_read, missing = read_dumps(tmp_path)
    assert "refused" in missing[0]


def test_the_ledger_leads_the_stacks_summary_and_the_text() -> None:
    report = StackReport(0.0, "request", [RankStack(1, 0, where="make_dumps.py:44 main", waits_in="all_reduce"),
                                          RankStack(2, 1, where="make_dumps.py:44 main", waits_in="all_reduce"),
                                          RankStack(3, 2, where="make_dumps.py:50 main")],
                         "rank 2 is in make_dumps.py:50 main; ranks 0, 1 wait in all_reduce (make_dumps.py:44 main)")
    add_ledger(report, build_ledger(_dumps("hang3")))
    assert report.summary.startswith("rank 2 never entered all_reduce #7 (process group 0) that ranks 0, 1 wait "
                                     "in (called at make_dumps.py:44 main); rank 2 is in make_dumps.py:50 main")
    assert report.collectives is not None and report.collectives["behind"] == [2]
    assert StackReport.from_json(report.to_json()).collectives == report.collectives
    assert report_text(report).splitlines()[0] == report.summary
    agreed = StackReport(0.0, "request", [], "ranks 0, 1 are all in x.py:1 f")
    add_ledger(agreed, build_ledger({0: _dumps("op2")[0]}))
    assert agreed.summary == "ranks 0, 1 are all in x.py:1 f"
    assert report_text(agreed).splitlines()[1].startswith("collectives: ranks agree on every collective")


def test_a_rank_that_never_ran_a_collective_is_still_in_the_default_group() -> None:
    dumps = copy.deepcopy(_dumps("hang3"))
    dumps[2]["entries"], dumps[2]["pg_status"] = [], {}
    world = build_ledger(dumps).groups[0]
    assert world.ranks == [0, 1, 2] and world.last_sequence["2"] is None
    assert world.divergence is not None and world.divergence.startswith(
        "rank 2 never entered all_reduce #1 (process group 0) that ranks 0, 1 entered")


def test_a_rank_answers_a_dump_request_through_its_fifo(tmp_path: Path) -> None:
    # The run's sitecustomize in a real Python with RANK set: it arms the FIFO; without a process group it answers
    # with no rank. With TRAINDECK_FLIGHT_RECORDER=0 nothing is armed.
    hook = Path(__file__).resolve().parents[3] / "backend" / "launch" / "site_hook"
    env = {**os.environ, "PYTHONPATH": str(hook), "TRAINDECK_RUN_DIR": str(tmp_path), "RANK": "3", "WORLD_SIZE": "4",
           "TRAINDECK_RANK_TAGS": "0"}
    for name in ("TRAINDECK_FR_PID", "TRAINDECK_STACKS_PID", "TRAINDECK_STACKS_RANK", "TORCH_FR_DUMP_TEMP_FILE"):
        env.pop(name, None)
    code = "import os, sys, time; print(os.environ['TORCH_FR_DUMP_TEMP_FILE'], flush=True); sys.stdin.readline()"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == str(tmp_path / "collectives" / "torch_dump_rank")
        assert (tmp_path / "collectives" / f"{proc.pid}.fifo").exists()
        targets: list[tuple[int, int | None]] = [(proc.pid, 3), (proc.pid + 100000, 5)]
        # The FIFO is made before the rank's thread opens it to listen: until then a request finds no reader.
        deadline = time.monotonic() + 30
        while proc.pid in (refused := request_dumps(tmp_path, targets)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refused == {proc.pid + 100000: "the flight recorder dump is not armed in this rank"}
        ledger = collect_dumps(tmp_path, targets, refused)
        assert ledger.missing == {"3": "no process group yet",
                                  "5": "the flight recorder dump is not armed in this rank"}
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "collectives" / f"{proc.pid}.fifo").exists()  # removed at exit
    off = subprocess.run([sys.executable, "-c", "pass"], env={**env, "TRAINDECK_FLIGHT_RECORDER": "0"}, timeout=30)
    assert off.returncode == 0 and not list((tmp_path / "collectives").glob("*.fifo"))


def test_the_divergence_is_found_in_a_stacks_summary() -> None:
    summary = ("rank 2 never entered all_reduce #7 (process group 0) that ranks 0, 1 wait in; rank 2 is in "
               "make_dumps.py:50 main; ranks 0, 1 wait in all_reduce (make_dumps.py:44 main)")
    assert divergence_in(summary) == "rank 2 never entered all_reduce #7 (process group 0) that ranks 0, 1 wait in"
    mismatch = build_ledger(_dumps("op2")).summary + "; ranks 0, 1 wait in all_reduce (x.py:3 f)"
    assert divergence_in(mismatch) == build_ledger(_dumps("op2")).summary
    assert divergence_in("rank 1 is in train.py:88 load_batch; rank 0 waits in all_reduce (train.py:40 main)") is None

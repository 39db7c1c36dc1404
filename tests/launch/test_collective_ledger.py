"""The collectives ledger on real gloo runs (torch.distributed.run, 2 and 3 ranks): `traindeck stacks` asks every
rank for torch's flight recorder buffer and names the rank that never entered a collective, or the collective the
ranks disagree on; the supervisor's stall stacks, and the diagnosis of a run stopped while hung, carry it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.runhelp import SCRIPTS, events, get, launch, leftovers, wait_finished, wait_until

from traindeck.backend.runs.control.lifecycle import stop_run
from traindeck.backend.runs.record.run_store import RunStore

pytestmark = [pytest.mark.launch, pytest.mark.slow, pytest.mark.train]

TRAINDECK = [sys.executable, "-m", "traindeck"]
SCRIPT = SCRIPTS / "collective_ledger.py"


def _start(mode: str, nproc: int, stall_min_s: float = 300.0) -> Any:
    pytest.importorskip("torch", reason="needs the train extra")
    run = launch(SCRIPT, mode, launcher="python", nproc=nproc, name=f"ledger-{mode}", stall_min_s=stall_min_s)
    log = Path(run.run_dir, "output.log")
    wait_until(lambda: log.read_text(errors="replace").count("past 5 all_reduces") == nproc, 120)
    wait_until(lambda: len([p for p in get(run.id).processes if p["role"] == "rank"]) == nproc, 30)
    return run


def _stacks_json(run_id: str) -> dict[str, Any]:
    out = subprocess.run([*TRAINDECK, "stacks", run_id, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _stop(run_id: str) -> Any:
    with RunStore() as store:
        stop_run(store, run_id, grace_s=2.0)
    done = wait_finished(run_id, 60)
    assert done.state == "stopped" and leftovers(done) == []
    return done


def test_a_rank_that_never_enters_the_collective_is_named_with_its_sequence_number() -> None:
    run = _start("hang", 3, stall_min_s=10.0)
    try:
        # The last rank sits in load_batch: ranks 0 and 1 enter all_reduce #6 and wait there.
        def ledger() -> dict[str, Any] | None:
            report = _stacks_json(run.id)
            return report if report["collectives"]["behind"] else None
        report = wait_until(ledger, 30, interval=1.0)
        ledger_json = report["collectives"]
        group = next(g for g in ledger_json["groups"] if g["id"] == "0")
        assert group["ranks"] == [0, 1, 2]
        assert group["last_sequence"] == {"0": 6, "1": 6, "2": 5}
        assert ledger_json["behind"] == [2]
        assert group["divergence"] == "rank 2 never entered all_reduce #6 (process group 0) that ranks 0, 1 wait in"
        assert re.match(r"rank 2 never entered all_reduce #6 \(process group 0\) that ranks 0, 1 wait in; "
                        r"rank 2 is in collective_ledger\.py:\d+ load_batch; ranks 0, 1 wait in all_reduce",
                        report["summary"]), report["summary"]
        assert sorted(p.name for p in Path(run.run_dir, "collectives").glob("rank*.pkl")) == \
            ["rank0.pkl", "rank1.pkl", "rank2.pkl"]
        text = subprocess.run([*TRAINDECK, "stacks", run.id], capture_output=True, text=True, timeout=60)
        assert text.stdout.startswith("rank 2 never entered all_reduce #6"), text.stdout[:300]

        # The supervisor's stall stacks carry the ledger too.
        def stall_stacks() -> str | None:
            return next((t for k, t in events(run.id) if k == "stacks" and "never entered" in t), None)
        taken = wait_until(stall_stacks, 60)
        assert "rank 2 never entered all_reduce #6 (process group 0)" in taken
        saved = json.loads(Path(run.run_dir, "stall_stacks.json").read_text())
        assert saved["collectives"]["behind"] == [2]
    finally:
        done = _stop(run.id)
    assert done.diagnosis is not None
    assert re.match(r"Stopped on request .* while stalled: rank 2 never entered all_reduce #6 \(process group 0\) "
                    r"that ranks 0, 1 wait in", done.diagnosis["summary"]), done.diagnosis


def test_a_collective_timeout_is_diagnosed_with_the_rank_that_never_arrived() -> None:
    # gloo's timeout at 40 s: the run stalls first (10 s quiet), the ledger is taken, then the waiting rank raises.
    pytest.importorskip("torch", reason="needs the train extra")
    run = launch(SCRIPT, "hang", launcher="python", nproc=2, name="ledger-timeout", stall_min_s=10.0,
                 env={"LEDGER_TIMEOUT_S": "40"})
    done = wait_finished(run.id, 180)
    assert done.state == "failed" and done.diagnosis is not None
    assert done.diagnosis["summary"] == (
        "Rank 0 timed out in a collective operation (NCCL/gloo): another rank stopped answering; when the run "
        "stalled, rank 1 never entered all_reduce #6 (process group 0) that rank 0 waits in."), done.diagnosis


def test_ranks_calling_different_collectives_are_named() -> None:
    run = _start("op", 2)
    try:
        report = wait_until(lambda: (r := _stacks_json(run.id))["collectives"]["groups"][0]["divergence"] and r, 30,
                            interval=1.0)
        group = report["collectives"]["groups"][0]
        assert group["divergence"] == ("different collectives at #6 (process group 0): rank 0 all_reduce [4] float, "
                                       "rank 1 all_gather [4] float"), group
        assert group["last_sequence"] == {"0": 6, "1": 6}
        assert report["collectives"]["behind"] == []
        assert report["summary"].startswith("different collectives at #6")
    finally:
        _stop(run.id)


def test_ranks_broadcasting_different_sizes_are_named() -> None:
    run = _start("size", 2)
    try:
        wait_until(lambda: Path(run.run_dir, "output.log").read_text(errors="replace").count("sleeping") == 2, 60)
        report = _stacks_json(run.id)
        group = report["collectives"]["groups"][0]
        assert group["divergence"] == ("different sizes or dtypes at #6 (process group 0): rank 0 broadcast [4] "
                                       "float, rank 1 broadcast [8] float"), group
    finally:
        _stop(run.id)


def test_ranks_started_by_multiprocessing_spawn_answer_too() -> None:
    # No RANK in their environment: they answer with the rank of their process group.
    pytest.importorskip("torch", reason="needs the train extra")
    from traindeck.backend.launch.ports import pick_free_port

    run = launch(SCRIPT, "hang", "2", str(pick_free_port()), launcher="python", name="ledger-spawn")
    try:
        log = Path(run.run_dir, "output.log")
        wait_until(lambda: log.read_text(errors="replace").count("past 5 all_reduces") == 2, 120)

        def ledger() -> dict[str, Any] | None:
            report = _stacks_json(run.id)
            return report if (report.get("collectives") or {}).get("behind") else None
        report = wait_until(ledger, 30, interval=1.0)
        group = report["collectives"]["groups"][0]
        assert group["ranks"] == [0, 1] and group["last_sequence"] == {"0": 6, "1": 5}
        assert group["divergence"] == "rank 1 never entered all_reduce #6 (process group 0) that rank 0 waits in"
    finally:
        _stop(run.id)


def test_the_flight_recorder_switched_off_gives_no_ledger() -> None:
    pytest.importorskip("torch", reason="needs the train extra")
    run = launch(SCRIPT, "hang", launcher="python", nproc=2, name="ledger-off", env={"TRAINDECK_FLIGHT_RECORDER": "0"})
    try:
        log = Path(run.run_dir, "output.log")
        wait_until(lambda: log.read_text(errors="replace").count("past 5 all_reduces") == 2, 120)
        wait_until(lambda: len([p for p in get(run.id).processes if p["role"] == "rank"]) == 2, 30)
        time.sleep(1.0)
        report = _stacks_json(run.id)
        assert report["collectives"]["missing"] == {"0": "the flight recorder dump is not armed in this rank",
                                                    "1": "the flight recorder dump is not armed in this rank"}
        assert not Path(run.run_dir, "collectives").exists()
        assert "rank 1 is in collective_ledger.py:" in report["summary"]
    finally:
        _stop(run.id)

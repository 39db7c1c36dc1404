"""The step anatomy from the ranks' step lines: reading them (bounded, incremental, no symlinks), the per-rank
medians, the slowest rank, the bound and its one line, the slow-down, the advice rules, the store and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traindeck.backend.runs.control.step_view import run_step_anatomy
from traindeck.backend.runs.record.layout import RunDir
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.instructions import SafeStore
from traindeck.backend.runs.supervisor.step_intake import StepIntake
from traindeck.backend.steps import (
    PHASES,
    HookReport,
    RunFacts,
    StepFiles,
    StepRecord,
    analyse,
    anatomy_table,
    fsdp_of,
)
from traindeck.backend.steps.records import parse_line


def step(rank: int, n: int, t0: float = 1_000.0, **ms: float) -> StepRecord:
    phases = {p: float(ms.get(p, 0.0)) for p in PHASES}
    return StepRecord(rank=rank, step=n, t=t0 + n, step_ms=sum(phases.values()), phases_ms=phases)


def line(n: int, **ms: float) -> str:
    record = {"step": n, "t": 1_000.0 + n, "step_ms": sum(ms.values())}
    record.update({f"{p}_ms": ms.get(p, 0.0) for p in PHASES})
    return json.dumps(record)


# ---- reading the lines ---------------------------------------------------------------------------------------
def test_lines_that_are_not_steps_are_skipped_not_raised() -> None:
    assert parse_line(b"", 0) is None
    assert parse_line(b"{not json", 0) is None
    assert parse_line(b"[1, 2]", 0) is None
    assert parse_line(b'{"step": -1, "t": 1}', 0) is None
    assert parse_line(b'{"step": 3}', 0) is None  # no time
    assert parse_line(b'{"step": 1, "t": 1, "pad": "' + b"x" * 5000 + b'"}', 0) is None  # longer than any of ours
    record = parse_line(b'{"step": 2, "t": 5.5, "step_ms": 10, "forward_ms": -3, "backward_ms": "x", '
                        b'"gpu_allocated": true, "host_rss": 1024}', 1)
    assert isinstance(record, StepRecord)
    assert (record.rank, record.step, record.step_ms, record.phase("forward"), record.phase("backward")) == \
        (1, 2, 10.0, 0.0, 0.0)
    assert record.gpu_allocated is None and record.host_rss == 1024
    report = parse_line(b'{"kind": "hooks", "pid": 42, "attached": ["torch backward"], '
                        b'"missing": ["DeepSpeedEngine forward/backward/step (unknown DeepSpeed version)"]}', 3)
    assert isinstance(report, HookReport) and report.pid == 42
    assert report.text() == ("rank 3: step timing attached to torch backward; could not attach: "
                             "DeepSpeedEngine forward/backward/step (unknown DeepSpeed version)")
    # What timed the phases is said where it is not the plain host clock: a CUDA rank's events, or its syncs.
    cuda = parse_line(b'{"kind": "hooks", "pid": 42, "attached": ["torch backward"], "clock": "cuda events"}', 0)
    assert isinstance(cuda, HookReport) and cuda.clock == "cuda events"
    assert cuda.text() == "rank 0: step timing attached to torch backward (timed with cuda events)"
    host = parse_line(b'{"kind": "hooks", "pid": 42, "attached": ["torch backward"], "clock": "host"}', 0)
    assert isinstance(host, HookReport) and host.text() == "rank 0: step timing attached to torch backward"


def test_step_files_are_read_as_they_grow_whole_lines_only(tmp_path: Path) -> None:
    folder = tmp_path / "steps"
    folder.mkdir()
    rank0 = folder / "rank0.jsonl"
    rank0.write_text(line(1, forward=1) + "\n" + line(2, forward=2)[:20])  # the second line is half written
    (folder / "rank1.jsonl").write_text(line(1, backward=5) + "\n")
    (folder / "notes.txt").write_text(line(1) + "\n")  # not a rank's file
    files = StepFiles(tmp_path)
    steps, _ = files.read_new()
    assert sorted((s.rank, s.step) for s in steps) == [(0, 1), (1, 1)]
    with open(rank0, "w") as f:
        f.write(line(1, forward=1) + "\n" + line(2, forward=2) + "\n")
    steps, _ = files.read_new()
    assert [(s.rank, s.step, s.phase("forward")) for s in steps] == [(0, 2, 2.0)]
    assert files.read_new() == ([], [])
    rank0.write_text(line(1, forward=9) + "\n")  # shorter than what was read: a new file, read from its start
    steps, _ = files.read_new()
    assert [(s.step, s.phase("forward")) for s in steps] == [(1, 9.0)]


def test_a_flood_is_caught_up_over_several_reads_and_a_symlink_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "steps"
    folder.mkdir()
    (folder / "rank0.jsonl").write_text("".join(line(n, other=1) + "\n" for n in range(1, 2001)))
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text(line(1, other=1) + "\n")
    (folder / "rank1.jsonl").symlink_to(secret)
    files = StepFiles(tmp_path, budget=64 << 10)
    seen: list[int] = []
    reads = 0
    while True:
        steps, _ = files.read_new()
        if not steps:
            break
        reads += 1
        seen.extend(s.step for s in steps)
        assert all(s.rank == 0 for s in steps)
    assert seen == list(range(1, 2001)) and reads > 1


# ---- the anatomy ---------------------------------------------------------------------------------------------
def test_medians_leave_out_the_first_steps_and_phases_add_up() -> None:
    records = [step(0, 1, forward=500, other=2000)]  # the first step: caches, JIT, allocator pools
    records += [step(0, n, forward=10, backward=20, optimizer=60, communication=5, other=5) for n in range(2, 12)]
    anatomy = analyse(records)
    rank = anatomy.ranks[0]
    assert rank.steps == 11 and rank.step_ms == 100.0
    assert rank.phases_ms == {"forward": 10, "backward": 20, "communication": 5, "optimizer": 60, "swap": 0,
                              "other": 5}
    assert anatomy.bound == "optimizer" and anatomy.slowest_rank == 0
    assert anatomy.summary.startswith("optimizer-bound: the optimizer step takes 60% of each step (60 ms of 100 ms)")


def test_a_typical_step_adds_up_where_backward_and_the_wait_in_communication_trade_off() -> None:
    # As two CPU ranks over gloo measured: a step whose backward runs long waits less in the next all-reduce, and
    # the other way round. Each step adds up to its time; per-phase medians (25 + 22.5 + 5 ms) would not (57.5).
    cycle = [(40, 10), (10, 45), (30, 30), (20, 15)]  # (backward, communication): steps of 55, 60, 65 and 40 ms
    records = [step(0, n, forward=5, backward=cycle[n % 4][0], communication=cycle[n % 4][1]) for n in range(1, 42)]
    records.append(step(0, 42, forward=5, backward=900, communication=5))  # a checkpoint save: left out
    rank = analyse(records).ranks[0]
    assert sum(rank.phases_ms.values()) == pytest.approx(rank.step_ms)
    assert rank.step_ms == pytest.approx(57.5, abs=0.5)  # the middle half: the steps of 55 and 60 ms
    anatomy = analyse(records)
    share, bound_ms = rank.share("compute"), rank.bound_ms("compute")
    assert f"{share:.0%} of each step ({bound_ms:.0f} ms of {rank.step_ms:.0f} ms)" in anatomy.summary
    assert round(bound_ms / rank.step_ms, 2) == round(share, 2)


def test_the_rank_that_sleeps_in_its_data_is_the_slowest_and_the_run_is_data_bound() -> None:
    # Rank 1 sleeps 80 ms loading its batch; rank 0 waits the same 80 ms in the gradient all-reduce. Both steps
    # last 120 ms: only the time each spends outside communication tells who holds the other up.
    records = []
    for n in range(1, 21):
        records.append(step(0, n, forward=10, backward=20, communication=85, optimizer=3, other=2))
        records.append(step(1, n, forward=10, backward=20, communication=5, optimizer=3, other=82))
    anatomy = analyse(records, facts=RunFacts(cpu_cores=2, ranks_on_host=2))
    assert anatomy.slowest_rank == 1 and anatomy.bound == "data"
    assert "data-bound" in anatomy.summary and "82 ms of 120 ms" in anatomy.summary
    assert "rank 1 is the slowest: 115 ms of its own work per step, 3.3x rank 0's 35 ms, so rank 0 waits for it " \
        "in communication" in anatomy.summary
    assert any("data loading" in a for a in anatomy.advice)
    table = anatomy_table(anatomy)
    assert "\n   0  " in table and "\n  1*  " in table
    data = anatomy.to_json()
    assert set(data["ranks"]["0"]) == {"steps", "forward_ms", "backward_ms", "communication_ms", "optimizer_ms",
                                       "swap_ms", "other_ms", "step_ms", "peak_gpu_allocated_bytes",
                                       "peak_gpu_reserved_bytes", "peak_host_bytes"}
    assert (data["bound"], data["slowest_rank"], data["straggler"]) == ("data", 1, 1)
    assert anatomy_table(anatomy, rank=0).count("\n   0  ") == 1 and "\n  1*" not in anatomy_table(anatomy, rank=0)


def test_evenly_matched_ranks_name_no_straggler() -> None:
    records = [step(r, n, forward=10, backward=30 + r, communication=20, optimizer=5) for r in (0, 1)
               for n in range(1, 11)]
    anatomy = analyse(records)
    assert anatomy.bound == "compute" and "on both ranks" in anatomy.summary
    assert "is the slowest" not in anatomy.summary
    # Rank 1 is slower by 1 ms in 65: no rank is marked as the one the others wait for.
    assert anatomy.slowest_rank == 1 and anatomy.straggler is None and anatomy.to_json()["straggler"] is None
    table = anatomy_table(anatomy)
    assert "*" not in table and "\n   1  " in table


def test_ranks_evenly_slow_in_their_data_are_all_advised_not_one() -> None:
    records = [step(r, n, forward=1, backward=10, communication=15, optimizer=2, other=50) for r in (0, 1)
               for n in range(1, 11)]
    anatomy = analyse(records)
    assert anatomy.bound == "data" and anatomy.straggler is None
    assert any(a.startswith("every rank spends most of its step outside the engine") for a in anatomy.advice)
    assert not any(a.startswith("rank ") for a in anatomy.advice)


def test_a_close_second_bound_is_said_with_its_numbers() -> None:
    # Forward 10 + backward 18.5 ms against 26 ms of communication in a 59 ms step: compute bounds the run, but
    # communication is 91% of it, so the verdict names both.
    records = [step(0, n, forward=10, backward=18.5, communication=26, optimizer=3, other=1.5) for n in range(1, 11)]
    anatomy = analyse(records)
    assert anatomy.bound == "compute" and anatomy.close_second == "communication"
    assert anatomy.summary == ("compute-bound: forward and backward take 48% of each step (28 ms of 59 ms); "
                               "communication close behind (26 ms, 44%)")
    data = anatomy.to_json()
    assert (data["bound"], data["close_second"]) == ("compute", "communication")
    assert anatomy_table(anatomy).splitlines()[-1] == anatomy.summary  # the CLI's verdict line
    # 21 ms of communication is 84% of 25 ms of compute: said; 19 ms (76%) is not.
    near = analyse([step(0, n, forward=10, backward=15, communication=21, optimizer=2) for n in range(1, 11)])
    assert near.summary.endswith("(25 ms of 48 ms); communication close behind (21 ms, 44%)"), near.summary
    far = analyse([step(0, n, forward=10, backward=15, communication=19, optimizer=2) for n in range(1, 11)])
    assert far.bound == "compute" and far.close_second is None and "close behind" not in far.summary
    assert far.to_json()["close_second"] is None
    # Any bound can be the second: the optimizer behind communication, said in its own words.
    optimizer = analyse([step(0, n, forward=2, backward=3, communication=40, optimizer=35) for n in range(1, 11)])
    assert optimizer.bound == "communication" and optimizer.close_second == "optimizer"
    assert "; the optimizer step close behind (35 ms, 44%)" in optimizer.summary


def test_a_close_second_is_the_slowest_ranks_and_comes_before_the_rest_of_the_verdict() -> None:
    # Rank 1 loads its data for 60 ms with 55 ms of compute; rank 0 waits for it in communication. The second is
    # rank 1's compute, said right after the bound's numbers, before the slowest rank is named.
    records = []
    for n in range(1, 11):
        records.append(step(0, n, forward=20, backward=35, communication=70, optimizer=5, other=5))
        records.append(step(1, n, forward=20, backward=35, communication=10, optimizer=5, other=65))
    anatomy = analyse(records, facts=RunFacts(cpu_cores=2, ranks_on_host=2))
    assert anatomy.bound == "data" and anatomy.slowest_rank == 1 and anatomy.close_second == "compute"
    assert anatomy.summary.startswith(
        "data-bound: time outside the engine (data loading, the script's own work) takes 48% of each step on "
        "rank 1 (65 ms of 135 ms); forward and backward close behind (55 ms, 41%); rank 1 is the slowest"), \
        anatomy.summary


def test_a_slowdown_mid_run_is_dated_and_blamed_on_its_phase() -> None:
    records = [step(0, n, forward=10, backward=20, optimizer=20) for n in range(1, 41)]
    records += [step(0, n, forward=10, backward=20, optimizer=20, swap=60) for n in range(41, 81)]
    anatomy = analyse(records)
    assert anatomy.slowdown is not None
    assert anatomy.slowdown.step == 41 and anatomy.slowdown.phase == "swap"
    assert anatomy.slowdown.text() == "steps became 2.2x slower from step 41: 50 ms -> 110 ms, most of it in swap"
    steady = analyse([step(0, n, forward=10 + (n % 3)) for n in range(1, 81)])
    assert steady.slowdown is None


def test_no_steps_says_why() -> None:
    anatomy = analyse([], notes=["step timing was off for this run (--no-step-timing)"])
    assert anatomy.bound is None and anatomy.ranks == {}
    assert anatomy.summary == "no step timed: step timing was off for this run (--no-step-timing)"
    assert anatomy_table(anatomy) == anatomy.summary + "\n"


# ---- advice --------------------------------------------------------------------------------------------------
def _offloaded(extra: dict | None = None) -> RunFacts:  # type: ignore[type-arg]
    zero = {"stage": 2, "offload_optimizer": {"device": "cpu"}, **(extra or {})}
    return RunFacts(ds_config={"zero_optimization": zero}, cpu_cores=2, ranks_on_host=2)


def test_an_offloaded_optimizer_bound_run_is_told_about_cores_and_memory_it_left_unpinned() -> None:
    records = [step(r, n, forward=5, backward=10, communication=5, optimizer=80) for r in (0, 1) for n in range(1, 9)]
    anatomy = analyse(records, facts=_offloaded())
    assert anatomy.summary == ("optimizer-bound: the optimizer step takes 80% of each step on both ranks "
                               "(80 ms of 100 ms); the optimizer runs on the CPU (offload_optimizer: cpu); "
                               "2 rank(s) share 2 core(s)")
    assert anatomy.advice[0].startswith("CPU Adam has 1.0 core(s) per rank")
    # The key absent: its default is the DeepSpeed version's (0.19: pinned), so nothing is said of it.
    assert not any("pin_memory" in a for a in anatomy.advice)
    unpinned = analyse(records, facts=_offloaded({"offload_optimizer": {"device": "cpu", "pin_memory": False}}))
    assert any(a.startswith("offload_optimizer.pin_memory is off") for a in unpinned.advice)
    pinned = analyse(records, facts=_offloaded({"offload_optimizer": {"device": "cpu", "pin_memory": True}}))
    assert not any("pin_memory" in a for a in pinned.advice)


def test_zero3_settings_of_zero_overlap_and_trace_cache_invalidations_are_named() -> None:
    records = [step(r, n, forward=30, backward=30, communication=30, optimizer=10) for r in (0, 1)
               for n in range(1, 11)]
    facts = RunFacts(ds_config={"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0,
                                                      "stage3_max_live_parameters": 1e9, "overlap_comm": True}},
                     trace_cache_invalidations=25)
    advice = analyse(records, facts=facts).advice
    assert any(a.startswith("stage3_prefetch_bucket_size is 0") for a in advice)
    assert not any(a.startswith("stage3_max_live_parameters") for a in advice)
    assert any(a.startswith("overlap_comm is on") for a in advice)
    assert any(a.startswith("ZeRO-3 invalidated its trace cache 25 time(s) over 10 steps (2.5 a step)")
               for a in advice)
    assert analyse(records).advice == ()


def test_a_communication_bound_fsdp_run_is_told_about_resharding_and_units_not_zero() -> None:
    said = ["rank 0: step timing attached to torch backward, FSDP2 (fully_shard) model: its all-gathers, "
            "reduce-scatters and their waits"]
    assert fsdp_of(said) == "FSDP2 (fully_shard)"
    assert fsdp_of(["rank 0: step timing attached to torch backward"]) is None
    bound = [step(r, n, forward=5, backward=6, communication=16, optimizer=4) for r in (0, 1) for n in range(1, 11)]
    anatomy = analyse(bound, facts=RunFacts(fsdp="FSDP2 (fully_shard)", cpu_cores=2, ranks_on_host=2))
    assert anatomy.summary.startswith("communication-bound: communication (collectives and their waits) takes 52% "
                                      "of each step on both ranks (16 ms of 31 ms); FSDP2 (fully_shard) gathers")
    assert any("reshard_after_forward=False in fully_shard (accelerate: fsdp_reshard_after_forward: false)" in a
               for a in anatomy.advice), anatomy.advice
    assert not any("ZeRO" in a or "CPU Adam" in a for a in anatomy.advice), anatomy.advice
    fsdp1 = analyse(bound, facts=RunFacts(fsdp="FSDP1"))
    assert any("SHARD_GRAD_OP" in a for a in fsdp1.advice), fsdp1.advice
    # Compute-bound: FSDP's collectives are not what to change.
    compute = [step(r, n, forward=20, backward=30, communication=10, optimizer=4) for r in (0, 1)
               for n in range(1, 11)]
    assert analyse(compute, facts=RunFacts(fsdp="FSDP2 (fully_shard)")).advice == ()


# ---- the store, the supervisor's intake, the CLI -------------------------------------------------------------
def _planted_run(tmp_path: Path, **fields: object) -> RunRecord:
    record = RunRecord(id="20260101-120000-5a5a", run_dir=str(tmp_path), created_at=time.time(), name="anatomy",
                       state="succeeded", **fields)  # type: ignore[arg-type]
    with RunStore() as store:
        store.add_run(record)
    return record


def test_the_supervisor_stores_each_step_once_and_each_ranks_hooks_once(tmp_path: Path) -> None:
    record = _planted_run(tmp_path)
    folder = tmp_path / "steps"
    folder.mkdir()
    hooks = json.dumps({"kind": "hooks", "rank": "0", "pid": 7, "attached": ["torch backward"], "missing": []})
    (folder / "rank0.jsonl").write_text(hooks + "\n" + "".join(line(n, forward=n) + "\n" for n in range(1, 6)))
    with RunStore() as store:
        intake = StepIntake(RunDir(tmp_path), SafeStore(store), record.id, interval_s=1.0)
        intake.poll(100.0)
        intake.poll(100.5)  # within the interval: not read again
        with open(folder / "rank0.jsonl", "a") as f:
            f.write(hooks + "\n" + line(5, forward=50) + "\n" + line(6, forward=6) + "\n")
        intake.finish()
        steps = store.steps(record.id)
        assert [s.step for s in store.steps(record.id, last=2)] == [5, 6]
        assert store.steps(record.id, rank=1) == []
        events = [e.text for e in store.events(record.id) if e.kind == "step_timing"]
    assert [(s.step, s.phase("forward")) for s in steps] == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 50), (6, 6)]
    assert events == ["rank 0: step timing attached to torch backward"]


def test_steps_command_and_runs_show_json(tmp_path: Path) -> None:
    record = _planted_run(tmp_path, processes=[{"pid": 1, "role": "rank", "rank": 0}])
    (tmp_path / "ds_config.json").write_text(json.dumps({"zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}))
    with RunStore() as store:
        store.add_steps(record.id, [step(0, n, forward=5, backward=10, optimizer=80, other=5) for n in range(1, 9)])
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    shown = subprocess.run([sys.executable, "-m", "traindeck", "steps", "anatomy"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "optimizer-bound: the optimizer step takes 80% of each step (80 ms of 100 ms); the optimizer runs on " \
           "the CPU (offload_optimizer: cpu)" in shown.stdout
    as_json = subprocess.run([sys.executable, "-m", "traindeck", "runs", "show", "anatomy", "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    anatomy = json.loads(as_json.stdout)["step_anatomy"]
    assert anatomy["bound"] == "optimizer" and anatomy["slowest_rank"] == 0
    assert anatomy["ranks"]["0"]["optimizer_ms"] == 80.0 and anatomy["ranks"]["0"]["steps"] == 8
    missing = subprocess.run([sys.executable, "-m", "traindeck", "steps", "anatomy", "--rank", "3"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode != 0 and "has no timed step of rank 3" in missing.stderr


def test_steps_of_one_rank_keep_the_runs_verdict(tmp_path: Path) -> None:
    # Rank 0 computes 60 ms a step; rank 1 computes 30 and waits 30 for rank 0 in the all-reduce. What bounds the
    # run is rank 0's compute, whichever rank's row is asked for: rank 1 alone would read as communication-bound.
    record = _planted_run(tmp_path)
    with RunStore() as store:
        store.add_steps(record.id, [step(0, n, forward=20, backward=40, communication=5, optimizer=5)
                                    for n in range(1, 11)])
        store.add_steps(record.id, [step(1, n, forward=10, backward=20, communication=35, optimizer=5)
                                    for n in range(1, 11)])
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}

    def steps(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "traindeck", "steps", "anatomy", *args], capture_output=True,
                              text=True, env=env, timeout=120)

    whole, one = steps(), steps("--rank", "1")
    assert whole.returncode == 0 and one.returncode == 0, one.stderr
    verdict = next(x for x in whole.stdout.splitlines() if "-bound:" in x)
    assert verdict.startswith("compute-bound") and verdict in one.stdout.splitlines()
    assert "\n   1  " in one.stdout and "\n   0  " not in one.stdout and "\n  0*" not in one.stdout
    assert "* the slowest rank" in whole.stdout and "* the slowest rank" not in one.stdout  # no starred row shown
    as_json = json.loads(steps("--rank", "1", "--json").stdout)
    assert list(as_json["ranks"]) == ["1"] and as_json["bound"] == "compute" and as_json["slowest_rank"] == 0
    missing = steps("--rank", "3", "--json")
    assert missing.returncode != 0 and "has no timed step of rank 3 (ranks timed: 0, 1)" in missing.stderr
    assert "never called optimizer.step()" not in missing.stdout + missing.stderr


def test_a_run_with_timing_off_says_so_and_files_are_read_when_the_store_has_nothing(tmp_path: Path) -> None:
    off = tmp_path / "off"
    off.mkdir()
    (off / "command.json").write_text(json.dumps({"argv": ["python", "t.py"], "env": {"TRAINDECK_STEP_TIMING": "0"}}))
    record = _planted_run(off)
    assert run_step_anatomy(record).summary == ("no step timed: step timing was off for this run "
                                                "(--no-step-timing)")
    lost = tmp_path / "lost"
    (lost / "steps").mkdir(parents=True)
    (lost / "steps" / "rank0.jsonl").write_text("".join(line(n, backward=9, other=1) + "\n" for n in range(1, 6)))
    record = RunRecord(id="20260101-130000-6b6b", run_dir=str(lost), created_at=time.time(), state="lost")
    with RunStore() as store:
        store.add_run(record)
    assert run_step_anatomy(record).bound == "compute"


def test_a_multi_node_runs_slowest_rank_is_named_with_its_machine_and_cores_are_shared_per_node(
        tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps({"hosts": [
        {"host": "node-a", "slots": 2, "ranks": [0, 1]}, {"host": "node-b", "slots": 2, "ranks": [2, 3]}]}))
    (tmp_path / "ds_config.json").write_text(json.dumps({"zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    record = _planted_run(tmp_path)
    with RunStore() as store:
        for rank in range(4):  # rank 3 loads its data slowly; the others wait for it in communication
            store.add_steps(record.id, [step(rank, n, forward=10, backward=20, optimizer=60,
                                             communication=5 if rank == 3 else 85, other=85 if rank == 3 else 5)
                                        for n in range(1, 12)])
    anatomy = run_step_anatomy(record)
    assert anatomy.slowest_rank == 3
    assert "rank 3 (node-b) is the slowest" in anatomy.summary and "x rank 0 (node-a)'s" in anatomy.summary
    assert anatomy.to_json()["hosts"] == {"0": "node-a", "1": "node-a", "2": "node-b", "3": "node-b"}
    table = anatomy_table(anatomy).splitlines()
    assert table[0].split()[:3] == ["rank", "node", "steps"] and table[4].split()[:2] == ["3*", "node-b"]
    from traindeck.backend.runs.control.step_view import run_facts

    with RunStore() as store:
        facts = run_facts(record, store.steps(record.id))
    assert facts.ranks_on_host == 2 and facts.rank(2) == "rank 2 (node-b)"  # 2 ranks a machine, not 4


@pytest.mark.parametrize("flag", ["--deepspeed_config", "--deepspeed"])
def test_the_deepspeed_config_given_to_the_script_is_found(tmp_path: Path, flag: str) -> None:
    from traindeck.backend.runs.control.step_view import deepspeed_config

    (tmp_path / "mine.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    command = {"argv": ["deepspeed", "train.py", flag, "mine.json"], "cwd": str(tmp_path)}
    assert deepspeed_config(RunDir(tmp_path / "run"), command) == {"zero_optimization": {"stage": 3}}


def test_trace_cache_invalidations_are_counted_as_the_log_grows(tmp_path: Path) -> None:
    # A live view polls this every few seconds: only what the log gained is read, an occurrence cut by the last
    # read's end is counted once it is whole, and a rewritten log is counted again.
    from traindeck.backend.runs.control.step_view import trace_cache_invalidations

    log = tmp_path / "output.log"
    log.write_bytes(b"x" * 10 + b"Invalidate trace cache @ step 1\n")
    assert trace_cache_invalidations(log) == 1
    with open(log, "ab") as f:
        f.write(b"Invalidate trace ")
    assert trace_cache_invalidations(log) == 1
    with open(log, "ab") as f:
        f.write(b"cache @ step 2\nInvalidate trace cache @ step 3\n")
    assert trace_cache_invalidations(log) == 3
    log.write_bytes(b"Invalidate trace cache @ step 1\n")
    assert trace_cache_invalidations(log) == 1
    assert trace_cache_invalidations(tmp_path / "missing.log") is None

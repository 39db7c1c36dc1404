"""Strategy trials with real runs: a tiny DeepSpeed script on the CPU, 2 ranks under the deepspeed launcher.

The script is an ordinary DeepSpeed loop (no traindeck import) whose batch is the config's micro-batch; it trains
until traindeck stops it. One set-up is planted to hold 1.2 GiB more host memory per rank, over the trial's
--memory-limit of 1 GiB. The trial is started with --detach, so nothing of traindeck stays open while it runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import job_env, leftovers, wait_until

from traindeck.backend.runs.record.run_store import RunStore
from traindeck.backend.trials import TrialFolder, read_trial_mark

pytestmark = [pytest.mark.slow, pytest.mark.train]
pytest.importorskip("deepspeed", reason="needs the train extra")

SCRIPT = '''\
"""A tiny DeepSpeed loop whose batch is the config's micro-batch."""
import argparse
import json

import deepspeed
import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--deepspeed_config")
p.add_argument("--local_rank", type=int, default=0)
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--plant-mib", type=int, default=0)
p.add_argument("--plant-in", default="", help="STAGE-OFFLOAD-MICRO, e.g. 2-none-4")
p.add_argument("--oom-from", type=int, default=0, help="from this micro-batch on, fail as CUDA would")
args = p.parse_args()
config = json.load(open(args.deepspeed_config))
zero = config["zero_optimization"]
offload = "none" if "offload_optimizer" not in zero else ("cpu+params" if "offload_param" in zero else "cpu")
micro = config["train_micro_batch_size_per_gpu"]
held = None
if args.plant_in == f"{zero['stage']}-{offload}-{micro}":
    held = bytearray(args.plant_mib << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1
if args.oom_from and micro >= args.oom_from:
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.79 GiB total "
                                      "capacity; 6.90 GiB already allocated)")
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden), nn.GELU(),
                      nn.Linear(args.hidden, 1))
deepspeed.init_distributed()
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(args.steps):
    x = torch.randn(micro, 64)
    loss = (engine(x) - x.sum(dim=1, keepdim=True).tanh()).pow(2).mean()
    engine.backward(loss)
    engine.step()
    if engine.global_rank == 0 and step % 10 == 0:
        print(f"step {step} loss {float(loss):.4f}", flush=True)
'''
WARMUP, STEPS = 2, 5


def _cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, cwd=cwd,
                          env=job_env(), timeout=timeout)


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_ds.py"
    path.write_text(SCRIPT)
    return path


def _finished(trial_id: str, timeout: float) -> dict:  # type: ignore[type-arg]
    folder = TrialFolder(trial_id)
    return wait_until(lambda: folder.state().finished and json.loads(folder.state_path.read_text()), timeout, 1.0)


def _own_figures(run_id: str, run_dir: str) -> tuple[float, float]:
    """(median step ms, samples/s) from the run's own step records and config, as the test reads them."""
    with RunStore() as store:
        records = store.steps(run_id)
    by_step: dict[int, list[float]] = {}
    for record in records:
        by_step.setdefault(record.step, []).append(record.step_ms)
    window = [max(by_step[s]) for s in range(WARMUP + 1, WARMUP + STEPS + 1)]
    assert all(len(by_step[s]) == 2 for s in range(1, WARMUP + STEPS + 1)), by_step
    config = json.loads(Path(run_dir, "ds_config.json").read_text())
    batch = config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * 2
    median = statistics.median(window)
    return median, batch * 1000.0 / median


def test_a_trial_of_eight_candidates_ranks_them_skips_the_one_over_the_limit_and_its_winner_runs(
        tmp_path: Path) -> None:
    _script(tmp_path)
    started = _cli(tmp_path, "trial", "--preset", "cpu-demo", "--name", "tiny", "--stages", "2,3", "--offload",
                   "none,cpu", "--micro-batch", "2,4", "--steps", str(STEPS), "--warmup", str(WARMUP),
                   "--memory-limit", "1GiB", "--detach", "tiny_ds.py", "--deepspeed_config", "{ds_config}",
                   "--plant-mib", "1200", "--plant-in", "2-none-4")
    assert started.returncode == 0, started.stderr
    trial_id = started.stdout.split()[-1]
    assert not TrialFolder(trial_id).state().finished  # the command is gone; the trial goes on without it
    state = _finished(trial_id, 900)
    shown = _cli(tmp_path, "trial", "show", trial_id)
    print("\n" + shown.stdout)  # the table, on the test's output (pytest -s)
    result = json.loads(_cli(tmp_path, "trial", "show", trial_id, "--json").stdout)
    assert result["state"] == "finished"
    candidates = result["candidates"]
    assert [(c["stage"], c["offload"], c["micro_batch"]) for c in candidates] == [
        (2, "none", 2), (2, "none", 4), (2, "cpu", 2), (2, "cpu", 4),
        (3, "none", 2), (3, "none", 4), (3, "cpu", 2), (3, "cpu", 4)]

    # The planted set-up went over the limit: classified, stopped, and the trial went on.
    planted = candidates[1]
    assert planted["state"] == "failed" and planted["kind"] == "host_oom", planted
    assert planted["reason"].startswith("host_oom: rank ") and "over the trial's limit of 1024 MiB" in planted["reason"]
    others = [c for i, c in enumerate(candidates) if i != 1]
    assert all(c["state"] == "measured" for c in others), others

    # Each candidate's figures are its run's own (median of the measured steps, slowest rank), and the ranking is
    # their order.
    own = {}
    with RunStore() as store:
        for i, c in enumerate(candidates):
            record = store.get_run(c["run_id"])
            assert record is not None and record.finished and leftovers(record) == [], record
            mark = read_trial_mark(record.run_dir)
            assert mark is not None and (mark["trial_id"], mark["index"]) == (trial_id, i)
            if c["state"] == "measured":
                own[i] = _own_figures(record.id, record.run_dir)
                assert c["step_ms"] == pytest.approx(own[i][0], abs=1e-3)
                assert c["samples_per_s"] == pytest.approx(own[i][1], rel=1e-3)
                assert c["peak_host_bytes"] > 50 * 2**20
    assert result["ranking"] == sorted(own, key=lambda i: -own[i][1])
    assert result["winner"] == result["ranking"][0]
    winner = candidates[result["winner"]]
    assert shown.stdout.rstrip().splitlines()[-1].startswith(f"winner: {trial_id} #{result['winner']} ")

    # The trial took no more than its candidates' start + warm-up + measured steps, plus 10%.
    total = state["ended_at"] - state["started_at"]
    needed = sum(c["own_seconds"] for c in candidates)
    print(f"trial {total:.1f} s, candidates' start + warm-up + steps {needed:.1f} s ({total / needed - 1:+.1%})")
    assert total <= 1.10 * needed, (total, needed)
    assert f"trial time: {total:.1f} s" in shown.stdout

    # The winner as a preset: `config check` passes it and `traindeck run` runs it.
    used = _cli(tmp_path, "trial", "use", trial_id, "--preset", "tiny-fastest")
    assert used.returncode == 0 and used.stdout.strip() == "tiny-fastest", used.stderr
    assert _cli(tmp_path, "presets", "export", "tiny-fastest", "--dir", str(tmp_path / "out")).returncode == 0
    ds = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == winner["stage"]
    assert ds["train_micro_batch_size_per_gpu"] == winner["micro_batch"]
    assert ("offload_optimizer" in ds["zero_optimization"]) == (winner["offload"] == "cpu")
    check = _cli(tmp_path, "config", "check", str(tmp_path / "out" / "ds_config.json"), "--world-size", "2",
                 "--plain-script")
    assert check.returncode == 0, check.stdout + check.stderr
    run = _cli(tmp_path, "run", "--preset", "tiny-fastest", "tiny_ds.py", "--deepspeed_config", "{ds_config}",
               "--steps", "3", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_stopping_a_trial_midway_keeps_what_was_measured(tmp_path: Path) -> None:
    _script(tmp_path)
    started = _cli(tmp_path, "trial", "--preset", "cpu-demo", "--stages", "2", "--offload", "none",
                   "--micro-batch", "1,2,4", "--steps", str(STEPS), "--warmup", str(WARMUP), "--detach",
                   "tiny_ds.py", "--deepspeed_config", "{ds_config}")
    assert started.returncode == 0, started.stderr
    trial_id = started.stdout.split()[-1]
    folder = TrialFolder(trial_id)

    def second_running() -> bool:
        results = folder.state().results
        return len(results) == 3 and results[0].state == "measured" and results[1].run_id is not None

    wait_until(second_running, 300, 0.5)
    stopped = _cli(tmp_path, "trial", "stop", trial_id[:12])
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    state = folder.state()
    assert state.state == "stopped"
    first, second, third = state.results
    assert first.state == "measured" and first.step_ms and first.samples_per_s and first.steps_ms
    assert second.state == "skipped" and second.reason.startswith("the trial was stopped while it ran"), second
    assert third.state == "skipped" and third.reason == "the trial was stopped before it ran" and third.run_id is None
    with RunStore() as store:
        record = store.get_run(second.run_id)
        assert record is not None and record.state == "stopped"
        assert leftovers(record) == []
    shown = json.loads(_cli(tmp_path, "trial", "show", trial_id, "--json").stdout)
    assert shown["winner"] == 0 and shown["candidates"][0]["step_ms"] == first.step_ms


def test_a_followed_trial_doubles_the_micro_batch_until_a_candidate_fails_and_prints_the_winner_last(
        tmp_path: Path) -> None:
    _script(tmp_path)
    proc = _cli(tmp_path, "trial", "--preset", "cpu-demo", "--name", "ladder", "--stages", "2", "--offload", "none",
                "--steps", "3", "--warmup", "1", "tiny_ds.py", "--deepspeed_config", "{ds_config}",
                "--oom-from", "4", timeout=600)
    print("\n" + proc.stdout)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.rstrip().splitlines()
    rows = [line.split() for line in lines[1:4]]
    assert [r[:2] for r in rows] == [["0", "zero2-none-mb1"], ["1", "zero2-none-mb2"], ["2", "zero2-none-mb4"]]
    assert rows[0][-1] == rows[1][-1] == "measured"
    # The failed candidate is classified by the run's diagnosis, and the ladder stops there.
    assert "failed: cuda_oom: " in lines[3], lines[3]
    assert lines[4].startswith("trial time: ")
    assert lines[-1].startswith("winner: ") and len(lines) == 6, lines
    trial_id = lines[-1].split()[1]
    result = json.loads(_cli(tmp_path, "trial", "show", trial_id, "--json").stdout)
    assert [c["state"] for c in result["candidates"]] == ["measured", "measured", "failed"]
    assert result["candidates"][2]["kind"] == "cuda_oom" and result["winner"] in (0, 1)

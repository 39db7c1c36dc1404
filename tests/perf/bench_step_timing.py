"""What step timing costs a run (issue 25): the same launch with and without it, printed as a table.

    .venv/bin/python tests/perf/bench_step_timing.py                 # 3 pairs of each workload (a few minutes)
    .venv/bin/python tests/perf/bench_step_timing.py --pairs 5
    .venv/bin/python tests/perf/bench_step_timing.py --smoke         # 1 pair of the plain loop (seconds)

Each workload is launched the way a user launches it (LaunchRequest -> build_plan -> start_run, a supervised run),
in pairs: once with step timing (the default) and once with TRAINDECK_STEP_TIMING=0 (`traindeck run
--no-step-timing`), alternating which goes first, so drift of the machine's load falls on both. The step time is
the script's own: tests/fixtures/scripts/step_timing_loop.py takes time.perf_counter() as each optimizer step
returns; the first steps (warm-up) are left out, and the median is taken over every rank's remaining steps of every
run of that kind. Goal: the medians within 1% of each other. Nothing is asserted: the table says it.

Workloads:
  deepspeed  2 ranks through the deepspeed launcher on the CPU, ZeRO-2 with CPU optimizer offload (the engine's
             forward/backward/step, deepspeed.comm's collectives and CPU Adam's torch step hooks are timed)
  python     one process, a plain torch loop (torch's global optimizer hooks, autograd.backward and the module
             forward hooks: the path with the most hooks per step, and a short step that shows their cost most)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOOP = REPO / "tests" / "fixtures" / "scripts" / "step_timing_loop.py"
WARMUP = 5  # steps of each rank left out


def _launch(work: Path, kind: str, timed: bool, steps: int, tag: str):  # type: ignore[no-untyped-def]
    from traindeck.backend.launch.builders import LaunchRequest, build_plan
    from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run

    times = work / f"{tag}-times{{rank}}.json"
    env = {} if timed else {"TRAINDECK_STEP_TIMING": "0"}
    if kind == "deepspeed":
        config = work / "ds_config.json"
        config.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
        args = ["--deepspeed_config", str(config), "--hidden", "1024", "--layers", "1", "--batch-size", "4"]
        env["DS_ACCELERATOR"] = "cpu"
        launcher, nproc = "deepspeed", 2
    else:
        args = ["--hidden", "256", "--layers", "2", "--batch-size", "16", "--threads", "1"]
        launcher, nproc = "python", None
    run_dir = new_run_dir()
    request = LaunchRequest(script=str(LOOP), script_args=[*args, "--steps", str(steps), "--times", str(times)],
                            launcher=launcher, nproc=nproc, cwd=run_dir.path, env=env)  # type: ignore[arg-type]
    plan = build_plan(request, run_dir.path)
    if not plan.ok:
        raise SystemExit(f"bench_step_timing: cannot launch: {plan.errors}")
    return start_run(plan, run_dir, name=f"bench-{tag}"), times, (2 if kind == "deepspeed" else 1)


def _run(work: Path, kind: str, timed: bool, steps: int, tag: str) -> list[float]:
    """The script's own step times (ms) of one run, every rank, after the warm-up steps."""
    from traindeck.backend.runs.record.run_store import RunStore

    record, times, ranks = _launch(work, kind, timed, steps, tag)
    with RunStore() as store:
        deadline = time.monotonic() + 900
        while True:
            current = store.get_run(record.id)
            assert current is not None
            if current.finished:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_step_timing: run {record.id} did not finish")
            time.sleep(0.2)
        if current.state != "succeeded":
            log = Path(current.run_dir, "output.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"bench_step_timing: run {record.id} {current.state}: {current.diagnosis}\n{log}")
        recorded = len(store.steps(record.id))
    if timed != (recorded > 0):
        raise SystemExit(f"bench_step_timing: run {tag} recorded {recorded} timed steps (timing {'on' if timed else 'off'})")
    out: list[float] = []
    for rank in range(ranks):
        data = json.loads(Path(str(times).replace("{rank}", str(rank))).read_text())
        out += [ms for step, ms in data["step_ms"].items() if int(step) > WARMUP]
    return out


def bookkeeping_us(steps: int = 20_000) -> float:
    """The hook's own cost per step, without a script: its clock driven by hand as the wrappers drive it (three
    phases, the step's end with its memory read and, twice a second, its write), in microseconds."""
    import importlib.util

    hook = REPO / "backend" / "launch" / "site_hook" / "_traindeck_steps.py"
    spec = importlib.util.spec_from_file_location("_traindeck_steps_bench", hook)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    timing = module._Timing(tempfile.mkdtemp(prefix="bench-step-clock-"), "0")
    start = time.perf_counter()
    for _ in range(steps):
        for phase in ("forward", "backward", "optimizer"):
            timing.enter(phase)
            timing.leave(phase)
        timing.step_ended()
    return (time.perf_counter() - start) / steps * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="runs with and without step timing, per workload")
    parser.add_argument("--smoke", action="store_true", help="1 pair of the plain loop, 15 steps: checks the bench "
                                                             "runs end to end")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-step-timing-"))
    os.environ.setdefault("TRAINDECK_HOME", str(work / "home"))
    plan = [("python", 1, 15)] if args.smoke else [("python", args.pairs, 200), ("deepspeed", args.pairs, 60)]

    rows = []
    for kind, pairs, steps in plan:
        on: list[float] = []
        off: list[float] = []
        per_run: dict[bool, list[float]] = {True: [], False: []}
        for pair in range(pairs):
            order = (True, False) if pair % 2 == 0 else (False, True)
            for timed in order:
                values = _run(work, kind, timed, steps, f"{kind}-{pair}-{'on' if timed else 'off'}")
                (on if timed else off).extend(values)
                per_run[timed].append(statistics.median(values))
                print(f"  {kind} pair {pair + 1}/{pairs} timing {'on ' if timed else 'off'}: "
                      f"median step {statistics.median(values):.2f} ms ({len(values)} steps)", flush=True)
        with_ms, without_ms = statistics.median(on), statistics.median(off)
        rows.append((kind, f"{pairs} + {pairs}", f"{with_ms:.2f}", f"{without_ms:.2f}",
                     f"{(with_ms - without_ms) / without_ms:+.1%}",
                     " ".join(f"{v:.1f}" for v in per_run[True]) + " / " + " ".join(f"{v:.1f}" for v in per_run[False])))

    clock = bookkeeping_us(2_000 if args.smoke else 20_000)
    header = ("workload", "runs on + off", "median step ms, timing on", "timing off", "difference",
              "per-run medians on / off")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print()
    print("step timing's cost: the script's own median step time (goal: within 1%)")
    print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(header)))
    for row in rows:
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)))
    print(f"the hook's own bookkeeping: {clock:.1f} us per step ({clock / 10_000:.2%} of a 10 ms step, "
          f"{clock / 100_000:.3%} of a 100 ms step), measured with its clock driven by hand")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

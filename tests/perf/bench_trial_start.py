"""What a trial's candidate costs traindeck before its launcher starts, and the trial's time against its parts:
prints a table.

    .venv/bin/python tests/perf/bench_trial_start.py              # 4 candidates, 2 CPU ranks (about two minutes)
    .venv/bin/python tests/perf/bench_trial_start.py --smoke      # 1 candidate, 1 measured step

A real trial (the driver's loop, run in this process so the launch can be watched) of a tiny DeepSpeed loop under
the deepspeed launcher on 2 CPU ranks, the stages (default ZeRO-2 and ZeRO-3) x the micro-batches given. For each candidate:

  start    the driver's decision to run it (the candidate's started_at) -> the launcher process's creation (its
           kernel start time, to 1/100 s): the candidate's preset and configs, the plan, the run directory, the
           supervisor, the supervisor's spawn. Goal: under 0.5 s. The interpreter's probe is the trial's own start
           (the driver asks it once, before the first candidate).

and for the trial: its whole time against the sum over candidates of (start + warm-up + measured steps), the parts
the trial cannot do without (goal: within 10% over).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SCRATCH = Path(tempfile.mkdtemp(prefix="traindeck-bench-trial-"))
os.environ["TRAINDECK_HOME"] = str(SCRATCH / "home")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from launch.test_trials import SCRIPT  # noqa: E402  (the tiny DeepSpeed loop the trial tests run)

from traindeck.backend.launch.environ import torch_extensions_dir  # noqa: E402

# The ops `make setup` built for this interpreter (as every run uses). Not the shared root above those folders:
# every interpreter's runs there rebuild each other's ops (fused_adam: minutes per candidate).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(torch_extensions_dir(sys.executable)))

from traindeck.backend.presets import load_preset  # noqa: E402
from traindeck.backend.trials import TrialFolder, TrialOptions, plan_trial, run_trial, time_line  # noqa: E402


def launcher_started(run_id: str, found: dict[str, float], deadline_s: float = 120.0) -> None:
    """Wait for the run's launcher process and keep its start as a wall-clock time. The kernel's start time (clock
    ticks since boot) is turned into wall time through CLOCK_BOOTTIME, read here beside time.time(): psutil's
    create_time adds a boot time rounded to the second, too coarse for a figure of tenths of a second."""
    from traindeck.backend.runs import RunStore

    tick = os.sysconf("SC_CLK_TCK")
    end = time.monotonic() + deadline_s
    with RunStore() as store:
        while time.monotonic() < end:
            record = store.get_run(run_id)
            if record is not None and record.launcher_pid:
                try:
                    with open(f"/proc/{record.launcher_pid}/stat", encoding="ascii") as f:
                        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
                except (OSError, ValueError, IndexError):
                    return
                found[run_id] = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + ticks / tick
                return
            time.sleep(0.005)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--micro-batch", default="1,2", help="the ladder (default 1,2: 4 candidates)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--stages", default="2,3")
    parser.add_argument("--smoke", action="store_true", help="1 candidate, 1 warm-up and 1 measured step")
    args = parser.parse_args()
    if args.smoke:
        args.stages, args.micro_batch, args.steps, args.warmup = "2", "2", 1, 1
    work = SCRATCH / "work"
    work.mkdir()
    (work / "tiny_ds.py").write_text(SCRIPT)
    options = TrialOptions(script="tiny_ds.py", script_args=("--deepspeed_config", "{ds_config}"), name="bench",
                           preset=load_preset("cpu-demo"), cwd=str(work), stages=args.stages, offload="none",
                           micro_batch=args.micro_batch, steps=args.steps, warmup=args.warmup)
    spec = plan_trial(options, options.preset)  # type: ignore[arg-type]
    folder = TrialFolder(spec.id)
    folder.create(spec)
    created: dict[str, float] = {}
    watchers: list[threading.Thread] = []

    def launch(request: Any, name: str) -> Any:
        from traindeck.backend.runs import launch_run

        outcome = launch_run(request, name=name)
        if outcome.record is not None:
            watcher = threading.Thread(target=launcher_started, args=(outcome.record.id, created), daemon=True)
            watcher.start()
            watchers.append(watcher)
        return outcome

    state = run_trial(folder, launch=launch)
    for watcher in watchers:
        watcher.join(timeout=5)
    rows = []
    for result in state.results:
        label = "-".join(str(result.candidate.get(k)) for k in ("stage", "offload", "micro_batch"))
        start = (created[result.run_id] - result.started_at) if result.run_id in created and result.started_at \
            else None
        rows.append((label, result.state, start))
    starts = [s for _label, _state, s in rows if s is not None]
    print(f"\ntrial {state.id}: {len(rows)} candidates, deepspeed launcher, 2 CPU ranks, {args.warmup} warm-up + "
          f"{args.steps} measured steps (machine: {os.cpu_count()} cores)\n")
    print(f"{'candidate':<16} {'state':<10} {'start (s)':>10}")
    for label, result_state, start in rows:
        print(f"{label:<16} {result_state:<10} {'-' if start is None else f'{start:.3f}':>10}")
    if starts:
        print(f"\nstart: median {statistics.median(starts):.3f} s, max {max(starts):.3f} s "
              f"(goal: under 0.5 s each)")
    print(time_line(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""traindeck's step timing on a real GPU (tests/gpu/acceptance.sh with TRAINDECK_GPU_DRIVER=steps_check.py): what
step timing costs a CUDA step, for DeepSpeed ZeRO-2 and for torch's FSDP2, and the step anatomy of a ZeRO-2 run with
its optimizer offloaded to the CPU (DeepSpeedCPUAdam), all through `traindeck run` with unmodified scripts
(tests/fixtures/scripts/step_timing_loop.py, fsdp_step_loop.py) and no wall_clock_breakdown in the configs.

Rows (written to $OUT/gpu-steps.md, every row "not reached" until it ends; run in this order):
  overhead_gpu      the script's own median step time of a CUDA-only ZeRO-2 run (DeepSpeed launcher, 1 rank) with
                    step timing on and off (`--no-step-timing`), in alternating pairs: within 1%
  fsdp2             the same for FSDP2 (`fully_shard` on each Linear and the whole model) under torchrun, 1 rank,
                    NCCL: within 1%, timed with CUDA events, the hooks line naming the FSDP2 model with its
                    collectives and its CUDA streams' waits attached. One GPU means one rank: NCCL refuses two
                    ranks on one GPU, and at world size 1 FSDP2 issues no all-gather or reduce-scatter (its
                    reduce is a copy on its reduce-scatter stream, which the compute stream waits for at the end
                    of backward), so the row checks the hook on FSDP2's streams and its cost, not a collective
  offload           the offloaded run's verdict and phases (`traindeck steps ID --json`): the bound is the optimizer
  overhead_offload  the offloaded run again without step timing: within 1%
The scripts time their own steps with time.perf_counter() between consecutive step returns; the first steps are
left out (warm-up). Exits 1 when a row says FAIL.

On CUDA the hook times each step on the GPU's timeline with CUDA events on the compute stream and never
synchronises (TRAINDECK_STEP_SYNC unset), so the overhead rows measure that default; the offload row's phases are
read on the device's timeline too (CPU Adam shows as the stream's wait inside the optimizer phase), and each timed
run's hooks line must say "clock": "cuda events".

Time (TRAINDECK_GPU_BUDGET_S=410 in a device call of timeout_s 540; the machine's start is outside the call but inside
the 15 minutes of device time). acceptance.sh gives the driver the budget less what it spent and 10 s; the runner
keeps 20 s back for the clean-up. A row starts only when the seconds it needs (ROWS) are left, each run has its own
limit (LIMITS) and is stopped there, and a failed or skipped row says why in one line while the next row still
runs, so the call ends within the budget + 10 s (~420 s) whatever fails. Expected seconds on the H200 (torch
2.11+cu130 there in 2026-11; each process's own start included):
  before the driver: acceptance.sh's CUDA probe (the first `import torch` on a fresh machine) ~8 s, the 7 wheels
    (4.8 MB) installed into a folder ~5 s                                                               ~15 s
  one DeepSpeed run: `traindeck run --detach` ~3 s (8-21 s here, 2 busy cores), the supervisor, DeepSpeed's runner
    and launch.py, the rank (torch + deepspeed imports ~8 s, CUDA context ~1 s, NCCL ~1 s, deepspeed.initialize
    ~3 s, 150 steps of ~25-29 ms ~4 s, exit), `runs show` polled every second                        ~35 s
    (the 2026-11-28 H200 run of this check: 6 such runs and the 54 s CPU Adam build in ~300 s; here a --small
    run takes 35 s on 2 idle cores, 90 s with other sessions' tests running)
  one FSDP2 run: torchrun, the rank (torch, CUDA + NCCL ~2 s, fully_shard, 200 steps of ~30 ms ~6 s) ~24 s
  overhead_gpu: 4 DeepSpeed runs                                                                       ~140 s
  fsdp2: 2 runs and `traindeck steps`                                                                   ~50 s
  offload: DeepSpeedCPUAdam JIT-built in its rank (54 s on the H200) + 30 steps of ~92 ms               ~95 s
  overhead_offload: 1 DeepSpeed run (CPU Adam built)                                                    ~35 s
  the clean-up and the table                                                                             ~5 s
  in all                                                                                               ~340 s
against the driver's ~380 s: the rows run in the order of what they prove, so the one the budget would cut first
is overhead_offload (which passed on 2026-11-28). With the machine's start (~2-4 min) the call takes ~8-10 min of
the 15; TRAINDECK_GPU_ROWS reruns a few rows in what is left.

`--plan` prints the rows and their expected seconds without running anything (acceptance.sh prints it on a machine
without a GPU); `--small` runs every row with a few tiny steps, on the CPU too (DS_ACCELERATOR=cpu): no verdict
on the 1%. TRAINDECK_GPU_ROWS=fsdp2,overhead_gpu (say) runs those rows alone; the others say INFO, not asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# Same folder: acceptance.sh runs this file as a script.
from gpu_check import FINAL_STATES, Runner, first_json

LOOP = "tests/fixtures/scripts/step_timing_loop.py"
FSDP_LOOP = "tests/fixtures/scripts/fsdp_step_loop.py"
WARMUP = 5
REPORT = "gpu-steps.md"
FSDP2_TIMED = "FSDP2 (fully_shard) model: its all-gathers, reduce-scatters and their waits"

# key: (what the row checks, the seconds it needs on the H200 to start: its runs' limits are within them)
ROWS: dict[str, tuple[str, float]] = {
    "overhead_gpu": ("step timing's cost on a CUDA ZeRO-2 step (median, on vs off)", 140.0),
    "fsdp2": ("step timing's cost on a CUDA FSDP2 step, 1 rank, torchrun + NCCL (median, on vs off); its hooks", 55.0),
    "offload": ("ZeRO-2, optimizer offloaded to the CPU (DeepSpeedCPUAdam): the verdict", 100.0),
    "overhead_offload": ("step timing's cost on the offloaded step (median, on vs off)", 40.0),
}
# Each run's limit on the H200 (--small: SMALL_SLOWER times as long, for a busy CPU machine).
LIMITS = {"gpu": 60.0, "fsdp2": 50.0, "offload": 95.0, "offload_off": 40.0}
SMALL_SLOWER = 3.0
PLAN_S = {"wheels and the CUDA probe": 15.0, "the clean-up and the table": 5.0}


def plan(budget: float) -> str:
    """What the driver runs and the seconds each row may take on the H200 (what it waits for before it starts),
    in one line."""
    rows = ", ".join(f"{key} up to {needs:.0f} s" for key, (_what, needs) in ROWS.items())
    total = sum(needs for _what, needs in ROWS.values()) + sum(PLAN_S.values())
    return (f"steps_check.py would run {len(ROWS)} rows ({rows}; wheels, CUDA probe, clean-up ~"
            f"{sum(PLAN_S.values()):.0f} s): up to ~{total:.0f} s of the {budget:.0f} s budget, table in "
            f"gpu-steps.md")


def _config(work: Path, name: str, zero: dict[str, Any], batch: int, torch_adam: bool = False) -> Path:
    """A DeepSpeed config; `torch_adam`: torch's AdamW, not FusedAdam (whose first use builds with nvcc: minutes)."""
    path = work / f"{name}.json"
    params: dict[str, Any] = {"lr": 0.0001, **({"torch_adam": True} if torch_adam else {})}
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
                                "optimizer": {"type": "AdamW", "params": params},
                                "zero_optimization": zero}), encoding="utf-8")
    return path


def hooks_line(show: Any) -> dict[str, Any]:
    """Rank 0's last hooks line in its steps file (the hook writes it again when it attaches more after the first
    step, as when it finds the FSDP model): what was attached, what was not, the clock."""
    last: dict[str, Any] = {}
    try:
        with open(Path(show["run_dir"]) / "steps" / "rank0.jsonl", encoding="utf-8") as f:
            for text in f:
                if '"hooks"' in text:
                    line = json.loads(text)
                    if isinstance(line, dict) and line.get("kind") == "hooks":
                        last = line
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return last


def one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


class Launch:
    """What one row launches: the launcher, the script and its arguments (the DeepSpeed config among them)."""

    def __init__(self, launcher: str, script: str, args: list[str]) -> None:
        self.launcher, self.script, self.args = launcher, script, args


class Steps:
    def __init__(self, out: Path, work: Path, deadline: float, source: str, small: bool = False,
                 only: list[str] | None = None) -> None:
        self.out, self.work, self.small = out, work, small
        self.only = only or list(ROWS)
        self.runner = Runner(out / "gpu-steps.log", deadline)
        self.rows: dict[str, tuple[str, str, str]] = {key: (what, "FAIL", "not reached")
                                                      for key, (what, _needs) in ROWS.items()}
        self.source = source
        self.launched: list[str] = []  # every run started, for the clean-up
        self.took: dict[str, float] = {}  # each row's seconds
        self.slower = SMALL_SLOWER if small else 1.0
        self.offload_launch: Launch | None = None  # the offloaded run's set-up, run again without step timing
        self.offload_on: list[float] = []  # its step times with step timing
        self.offload_show: Any = None  # its `runs show`
        self.write()

    def verdict(self, ok: bool) -> str:
        """A cost row's result: --small's figures come from a CPU and judge nothing (INFO)."""
        return "FAIL" if not ok else "INFO" if self.small else "PASS"

    def set(self, key: str, result: str, figures: str) -> None:
        self.rows[key] = (self.rows[key][0], result, one_line(figures))
        self.write()

    def write(self) -> None:
        lines = [f"# traindeck step timing on a GPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                 f"Source: {self.source}", "", "| check | result | figures |", "| --- | --- | --- |"]
        lines += [f"| {what} | {result} | {one_line(figures)} |" for what, result, figures in self.rows.values()]
        if self.took:
            lines += ["", "Seconds per row: " + ", ".join(f"{k} {v:.0f}" for k, v in self.took.items()) + "."]
        (self.out / REPORT).write_text("\n".join(lines) + "\n", encoding="utf-8")

    # -- runs --
    def run(self, name: str, launch: Launch, timed: bool, limit: float) -> tuple[str | None, list[float], str, Any]:
        """One `traindeck run` to its end: its id, the script's own step times (ms, after the warm-up), or why
        not in one line, and its `runs show`."""
        times = self.work / f"{name}-times{{rank}}.json"
        extra = [] if timed else ["--no-step-timing"]
        t0 = time.monotonic()
        done = self.runner.td("run", "--detach", "--launcher", launch.launcher, "--nproc", "1", "--name", name,
                              *extra, launch.script, *launch.args, "--times", str(times), limit=min(limit, 120))
        lines = [line.strip() for line in done.out.splitlines() if line.strip()]
        if not done.ok or not lines:
            return None, [], done.why(), None
        run_id = lines[-1]
        self.launched.append(run_id)
        show: Any = None
        state = None
        while time.monotonic() - t0 < limit and self.runner.left() > 5:
            show = first_json(self.runner.td("runs", "show", run_id, "--json", limit=40).out)
            state = show.get("state") if isinstance(show, dict) else None
            if state in FINAL_STATES:
                break
            time.sleep(1)
        took = time.monotonic() - t0
        self.runner.note(f"{name}: run {run_id} {state} after {took:.1f} s")
        if state != "succeeded":
            if state not in FINAL_STATES:
                self.runner.td("stop", run_id, "--grace", "2", limit=40, essential=True)
            diagnosis = (show or {}).get("diagnosis") if isinstance(show, dict) else None
            why = f"run {run_id} {state or 'did not end'} after {took:.0f} s"
            if isinstance(diagnosis, dict) and diagnosis.get("summary"):
                why += f": {diagnosis['summary']}"
            return run_id, [], why, show
        try:
            data = json.loads(Path(str(times).replace("{rank}", "0")).read_text(encoding="utf-8"))
            steps = [ms for step, ms in data["step_ms"].items() if int(step) > WARMUP]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return run_id, [], f"run {run_id} succeeded but its step times were not read: {exc}", show
        if not steps:
            return run_id, [], f"run {run_id} succeeded with no step past the warm-up ({WARMUP})", show
        return run_id, steps, "", show

    def anatomy(self, run_id: str) -> tuple[dict[str, Any], str]:
        """`traindeck steps ID --json` and rank 0's median phases in one line."""
        anatomy = first_json(self.runner.td("steps", run_id, "--json", limit=60).out) or {}
        rank = (anatomy.get("ranks") or {}).get("0") or {}
        phases = ", ".join(f"{p} {rank.get(p + '_ms', 0):.1f}" for p in
                           ("forward", "backward", "communication", "optimizer", "swap", "other"))
        return anatomy, f"typical-step ms {phases} of {rank.get('step_ms', 0):.1f}"

    def overhead(self, key: str, name: str, launch: Launch, pairs: int, limit: float,
                 first_on: list[float] | None = None, first_show: Any = None) -> tuple[bool, str, list[Any]]:
        """Runs with step timing on and off in alternating order (off first); `first_on`, `first_show`: the step
        times and `runs show` of a timed run already made. Returns whether the cost is within 1% on CUDA events
        (--small: whether the runs ran), the figures, and the timed runs' shows."""
        on: list[float] = list(first_on or [])
        off: list[float] = []
        medians: dict[bool, list[float]] = {True: [statistics.median(on)] if on else [], False: []}
        shows: list[Any] = [first_show] if first_on else []
        order: list[bool] = []
        for pair in range(pairs):
            order += [True, False] if pair % 2 else [False, True]
        if first_on:
            order.remove(True)
        for i, timed in enumerate(order):
            if self.runner.left() < limit * 0.5:
                break
            run_id, times, why, show = self.run(f"{name}-{i}-{'on' if timed else 'off'}", launch, timed, limit)
            if not times:
                return False, why, shows
            if timed:
                shows.append(show)
            (on if timed else off).extend(times)
            medians[timed].append(statistics.median(times))
        if not on or not off:
            return False, "the time budget ran out before a pair ran", shows
        with_ms, without_ms = statistics.median(on), statistics.median(off)
        change = (with_ms - without_ms) / without_ms
        clocks = sorted({str(hooks_line(show).get("clock") or "not read") for show in shows}) or ["not read"]
        figures = (f"median step {with_ms:.2f} ms with timing, {without_ms:.2f} ms without ({change:+.2%}); runs' "
                   f"medians on {' '.join(f'{v:.2f}' for v in medians[True])} / off "
                   f"{' '.join(f'{v:.2f}' for v in medians[False])}; {len(on)} + {len(off)} steps; timed with "
                   f"{', '.join(clocks)}")
        return self.small or (change <= 0.01 and clocks == ["cuda events"]), figures, shows

    # -- rows --
    def overhead_gpu(self) -> None:
        gpu = _config(self.work, "gpu", {"stage": 2}, batch=1024, torch_adam=True)
        args = ["--hidden", "4096", "--layers", "8", "--batch-size", "1024", "--steps", "150"]
        if self.small:
            args = ["--hidden", "256", "--layers", "2", "--batch-size", "16", "--steps", "12"]
        ok, figures, _shows = self.overhead("overhead_gpu", "gpu", Launch("deepspeed", LOOP, [
            *args, "--deepspeed_config", str(gpu)]), pairs=2, limit=LIMITS["gpu"] * self.slower)
        self.set("overhead_gpu", self.verdict(ok), figures)

    def fsdp2(self) -> None:
        # fp32 matmuls of a 2048 batch: ~30 ms on the device against FSDP2's ~10 ms of Python hooks and DTensor
        # dispatch a step: the step is bound by the device, as a training step is, not by the host's Python (where
        # the hook's host time would show undiluted).
        args = ["--fsdp", "2", "--hidden", "4096", "--layers", "8", "--batch-size", "2048", "--steps", "200", "--cuda"]
        if self.small:  # gloo on the CPU
            args = ["--fsdp", "2", "--hidden", "256", "--layers", "2", "--batch-size", "16", "--steps", "12"]
        ok, figures, shows = self.overhead("fsdp2", "fsdp2", Launch("torchrun", FSDP_LOOP, args), pairs=1,
                                           limit=LIMITS["fsdp2"] * self.slower)
        if shows and isinstance(shows[0], dict):
            hooks = hooks_line(shows[0])
            attached = [a for a in hooks.get("attached") or [] if "FSDP" in a]
            missing = hooks.get("missing") or []
            _anatomy, phases = self.anatomy(str(shows[0].get("id")))
            figures += (f"; {phases}; hooks: {'; '.join(attached) or 'no FSDP2 model seen'}"
                        f"{'; missing: ' + '; '.join(missing) if missing else ''}")
            ok = ok and FSDP2_TIMED in attached and not any("FSDP" in m for m in missing)
        self.set("fsdp2", self.verdict(ok), figures)

    def offload(self) -> None:
        config = _config(self.work, "offload", {"stage": 2, "offload_optimizer": {"device": "cpu"}}, batch=16)
        args = ["--hidden", "4096", "--layers", "8", "--batch-size", "16", "--steps", "30"]
        if self.small:
            args = ["--hidden", "256", "--layers", "2", "--batch-size", "16", "--steps", "12"]
        self.offload_launch = Launch("deepspeed", LOOP, [*args, "--deepspeed_config", str(config)])
        run_id, times, why, show = self.run("offload-on", self.offload_launch, True,
                                            limit=LIMITS["offload"] * self.slower)
        if not times or run_id is None:
            self.set("offload", "FAIL", why)
            return
        self.offload_on, self.offload_show = times, show
        anatomy, phases = self.anatomy(run_id)
        rank = (anatomy.get("ranks") or {}).get("0") or {}
        figures = (f"run {run_id}: {anatomy.get('summary')}; {phases}; GPU peak allocated "
                   f"{rank.get('peak_gpu_allocated_bytes')}, reserved {rank.get('peak_gpu_reserved_bytes')}; the "
                   f"script's median step {statistics.median(times):.1f} ms")
        self.set("offload", "PASS" if anatomy.get("bound") == "optimizer" else "FAIL", figures)

    def overhead_offload(self) -> None:
        on = self.offload_on
        if not on or self.offload_launch is None:
            self.set("overhead_offload", "FAIL", "not run: the offloaded run with step timing gave no step times")
            return
        ok, figures, _shows = self.overhead("overhead_offload", "offload", self.offload_launch, pairs=1,
                                            limit=LIMITS["offload_off"] * self.slower, first_on=on,
                                            first_show=self.offload_show)
        self.set("overhead_offload", self.verdict(ok), figures)

    def cleanup(self) -> None:
        """Stops any run still going, so nothing holds the GPU after the call."""
        self.runner.reserve = 0.0
        for run_id in self.launched:
            show = first_json(self.runner.td("runs", "show", run_id, "--json", limit=20, essential=True).out)
            if not isinstance(show, dict) or show.get("state") not in FINAL_STATES:
                self.runner.td("stop", run_id, "--grace", "2", limit=30, essential=True)

    def main(self) -> int:
        t0 = time.monotonic()
        for key, (_what, needs) in ROWS.items():
            if key not in self.only:
                self.set(key, "INFO", "not asked for (TRAINDECK_GPU_ROWS)")
                continue
            left = self.runner.left()
            if self.small:  # the CPU's runs take as long as they take: the deadline and each run's limit bound them
                needs = 30.0
            if left < needs:
                self.set(key, "FAIL", f"not run: {left:.0f} s of the time budget left, the row needs about "
                                      f"{needs:.0f} s")
                continue
            print(f"[{time.monotonic() - t0:5.0f}s] {key} ({left:.0f} s left)", flush=True)
            started = time.monotonic()
            try:
                getattr(self, key)()
            except Exception as exc:  # one broken row must not cost the others theirs
                self.runner.note(f"{key} raised {type(exc).__name__}: {exc}")
                self.set(key, "FAIL", f"the row raised {type(exc).__name__}: {exc}")
            self.took[key] = time.monotonic() - started
        self.cleanup()
        self.took["in all"] = time.monotonic() - t0
        self.write()
        text = (self.out / REPORT).read_text(encoding="utf-8")
        print("\n" + text, flush=True)
        return 1 if "| FAIL |" in text else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=float, metavar="BUDGET_S", default=None,
                        help="print what would run and its expected seconds against this budget, run nothing")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--deadline", type=float, help="epoch seconds by which to be done")
    parser.add_argument("--wheels-rc", type=int, default=0)
    parser.add_argument("--source", default="")
    parser.add_argument("--small", action="store_true", help="a few small steps: tries the driver on a machine "
                                                             "without a GPU (DS_ACCELERATOR=cpu)")
    args = parser.parse_args()
    if args.plan is not None:
        print(plan(args.plan))
        return 0
    if args.out is None or args.work is None or args.deadline is None:
        parser.error("--out, --work and --deadline are needed (or --plan BUDGET_S)")
    source = Path(args.source).read_text(encoding="utf-8").strip() if args.source and Path(args.source).is_file() \
        else "unknown"
    only = [key.strip() for key in os.environ.get("TRAINDECK_GPU_ROWS", "").split(",") if key.strip()]
    unknown = [key for key in only if key not in ROWS]
    if unknown:
        parser.error(f"TRAINDECK_GPU_ROWS: unknown rows {', '.join(unknown)} (the rows: {', '.join(ROWS)})")
    deadline = time.monotonic() + (args.deadline - time.time())
    return Steps(args.out, args.work, deadline, source, small=args.small, only=only).main()


if __name__ == "__main__":
    sys.exit(main())

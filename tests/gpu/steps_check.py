"""traindeck's step timing on a real GPU (tests/gpu/acceptance.sh with TRAINDECK_GPU_DRIVER=steps_check.py): the
step anatomy of a ZeRO-2 run with its optimizer offloaded to the CPU (DeepSpeedCPUAdam) and what step timing costs
a CUDA step, both through `traindeck run` with the DeepSpeed launcher, an unmodified script
(tests/fixtures/scripts/step_timing_loop.py) and no wall_clock_breakdown in the config.

Rows (written to $OUT/gpu-steps.md, every row "not reached" until its run ends):
  offload   the offloaded run's verdict and phases (`traindeck steps ID --json`): the bound is the optimizer
  overhead  the script's own median step time of a CUDA-only ZeRO-2 run (no offload) with step timing on and off
            (`--no-step-timing`), in alternating pairs, and of the offloaded run: within 1%
The script times its own steps with time.perf_counter() between consecutive step returns; the first steps are left
out (warm-up). Exits 1 when a row says FAIL.

On CUDA the hook times each step on the GPU's timeline with CUDA events and never synchronises (TRAINDECK_STEP_SYNC
unset), so the overhead row measures that default; the offload row's phases are read on the device's timeline too
(CPU Adam shows as the stream's wait inside the optimizer phase), and the rank file's "hooks" line says
"clock": "cuda events".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gpu_check import Runner, first_json  # same folder: acceptance.sh runs this file as a script

LOOP = "tests/fixtures/scripts/step_timing_loop.py"
WARMUP = 5
REPORT = "gpu-steps.md"


def _config(work: Path, name: str, zero: dict[str, Any], batch: int, torch_adam: bool = False) -> Path:
    """A DeepSpeed config; `torch_adam`: torch's AdamW, not FusedAdam (whose first use builds with nvcc: minutes)."""
    path = work / f"{name}.json"
    params: dict[str, Any] = {"lr": 0.0001, **({"torch_adam": True} if torch_adam else {})}
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
                                "optimizer": {"type": "AdamW", "params": params},
                                "zero_optimization": zero}), encoding="utf-8")
    return path


def _clock(show: Any) -> str:
    """The clock rank 0's step timing used, from the first line of its steps file (the hooks line)."""
    try:
        with open(Path(show["run_dir"]) / "steps" / "rank0.jsonl", encoding="utf-8") as f:
            return str(json.loads(f.readline()).get("clock") or "not said")
    except (OSError, ValueError, KeyError, TypeError):
        return "not read"


class Steps:
    def __init__(self, out: Path, work: Path, deadline: float, source: str, small: bool = False) -> None:
        self.out, self.work, self.small = out, work, small
        self.runner = Runner(out / "gpu-steps.log", deadline)
        self.rows: dict[str, tuple[str, str, str]] = {
            "offload": ("ZeRO-2, optimizer offloaded to the CPU (DeepSpeedCPUAdam): the verdict", "FAIL", "not reached"),
            "overhead_gpu": ("step timing's cost on a CUDA ZeRO-2 step (median, on vs off)", "FAIL", "not reached"),
            "overhead_offload": ("step timing's cost on the offloaded step (median, on vs off)", "FAIL", "not reached"),
        }
        self.source = source
        self.clocks: list[str] = []  # what timed each timed run's rank 0 (its hooks line): "cuda events" expected
        self.write()

    def write(self) -> None:
        lines = [f"# traindeck step timing on a GPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
                 f"Source: {self.source}", "", "| check | result | figures |", "| --- | --- | --- |"]
        lines += [f"| {what} | {result} | {figures.replace('|', '/')} |" for what, result, figures in self.rows.values()]
        (self.out / REPORT).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def run(self, name: str, config: Path, args: list[str], timed: bool, limit: float) -> tuple[str | None, list[float], str]:
        """One `traindeck run` to its end: its id, the script's own step times (ms, after the warm-up), or why not."""
        times = self.work / f"{name}-times{{rank}}.json"
        extra = [] if timed else ["--no-step-timing"]
        done = self.runner.td("run", "--detach", "--launcher", "deepspeed", "--nproc", "1", "--name", name, *extra,
                              LOOP, "--deepspeed_config", str(config), *args, "--times", str(times), limit=120)
        lines = [line.strip() for line in done.out.splitlines() if line.strip()]
        if not done.ok or not lines:
            return None, [], done.why()
        run_id = lines[-1]
        t0 = time.monotonic()
        state = None
        while time.monotonic() - t0 < limit and self.runner.left() > 5:
            show = first_json(self.runner.td("runs", "show", run_id, "--json", limit=40).out)
            state = show.get("state") if isinstance(show, dict) else None
            if state in ("succeeded", "failed", "stopped", "lost"):
                break
            time.sleep(2)
        if state != "succeeded":
            self.runner.td("stop", run_id, "--grace", "2", limit=40, essential=True)
            return run_id, [], f"run {run_id} {state or 'did not end'} after {time.monotonic() - t0:.0f} s"
        if timed:
            self.clocks.append(_clock(show))
        data = json.loads(Path(str(times).replace("{rank}", "0")).read_text(encoding="utf-8"))
        return run_id, [ms for step, ms in data["step_ms"].items() if int(step) > WARMUP], ""

    def offload(self) -> tuple[list[float], Path, list[str]]:
        config = _config(self.work, "offload", {"stage": 2, "offload_optimizer": {"device": "cpu"}}, batch=16)
        args = ["--hidden", "4096", "--layers", "8", "--batch-size", "16", "--steps", "30"]
        if self.small:
            args = ["--hidden", "256", "--layers", "2", "--batch-size", "16", "--steps", "12"]
        run_id, times, why = self.run("offload-on", config, args, True, limit=240)
        if not times or run_id is None:
            self.rows["offload"] = (self.rows["offload"][0], "FAIL", why)
            return [], config, args
        anatomy = first_json(self.runner.td("steps", run_id, "--json", limit=60).out) or {}
        rank = (anatomy.get("ranks") or {}).get("0") or {}
        phases = ", ".join(f"{p} {rank.get(p + '_ms', 0):.1f}" for p in
                           ("forward", "backward", "communication", "optimizer", "swap", "other"))
        figures = (f"run {run_id}: {anatomy.get('summary')}; typical-step ms {phases} of {rank.get('step_ms', 0):.1f}; "
                   f"GPU peak allocated {rank.get('peak_gpu_allocated_bytes')}, reserved "
                   f"{rank.get('peak_gpu_reserved_bytes')}; the script's median step {statistics.median(times):.1f} ms")
        self.rows["offload"] = (self.rows["offload"][0], "PASS" if anatomy.get("bound") == "optimizer" else "FAIL",
                                figures)
        return times, config, args

    def overhead(self, key: str, name: str, config: Path, args: list[str], pairs: int,
                 first_on: list[float] | None = None) -> None:
        on: list[float] = list(first_on or [])
        off: list[float] = []
        medians: dict[bool, list[float]] = {True: [statistics.median(on)] if on else [], False: []}
        order = [False] if first_on else []
        for pair in range(pairs):
            order += [True, False] if pair % 2 else [False, True]
        order = order[:2 * pairs - (1 if first_on else 0)]
        for i, timed in enumerate(order):
            if self.runner.left() < 60:
                break
            run_id, times, why = self.run(f"{name}-{i}-{'on' if timed else 'off'}", config, args, timed, limit=150)
            if not times:
                self.rows[key] = (self.rows[key][0], "FAIL", why)
                return
            (on if timed else off).extend(times)
            medians[timed].append(statistics.median(times))
        if not on or not off:
            self.rows[key] = (self.rows[key][0], "FAIL", "the time budget ran out before a pair ran")
            return
        with_ms, without_ms = statistics.median(on), statistics.median(off)
        change = (with_ms - without_ms) / without_ms
        figures = (f"median step {with_ms:.2f} ms with timing, {without_ms:.2f} ms without ({change:+.2%}); runs' "
                   f"medians on {' '.join(f'{v:.2f}' for v in medians[True])} / off "
                   f"{' '.join(f'{v:.2f}' for v in medians[False])}; {len(on)} + {len(off)} steps")
        clocks = sorted(set(self.clocks))
        figures += f"; timed with {', '.join(clocks) or 'nothing'}"
        ok = change <= 0.01 and (self.small or clocks == ["cuda events"])
        self.rows[key] = (self.rows[key][0], "PASS" if ok else "FAIL", figures)

    def main(self) -> int:
        t0 = time.monotonic()
        print(f"[{time.monotonic() - t0:5.0f}s] offloaded run", flush=True)
        on, config, args = self.offload()
        self.write()
        gpu = _config(self.work, "gpu", {"stage": 2}, batch=1024, torch_adam=True)
        gpu_args = ["--hidden", "4096", "--layers", "8", "--batch-size", "1024", "--steps", "150"]
        if self.small:
            gpu_args = ["--hidden", "256", "--layers", "2", "--batch-size", "16", "--steps", "12"]
        print(f"[{time.monotonic() - t0:5.0f}s] CUDA-only pairs ({self.runner.left():.0f} s left)", flush=True)
        self.overhead("overhead_gpu", "gpu", gpu, gpu_args, pairs=2)
        self.write()
        if on:
            print(f"[{time.monotonic() - t0:5.0f}s] offloaded run without timing ({self.runner.left():.0f} s left)",
                  flush=True)
            self.overhead("overhead_offload", "offload", config, args, pairs=1, first_on=on)
        self.write()
        text = (self.out / REPORT).read_text(encoding="utf-8")
        print("\n" + text, flush=True)
        return 1 if "| FAIL |" in text else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--deadline", type=float, required=True, help="epoch seconds by which to be done")
    parser.add_argument("--wheels-rc", type=int, default=0)
    parser.add_argument("--source", default="")
    parser.add_argument("--small", action="store_true", help="a few small steps: tries the driver on a machine "
                                                             "without a GPU (DS_ACCELERATOR=cpu)")
    args = parser.parse_args()
    source = Path(args.source).read_text(encoding="utf-8").strip() if args.source and Path(args.source).is_file() \
        else "unknown"
    deadline = time.monotonic() + (args.deadline - time.time())
    return Steps(args.out, args.work, deadline, source, small=args.small).main()


if __name__ == "__main__":
    sys.exit(main())

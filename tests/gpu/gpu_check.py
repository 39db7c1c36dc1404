"""traindeck's GPU acceptance check: the steps, their verdicts and the one table they fill (tests/gpu/acceptance.sh
runs this on the GPU machine after putting the carried wheels and the repository on the path).

Everything goes through the `traindeck` command line (`python -m traindeck ...`) and nvidia-smi, never through
traindeck's modules, so the check keeps working while the backend's layout changes. Each command has its own time
limit, capped by the deadline of the whole check; a step that fails or runs out of time fills its rows with FAIL
and the reason, and the next step still runs. The table is written at the start (every row "not reached") and
again after each row, so even a killed check leaves a table saying how far it got.

The verdicts (judge_*), the parsers and the table writer are plain functions over the commands' JSON: the CPU
tests (tests/test_gpu_check.py) feed them recorded shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REPORT = "gpu-acceptance.md"
LOG = "gpu-check.log"  # every command: its arguments, time limit, exit status, time taken, output's end
MIB, GIB = 2**20, 2**30
SMI = os.environ.get("TRAINDECK_GPU_NVIDIA_SMI", "nvidia-smi")  # as acceptance.sh names it
FINAL_STATES = ("succeeded", "failed", "stopped", "lost")

# The model of the estimate check: 16 square layers of 8192 (1,073,741,824 parameters), ZeRO-2 bf16 with AdamW on
# one GPU: about 20 bytes per parameter (bf16 weights and gradients, fp32 master weights, Adam's two moments),
# 22 at DeepSpeed's step, far above the 10 GB the check asks for.
BIG_HIDDEN, BIG_LAYERS, MICRO_BATCH = 8192, 16, 2
BIG_PARAMS = BIG_HIDDEN * BIG_HIDDEN * BIG_LAYERS
# The estimate's GPU total (model states + activations + step buffers, allocator reserve, CUDA context) against the peak
# for the rank (NVML, as traindeck recorded it): PASS when the measured peak is between these fractions of it.
# The estimate counts DeepSpeed's step buffers, the allocator's reserve and the CUDA context for this case, so it
# is held to +-10% (tests/unit/estimate/test_estimate_measured.py holds the recorded H200 run to the same).
ESTIMATE_LOW, ESTIMATE_HIGH = 0.90, 1.10
BIG_ENOUGH = 10e9  # bytes: the estimate check's model must really use more than this on the GPU

# Every row of the table, in order: key, what is checked.
CHECKS: tuple[tuple[str, str], ...] = (
    ("machine", "machine: GPU, driver, CUDA, torch, DeepSpeed"),
    ("wheels", "carried wheels (DeepSpeed, pydantic, hjson) importable"),
    ("monitor", "NVML live: `traindeck monitor --once --json` reads util, memory, power, temperature, PCIe"),
    ("health", "GPU health from NVML: clock-event reasons, PCIe gen/width against the maximum, replays, ECC"),
    ("cpu_adam", "DeepSpeed's CPU Adam (ZeRO-Offload's optimizer) JIT-built against CUDA torch"),
    ("demo_run", "ZeRO-2 + CPU offload run of the demo model (`traindeck run`, DeepSpeed launcher) succeeds"),
    ("demo_on_gpu", "its rank is listed on the GPU while it runs (NVML through `traindeck monitor --run`)"),
    ("demo_recorded", "NVML recorded into the run: the rank's GPU memory among its samples (`runs show`)"),
    ("demo_gone", "after its end no process of the run is on the GPU (NVML), end check confirmed"),
    ("demo_steps", "its steps timed inside the rank on CUDA: phases, CUDA memory per step, the bound (`runs show`)"),
    ("estimate", f"estimate vs measured peak: ZeRO-2 bf16 AdamW, {BIG_PARAMS / 1e9:.2f}e9 params (> 10 GB)"),
    ("kept_estimate", "that run's kept estimate (`run --model-size`) beside its recorded peaks (`runs show`)"),
    ("oom", "a planted CUDA OOM is diagnosed as GPU memory, with the allocator's numbers"),
    ("stop", "`traindeck stop` frees the GPU: NVML lists no process of the run"),
)


# ---- the table ----------------------------------------------------------------------------------------------------
@dataclass
class Row:
    check: str
    result: str  # PASS | FAIL | INFO
    figures: str


def cell(text: str) -> str:
    """One markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(rows: Iterable[Row]) -> str:
    lines = ["| check | result | figures |", "| --- | --- | --- |"]
    lines += [f"| {cell(r.check)} | {cell(r.result)} | {cell(r.figures)} |" for r in rows]
    return "\n".join(lines) + "\n"


class Report:
    """The table in $OUT/gpu-acceptance.md, rewritten whole (atomically) after every change."""

    def __init__(self, path: Path, title: str) -> None:
        self.path = path
        self.title = title
        self.header: list[str] = []
        self.footer: list[str] = []
        self.rows = {key: Row(what, "FAIL", "not reached: the check ended before this step (its time budget or "
                                           "a crash; see gpu-check.log and console.log)") for key, what in CHECKS}
        self.write()

    def set(self, key: str, result: str, figures: str) -> None:
        if result not in ("PASS", "FAIL", "INFO"):
            raise ValueError(f"not a result: {result}")
        self.rows[key] = Row(self.rows[key].check, result, figures)
        self.write()
        print(f"  {result:4}  {self.rows[key].check}: {cell(figures)[:300]}", flush=True)

    def failed(self) -> list[str]:
        return [key for key, row in self.rows.items() if row.result == "FAIL"]

    def text(self) -> str:
        parts = [f"# {self.title}", ""]
        if self.header:
            parts += [*self.header, ""]
        parts.append(markdown_table(self.rows.values()).rstrip("\n"))
        if self.footer:
            parts += ["", *self.footer]
        return "\n".join(parts) + "\n"

    def write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(self.text(), encoding="utf-8")
        os.replace(tmp, self.path)


# ---- figures ------------------------------------------------------------------------------------------------------
def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:.0f} MiB"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def first_json(text: str) -> Any:
    """The first JSON object or list in a command's output (anything printed before it is skipped); None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^[ \t]*[\[{]", text, re.MULTILINE):
        try:
            return decoder.raw_decode(text, match.end() - 1)[0]
        except ValueError:
            continue
    return None


def probe_lines(text: str) -> dict[str, dict[str, Any]]:
    """gpu_probe.py's JSON lines in a run's output, rank tags and launcher prefixes ignored: the last line of each
    kind ("ready", "done"), "step" the first step's (the model states once Adam's moments exist)."""
    found: dict[str, dict[str, Any]] = {}
    decoder = json.JSONDecoder()
    for line in text.splitlines():
        at = line.find('{"probe"')
        if at < 0:
            continue
        try:
            data = decoder.raw_decode(line, at)[0]
        except ValueError:
            continue
        kind = data.get("probe")
        if kind == "step" and "step" in found:
            continue
        found[str(kind)] = data
    return found


def nvml_processes(sample: Mapping[str, Any]) -> tuple[dict[int, int | None], list[str]]:
    """From one `traindeck monitor --json` sample: every process NVML lists on any GPU (pid -> bytes), and why a
    GPU's list may be incomplete."""
    pids: dict[int, int | None] = {}
    unknown: list[str] = []
    for gpu in sample.get("gpus") or []:
        for proc in gpu.get("processes") or []:
            pids[int(proc["pid"])] = proc.get("used_memory_bytes")
        if gpu.get("processes_unknown"):
            unknown.append(f"GPU{gpu.get('index')}: {gpu['processes_unknown']}")
        if gpu.get("error"):
            unknown.append(f"GPU{gpu.get('index')}: {gpu['error']}")
    return pids, unknown


def smi_processes(text: str) -> dict[int, int | None]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`: pid -> bytes."""
    pids: dict[int, int | None] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts or not parts[0].isdigit():
            continue
        used = parts[1] if len(parts) > 1 else ""
        pids[int(parts[0])] = int(float(used) * MIB) if re.fullmatch(r"[\d.]+", used) else None
    return pids


def allocator_numbers(text: str) -> dict[str, str]:
    """The figures of PyTorch's CUDA OOM message ("Tried to allocate 95.00 GiB. GPU 0 has a total capacity of ...")."""
    patterns = {
        "tried": r"Tried to allocate ([\d.]+ \w+)",
        "device": r"(GPU \d+) has a total capacity",
        "capacity": r"total capacity of ([\d.]+ \w+)",
        "free": r"of which ([\d.]+ \w+) is free",
        "in_use": r"this process has ([\d.]+ \w+) memory in use",
        "allocated": r"([\d.]+ \w+) is allocated by PyTorch",
        "reserved_unallocated": r"([\d.]+ \w+) is reserved by PyTorch but unallocated",
    }
    found = {}
    for key, pattern in patterns.items():
        match = re.search(pattern, text)
        if match:
            found[key] = match.group(1)
    return found


# ---- verdicts -----------------------------------------------------------------------------------------------------
MONITOR_FIELDS = (("util", ("utilization_percent",)), ("memory", ("memory_used_bytes", "memory_total_bytes")),
                  ("power", ("power_w",)), ("temperature", ("temperature_c",)),
                  ("PCIe", ("pcie_h2d_bytes_per_s", "pcie_d2h_bytes_per_s")))


def judge_monitor(sample: Any) -> tuple[str, str]:
    """PASS when the first GPU of a `monitor --once --json` sample has every NVML figure (none null)."""
    if not isinstance(sample, dict):
        return "FAIL", "no JSON sample"
    gpus = sample.get("gpus") or []
    if not gpus:
        return "FAIL", f"no GPU in the sample: {sample.get('gpu_error') or 'no reason given'}"
    g = gpus[0]
    if g.get("error"):
        return "FAIL", f"GPU{g.get('index')} could not be read: {g['error']}"
    missing = [name for name, keys in MONITOR_FIELDS if any(g.get(k) is None for k in keys)]
    power = f"{g['power_w']:.0f}" if g.get("power_w") is not None else "-"
    limit = f"{g['power_limit_w']:.0f}" if g.get("power_limit_w") is not None else "-"
    rates = [g.get("pcie_h2d_bytes_per_s"), g.get("pcie_d2h_bytes_per_s")]
    pcie = "/".join("-" if r is None else f"{r / 1e6:.1f}" for r in rates)
    figures = (f"GPU{g.get('index')} {g.get('name')}: util {g.get('utilization_percent')} %, memory "
               f"{gib(g.get('memory_used_bytes'))} of {gib(g.get('memory_total_bytes'))}, power {power} of {limit} W, "
               f"{g.get('temperature_c')} C, SM {g.get('sm_clock_mhz')} MHz, PCIe H2D/D2H {pcie} MB/s "
               f"({g.get('pcie_source') or 'no source'}); processes "
               + (f"unknown ({g['processes_unknown']})" if g.get("processes_unknown")
                  else f"{len(g.get('processes') or [])} listed"))
    versions = sample.get("gpu_versions") or {}
    if versions:
        figures += "; " + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    if missing:
        return "FAIL", f"not read: {', '.join(missing)}; " + figures
    return "PASS", figures


def judge_health(sample: Any) -> tuple[str, str]:
    """PASS when the first GPU of a `monitor --once --json` sample has its health read: the clock-event (throttle)
    reasons answered and the PCIe link's generation and width with their maximum. ECC and the replay counter are
    figures only: consumer cards have no ECC, and some drivers refuse the counter."""
    gpus = (sample or {}).get("gpus") or [] if isinstance(sample, dict) else []
    if not gpus:
        return "FAIL", "no GPU in the sample"
    health = gpus[0].get("health")
    if not isinstance(health, dict):
        return "FAIL", "no health in the sample (NVML's health calls were not read)"
    link = health.get("pcie") or {}
    reasons = health.get("throttle") if health.get("throttle_known") else None
    ecc = health.get("ecc") or {}
    figures = (f"clock-event reasons: {', '.join(reasons) or 'none'}" if reasons is not None
               else "clock-event reasons: not read")
    figures += (f"; PCIe Gen{link.get('gen')} x{link.get('width')} of Gen{link.get('max_gen')} x{link.get('max_width')}"
                if link else "; PCIe link: not read")
    replays = health.get("pcie_replays")
    figures += f"; replays {replays if replays is not None else 'not read'}"
    figures += (f"; ECC {'on' if ecc.get('enabled') else 'off'}, uncorrected {ecc.get('volatile_uncorrected')}, "
                f"remapped rows {ecc.get('remapped_rows')}" if ecc else "; ECC: not read")
    figures += f"; XID events {len(health.get('xid') or [])}"
    ok = reasons is not None and all(link.get(k) for k in ("gen", "max_gen", "width", "max_width"))
    return ("PASS" if ok else "FAIL"), figures


def judge_recorded(resources: Any) -> tuple[str, str]:
    """PASS when the run's recording holds GPU samples with the ranks' own GPU memory (NVML's process list)."""
    if not isinstance(resources, dict):
        return "FAIL", "`runs show --json` has no resources"
    if "error" in resources:
        return "FAIL", f"resources could not be read: {resources['error']}"
    samples = resources.get("samples") or 0
    run_peak = resources.get("peak_run_gpu_mem_bytes")
    figures = (f"{samples} samples every {resources.get('interval_s')} s; the ranks' GPU memory peak {mib(run_peak)} "
               f"(NVML per process), the fullest GPU's peak {mib(resources.get('peak_gpu_mem_bytes'))}; "
               f"{resources.get('gpu_count')} GPU(s), the run's: {resources.get('run_gpus')}; PCIe from "
               f"{resources.get('pcie_source')}")
    versions = resources.get("gpu_versions") or {}
    if versions:
        figures += "; " + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    if resources.get("gpu_error"):
        figures += f"; gpu_error: {resources['gpu_error']}"
    ok = samples > 0 and (resources.get("gpu_count") or 0) >= 1 and bool(run_peak)
    return ("PASS" if ok else "FAIL"), figures


def zero2_row(estimate: Any) -> dict[str, Any] | None:
    """The ZeRO-2 (no offload) row of `traindeck estimate --json`."""
    rows = estimate if isinstance(estimate, list) else (estimate or {}).get("strategies", [])
    for row in rows:
        if (row.get("framework") == "deepspeed" and row.get("zero_stage") == 2
                and row.get("offload_optimizer") == "none"):
            return row
    return None


def judge_estimate(row: Mapping[str, Any] | None, probe: Mapping[str, Mapping[str, Any]],
                   resources: Mapping[str, Any] | None, state: str | None) -> tuple[str, str]:
    """The estimate's GPU total against the peak NVML saw for the rank (traindeck's recording); CUDA's allocator
    figures (the probe's own) beside the model states and activations they correspond to."""
    if row is None:
        return "FAIL", "`traindeck estimate --json` gave no ZeRO-2 row"
    done = probe.get("done") or {}
    first = probe.get("step") or {}
    total = row.get("gpu_total_bytes_per_device")
    states = row.get("gpu_bytes_per_device")
    activations = row.get("activation_bytes_per_device") or 0
    resources = resources or {}
    nvml = resources.get("peak_run_gpu_mem_bytes")
    nvml_what = "the rank's NVML peak"
    if not nvml:
        nvml, nvml_what = resources.get("peak_gpu_mem_bytes"), "the GPU's NVML peak (no per-process figure)"
    allocated = done.get("max_allocated_bytes")
    r_nvml = ratio(nvml, total)
    r_alloc = ratio(allocated, (states or 0) + activations)
    parts = [f"estimate: model states {gib(states)} + activations {gib(activations)} + overhead "
             f"{gib(row.get('overhead_bytes_per_device'))} = GPU total {gib(total)}",
             f"measured ({probe.get('ready', {}).get('params', '?')} params, run {state}): {nvml_what} {gib(nvml)}"
             + (f" (x{r_nvml:.2f} of the GPU total)" if r_nvml is not None else ""),
             f"torch peak allocated {gib(allocated)}"
             + (f" (x{r_alloc:.2f} of states + activations)" if r_alloc is not None else "")
             + f", peak reserved {gib(done.get('max_reserved_bytes'))}, allocated after set-up "
               f"{gib(probe.get('ready', {}).get('allocated_bytes'))} and after step 1 {gib(first.get('allocated_bytes'))}",
             f"PASS when the NVML peak is x{ESTIMATE_LOW}-x{ESTIMATE_HIGH} of the GPU total and above 10 GB"]
    figures = "; ".join(parts)
    if state != "succeeded":
        return "FAIL", f"the run did not succeed ({state}); " + figures
    if r_nvml is None:
        return "FAIL", "no GPU memory recorded; " + figures
    big = max(nvml or 0, allocated or 0) > BIG_ENOUGH
    ok = ESTIMATE_LOW <= r_nvml <= ESTIMATE_HIGH and big
    return ("PASS" if ok else "FAIL"), figures


def judge_steps(show: Mapping[str, Any] | None, want_steps: int) -> tuple[str, str]:
    """The run's step anatomy (`runs show`'s step_anatomy): rank 0 timed nearly every step, with CUDA memory
    read inside the rank, its phases adding up to its step, and a bound named."""
    anatomy = (show or {}).get("step_anatomy") or {}
    rank = (anatomy.get("ranks") or {}).get("0")
    if not rank:
        return "FAIL", f"no timed step of rank 0: {anatomy.get('summary') or 'no step_anatomy in runs show'}"
    phases = {k[:-3]: v for k, v in rank.items() if k.endswith("_ms") and k != "step_ms"}
    parts = ", ".join(f"{k} {v:.1f}" for k, v in phases.items() if v)
    figures = (f"{rank['steps']} steps of rank 0; median ms: {parts} of {rank['step_ms']:.1f}; GPU peak allocated "
               f"{mib(rank.get('peak_gpu_allocated_bytes'))}, reserved {mib(rank.get('peak_gpu_reserved_bytes'))}; "
               f"{anatomy.get('summary')}")
    ok = (rank["steps"] >= 0.9 * want_steps and rank.get("peak_gpu_allocated_bytes")
          and anatomy.get("bound") and phases.get("forward", 0) > 0 and phases.get("optimizer", 0) > 0)
    return ("PASS" if ok else "FAIL"), figures


def judge_kept(show: Mapping[str, Any] | None) -> tuple[str, str]:
    """INFO: the estimate `run --model-size` kept (its own workload assumptions) beside the recorded peaks; FAIL
    when none was kept or the GPU's measured figure is missing."""
    show = show or {}
    kept = show.get("estimate")
    if not kept:
        return "FAIL", "no estimate kept with the run (`runs show` estimate is null)"
    pairs = show.get("estimate_vs_measured") or []
    assumed = list(kept.get("assumptions") or [])
    text = [f"kept: {kept.get('label')}, {kept.get('verdict')}, GPU total {gib(kept.get('gpu_total_bytes_per_device'))}"
            + (f" ({assumed[0]}; {len(assumed) - 1} more assumptions)" if assumed else "")]
    for pair in pairs:
        measured = pair.get("measured_bytes")
        text.append(f"{pair.get('what')}: estimated {gib(pair.get('estimated_bytes'))}, measured {gib(measured)}"
                    + (f" (x{pair['measured_over_estimate']:.2f})" if pair.get("measured_over_estimate") else ""))
    gpu = [p for p in pairs if "gpu" in str(p.get("what", "")).lower()]
    if not gpu or gpu[0].get("measured_bytes") is None:
        return "FAIL", "no GPU figure measured beside the kept estimate; " + "; ".join(text)
    return "INFO", "; ".join(text)


def judge_oom(show: Mapping[str, Any] | None) -> tuple[str, str]:
    """PASS when the run failed, its diagnosis blames GPU memory (memory "cuda") and quotes the allocator."""
    show = show or {}
    diagnosis = show.get("diagnosis") or {}
    if not diagnosis:
        return "FAIL", f"no diagnosis (state {show.get('state')})"
    quoted = " ".join([diagnosis.get("summary", ""), *diagnosis.get("evidence", [])])
    numbers = allocator_numbers(quoted)
    figures = (f"{diagnosis.get('summary')} kind {diagnosis.get('kind')}, memory {diagnosis.get('memory')!r}; "
               "allocator: " + (", ".join(f"{k} {v}" for k, v in numbers.items()) or "no figures quoted"))
    ok = (show.get("state") == "failed" and diagnosis.get("memory") == "cuda"
          and {"tried", "capacity"} <= numbers.keys())
    return ("PASS" if ok else "FAIL"), figures


# ---- commands -----------------------------------------------------------------------------------------------------
@dataclass
class Done:
    argv: list[str]
    rc: int | None
    out: str
    err: str
    seconds: float
    timed_out: bool = False
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.skipped

    def why(self) -> str:
        """Why it failed, in one line: skipped, out of time, or the exit status and the output's last line."""
        if self.skipped:
            return self.skipped
        if self.timed_out:
            return f"`{self.short()}` did not end within {self.seconds:.0f} s (killed)"
        lines = [line.strip() for line in (self.err + "\n" + self.out).splitlines() if line.strip()]
        return f"`{self.short()}` exited with {self.rc}: {lines[-1][:300] if lines else 'no output'}"

    def short(self) -> str:
        argv = self.argv[2:] if self.argv[1:3] == ["-m", "traindeck"] else self.argv
        text = " ".join(argv)
        return text if len(text) <= 80 else text[:77] + "..."


class Runner:
    """Runs commands from the repository root, each in its own process group with its own time limit (capped by
    the deadline), and logs each one to gpu-check.log."""

    def __init__(self, log: Path, deadline: float, python: str = sys.executable) -> None:
        self.log = log
        self.deadline = deadline  # time.monotonic()
        self.python = python
        self.started = time.monotonic()
        self.reserve = 20.0  # seconds kept back from the steps for the clean-up (stopping runs still going)

    def left(self, essential: bool = False) -> float:
        """Seconds left to the deadline; an essential command (stopping a run) may use the clean-up's reserve."""
        return self.deadline - (0.0 if essential else self.reserve) - time.monotonic()

    def note(self, text: str) -> None:
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"[{time.monotonic() - self.started:6.1f}s] {text}\n")

    def run(self, argv: Sequence[str], limit: float, env: Mapping[str, str] | None = None,
            essential: bool = False) -> Done:
        argv = list(argv)
        left = self.left(essential)
        timeout = min(limit, left)
        if left < 3:
            done = Done(argv, None, "", "", 0.0, skipped=f"not run: the check's time budget is spent "
                                                         f"({max(0.0, left):.0f} s left)")
            self.note(f"$ {' '.join(argv)}\n  {done.skipped}")
            return done
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True, env={**os.environ, **(env or {})})
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        done = Done(argv, proc.returncode, out, err, time.monotonic() - t0, timed_out)
        self.note(f"$ {' '.join(argv)}  (limit {timeout:.0f} s)\n  rc={done.rc}{' TIMED OUT' if timed_out else ''}"
                  f" in {done.seconds:.1f} s\n" + _tail("stdout", out) + _tail("stderr", err))
        return done

    def td(self, *args: str, limit: float, essential: bool = False) -> Done:
        return self.run([self.python, "-m", "traindeck", *args], limit, essential=essential)


def _tail(name: str, text: str, keep: int = 4000) -> str:
    if not text.strip():
        return ""
    body = text if len(text) <= keep else "...\n" + text[-keep:]
    return f"  --- {name}\n" + "".join(f"  | {line}\n" for line in body.splitlines())


# ---- the check ----------------------------------------------------------------------------------------------------
class Check:
    def __init__(self, out: Path, work: Path, deadline: float, wheels_rc: int, source: str) -> None:
        self.out = out
        self.work = work
        (work / "configs").mkdir(parents=True, exist_ok=True)
        self.runner = Runner(out / LOG, deadline)
        self.report = Report(out / REPORT, f"traindeck GPU acceptance, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        if source:
            self.report.header.append(f"Source: {source}")
        self.wheels_rc = wheels_rc
        self.runs: dict[str, dict[str, Any]] = {}  # name -> `runs show --json`, kept in runs.json
        self.launched: list[str] = []  # every run id started, for the clean-up
        self.cpu_adam = False

    # -- helpers --
    def config(self, name: str, data: Mapping[str, Any]) -> str:
        path = self.work / "configs" / f"{name}.json"
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        return str(path)

    def show(self, run_id: str) -> dict[str, Any] | None:
        done = self.runner.td("runs", "show", run_id, "--json", limit=40)
        data = first_json(done.out) if done.ok else None
        return data if isinstance(data, dict) else None

    def sample(self, run_id: str | None = None) -> dict[str, Any] | None:
        args = ["monitor", "--once", "--json"] + (["--run", run_id] if run_id else [])
        done = self.runner.td(*args, limit=40)
        data = first_json(done.out) if done.ok else None
        return data if isinstance(data, dict) else None

    def smi(self) -> dict[int, int | None] | None:
        done = self.runner.run([SMI, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                               limit=20)
        return smi_processes(done.out) if done.ok else None

    def launch(self, name: str, config: str, script: Sequence[str], extra: Sequence[str] = ()) -> tuple[str | None, str]:
        """`traindeck run --detach` with the DeepSpeed launcher on one GPU: the run id, or None and why."""
        done = self.runner.td("run", "--detach", "--launcher", "deepspeed", "--nproc", "1", "--config", config,
                              "--name", name, *extra, *script, "--deepspeed_config", "{ds_config}", limit=120)
        lines = [line.strip() for line in done.out.splitlines() if line.strip()]
        if not done.ok or not lines:
            return None, done.why()
        self.launched.append(lines[-1])
        return lines[-1], ""

    def wait_end(self, run_id: str, limit: float) -> dict[str, Any] | None:
        """`runs show` once the run is in a final state and its end check is written (or the limit is reached;
        the run is then stopped so it cannot hold the GPU for the next steps)."""
        t0 = time.monotonic()
        data = None
        final_at = None
        while time.monotonic() - t0 < limit and self.runner.left() > 5:
            data = self.show(run_id)
            if data and data.get("state") in FINAL_STATES:
                final_at = final_at or time.monotonic()
                if data.get("end_check") or time.monotonic() - final_at > 10:
                    return data
            time.sleep(2)
        self.runner.note(f"run {run_id} did not end within {time.monotonic() - t0:.0f} s"
                         f"{_cut(limit, t0)}: stopping it")
        self.runner.td("stop", run_id, "--grace", "2", limit=40, essential=True)
        return self.show(run_id) or data

    def keep(self, name: str, run_id: str, data: dict[str, Any] | None) -> str:
        """Keeps the run's `runs show` JSON and its output (the end of it) beside the table; returns the output."""
        self.runs[name] = data or {"id": run_id, "error": "`runs show` gave nothing"}
        (self.out / "runs.json").write_text(json.dumps(self.runs, indent=2), encoding="utf-8")
        logs = self.runner.td("logs", run_id, limit=40)
        text = logs.out if logs.ok else logs.why()
        with (self.out / "runs-output.log").open("a", encoding="utf-8") as f:
            f.write(f"===== {name} ({run_id}) =====\n{text[-300_000:]}\n")
        return text

    def watch_on_gpu(self, run_id: str, limit: float) -> dict[str, Any]:
        """Samples the run (`monitor --once --json --run`) until NVML lists one of its ranks on a GPU: which pids
        the run had, the rank seen there with its memory, and nvidia-smi's own list at that moment."""
        seen: dict[str, Any] = {"pids": set(), "rank": None, "nvml": {}, "smi": None, "unknown": [], "why": ""}
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit and self.runner.left() > 10:
            data = self.sample(run_id)
            if data is None:
                show = self.show(run_id)
                if show and show.get("state") in FINAL_STATES:
                    seen["why"] = f"the run ended ({show.get('state')}) before a rank was seen on the GPU"
                    break
                time.sleep(1)
                continue
            processes = data.get("processes") or []
            seen["pids"].update(int(p["pid"]) for p in processes)
            nvml, unknown = nvml_processes(data)
            seen["unknown"] = unknown
            ranks = [p for p in processes if p.get("role") == "rank"]
            on_gpu = [p for p in ranks if int(p["pid"]) in nvml]
            if on_gpu:
                rank = on_gpu[0]
                seen.update(rank=rank, nvml=nvml, smi=self.smi())
                break
            time.sleep(0.5)
        else:
            seen["why"] = (seen["why"] or f"no rank on the GPU within {time.monotonic() - t0:.0f} s"
                           + _cut(limit, t0))
        return seen

    def wait_gpu_free(self, pids: set[int], limit: float) -> dict[str, Any]:
        """Polls NVML (traindeck monitor) and nvidia-smi until none of `pids` is listed on a GPU."""
        t0 = time.monotonic()
        left: dict[str, Any] = {}
        while True:
            data = self.sample()
            nvml, unknown = nvml_processes(data or {})
            smi = self.smi() or {}
            left = {"nvml": sorted(pids & nvml.keys()), "smi": sorted(pids & smi.keys()), "all_nvml": len(nvml),
                    "unknown": unknown, "read": bool((data or {}).get("gpus")), "after_s": time.monotonic() - t0}
            free = left["read"] and not unknown and not left["nvml"] and not left["smi"]
            if free or time.monotonic() - t0 > limit or self.runner.left() < 10:
                left["free"] = free
                return left
            time.sleep(1)

    # -- steps --
    def machine(self) -> None:
        smi = self.runner.run([SMI, "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"], limit=30)
        code = ("import json, sys, importlib\n"
                "v = {'python': sys.version.split()[0]}\n"
                "for name in ('torch', 'deepspeed', 'pydantic', 'hjson', 'accelerate', 'transformers', 'pynvml'):\n"
                "    try:\n"
                "        m = importlib.import_module(name); v[name] = getattr(m, '__version__', 'present')\n"
                "    except Exception as exc:\n"
                "        v[name] = None; v[name + '_error'] = f'{type(exc).__name__}: {exc}'[:200]\n"
                "import torch\n"
                "v['cuda'] = torch.version.cuda; v['cuda_available'] = torch.cuda.is_available()\n"
                "print(json.dumps(v))\n")
        versions = self.runner.run([sys.executable, "-c", code], limit=120)
        v = first_json(versions.out) if versions.ok else None
        v = v if isinstance(v, dict) else {}
        gpu = smi.out.strip().replace("\n", "; ") if smi.ok else smi.why()
        figures = (f"{gpu}; torch {v.get('torch')} (CUDA {v.get('cuda')}, available {v.get('cuda_available')}); "
                   f"DeepSpeed {v.get('deepspeed')}; accelerate {v.get('accelerate')}; transformers "
                   f"{v.get('transformers')}; Python {v.get('python')}")
        self.report.header.append(f"Machine: {figures}")
        self.report.set("machine", "INFO" if v else "FAIL", figures if v else versions.why())
        missing = [f"{name} ({v.get(name + '_error')})" for name in ("deepspeed", "pydantic", "hjson") if not v.get(name)]
        wheels = "installed" if self.wheels_rc == 0 else f"install failed (exit {self.wheels_rc}: see prepare.log)"
        if missing:
            self.report.set("wheels", "FAIL", f"wheels {wheels}; not importable: {', '.join(missing)}")
        else:
            self.report.set("wheels", "PASS" if self.wheels_rc == 0 else "FAIL",
                            f"wheels {wheels}; DeepSpeed {v.get('deepspeed')}, pydantic {v.get('pydantic')}, "
                            f"hjson {v.get('hjson')}")

    def monitor(self) -> None:
        """One `monitor --once --json`; a second one if only PCIe was missing (its reader has its own thread and
        `--once` waits at most a second for its first reading), judged on its own."""
        done = self.runner.td("monitor", "--once", "--json", limit=60)
        (self.out / "monitor.json").write_text(done.out or done.err, encoding="utf-8")
        if not done.ok:
            self.report.set("monitor", "FAIL", done.why())
            return
        result, figures = judge_monitor(first_json(done.out))
        if result == "FAIL" and figures.startswith("not read: PCIe;"):
            again = self.runner.td("monitor", "--once", "--json", limit=60)
            with (self.out / "monitor.json").open("a", encoding="utf-8") as f:
                f.write(again.out or again.err)
            if again.ok:
                result, figures = judge_monitor(first_json(again.out))
                figures = "second sample (the first had no PCIe figure): " + figures
        self.report.set("monitor", result, figures)
        self.report.set("health", *judge_health(first_json(done.out)))

    def build_cpu_adam(self) -> None:
        code = ("import time; t = time.time()\n"
                "from deepspeed.ops.op_builder import CPUAdamBuilder\n"
                "CPUAdamBuilder().load()\n"
                "print(f'cpu_adam loaded in {time.time() - t:.0f} s')\n")
        done = self.runner.run([sys.executable, "-c", code], limit=150)
        self.cpu_adam = done.ok
        folder = os.environ.get("TORCH_EXTENSIONS_DIR", "?")
        if done.ok:
            self.report.set("cpu_adam", "PASS", f"built and loaded in {done.seconds:.0f} s (into {folder})")
        else:
            self.report.set("cpu_adam", "FAIL", done.why() + "; the demo run uses torch's AdamW on the CPU instead")

    def demo(self) -> None:
        optimizer: dict[str, Any] = {"type": "AdamW", "params": {"lr": 1e-3}}
        if not self.cpu_adam:
            optimizer["params"]["torch_adam"] = True  # no CPU Adam: ZeRO-Offload steps with torch's AdamW
        # fp32, as the demo feeds fp32 input (a bf16 engine would refuse it); the offload is what is checked here.
        config = self.config("demo_zero2_offload", {
            "train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": 1, "optimizer": optimizer,
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                  "contiguous_gradients": True, "overlap_comm": True},
            "steps_per_print": 50, "log_level": "info"})  # info: DeepSpeed names the optimizer it made
        run_id, why = self.launch("gpu-demo", config, ["resources/demo/train_tiny.py", "--steps", "150",
                                                       "--step-time", "0.1", "--no-tqdm"])
        if run_id is None:
            for key in ("demo_run", "demo_on_gpu", "demo_recorded", "demo_gone"):
                self.report.set(key, "FAIL", f"not started: {why}")
            return
        seen = self.watch_on_gpu(run_id, limit=60)
        show = self.wait_end(run_id, limit=90)
        output = self.keep("gpu-demo", run_id, show)
        show = show or {}
        state = show.get("state")
        basic = re.findall(r"Basic Optimizer = (\w+)", output)
        progress = show.get("progress") or {}
        loss = (show.get("metrics") or {}).get("loss")
        took = _took(show)
        figures = (f"run {run_id} {state}{took}; steps {progress.get('current')}/{progress.get('total')}, loss "
                   f"{loss if loss is None else round(loss, 4)}; optimizer {basic[-1] if basic else 'not logged'}")
        if state != "succeeded":
            figures += f"; diagnosis: {(show.get('diagnosis') or {}).get('summary')}"
        self.report.set("demo_run", "PASS" if state == "succeeded" else "FAIL", figures)

        rank = seen["rank"]
        if rank is not None:
            pid = int(rank["pid"])
            smi = seen["smi"]
            smi_text = ("nvidia-smi: not read" if smi is None else
                        f"nvidia-smi lists it with {mib(smi[pid])}" if pid in smi else "nvidia-smi does not list it")
            self.report.set("demo_on_gpu", "PASS",
                            f"rank {rank.get('rank')} (pid {pid}) on the GPU: NVML {mib(seen['nvml'].get(pid))}, "
                            f"traindeck's process row {mib(rank.get('gpu_memory_bytes'))}; {smi_text}; "
                            f"{len(seen['nvml'])} process(es) on the GPU in all")
        else:
            self.report.set("demo_on_gpu", "FAIL", (seen["why"] or "not seen") + (
                f"; NVML's list incomplete: {'; '.join(seen['unknown'])}" if seen["unknown"] else ""))
        self.report.set("demo_recorded", *judge_recorded(show.get("resources")))
        self.report.set("demo_gone", *self.gone(show, seen["pids"], seen["rank"] is not None))
        self.report.set("demo_steps", *judge_steps(show, want_steps=150))

    def gone(self, show: Mapping[str, Any], pids: set[int], was_there: bool) -> tuple[str, str]:
        """After a run's end: NVML (traindeck and nvidia-smi) lists none of its processes, which it did list while
        the run ran (else the check proves nothing); the run's end check says the same."""
        pids = set(pids) | {int(p["pid"]) for p in show.get("pids") or [] if p.get("pid")}
        if show.get("state") not in FINAL_STATES:
            return "FAIL", f"the run did not end (state {show.get('state')})"
        left = self.wait_gpu_free(pids, limit=15)
        end = show.get("end_check") or {}
        figures = (("" if was_there else "its rank was never seen on the GPU, so its absence proves nothing; ")
                   + f"after {left['after_s']:.0f} s: the run's processes on the GPU: NVML {left['nvml'] or 'none'}, "
                   f"nvidia-smi {left['smi'] or 'none'} ({left['all_nvml']} process(es) on the GPU in all; "
                   f"{len(pids)} pid(s) of the run checked); end check: {end.get('kind')}: {end.get('text')}")
        if not left["read"]:
            figures = "NVML listed no GPU; " + figures
        if left["unknown"]:
            figures += f"; NVML's list incomplete: {'; '.join(left['unknown'])}"
        ok = was_there and left["free"] and end.get("kind") == "confirmed"
        return ("PASS" if ok else "FAIL"), figures

    def probe_config(self, name: str) -> str:
        # torch's fused AdamW on the GPU (torch_adam; DeepSpeed passes "fused" on to it): no CUDA op to JIT-build
        # with nvcc first, as DeepSpeed's FusedAdam would be (minutes), and like it no step-sized temporaries, which
        # torch's default foreach AdamW would add to the peak (a sqrt of the moment: 4 bytes per parameter).
        return self.config(name, {
            "train_micro_batch_size_per_gpu": MICRO_BATCH, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True, "fused": True}},
            "zero_optimization": {"stage": 2, "contiguous_gradients": True, "overlap_comm": False},
            "steps_per_print": 1})

    def estimate(self) -> None:
        est = self.runner.td("estimate", "--params", str(BIG_PARAMS), "--hidden-size", str(BIG_HIDDEN), "--layers",
                             str(BIG_LAYERS), "--largest-layer", str(BIG_HIDDEN * BIG_HIDDEN), "--gpus-per-node", "1",
                             "--precision", "bf16", "--optimizer", "adamw", "--micro-batch", str(MICRO_BATCH),
                             "--seq-len", "1", "--json", limit=60)
        row = zero2_row(first_json(est.out)) if est.ok else None
        run_id, why = self.launch("gpu-estimate", self.probe_config("probe_zero2"),
                                  ["tests/gpu/gpu_probe.py", "--hidden", str(BIG_HIDDEN), "--layers", str(BIG_LAYERS),
                                   "--micro-batch", str(MICRO_BATCH), "--steps", "3", "--hold", "4"],
                                  extra=["--model-size", str(BIG_PARAMS)])
        if run_id is None:
            self.report.set("estimate", "FAIL", f"not started: {why}"
                            + ("" if est.ok or est.why() == why else f"; {est.why()}"))
            self.report.set("kept_estimate", "FAIL", f"not started: {why}")
            return
        show = self.wait_end(run_id, limit=180)
        output = self.keep("gpu-estimate", run_id, show)
        show = show or {}
        result, figures = judge_estimate(row, probe_lines(output), show.get("resources"), show.get("state"))
        if row is None and not est.ok:
            figures = est.why() + "; " + figures
        self.report.set("estimate", result, figures)
        self.report.set("kept_estimate", *judge_kept(show))

    def oom(self) -> None:
        run_id, why = self.launch("gpu-oom", self.probe_config("probe_small"),
                                  ["tests/gpu/gpu_probe.py", "--hidden", "1024", "--layers", "4", "--steps", "3", "--oom"])
        if run_id is None:
            self.report.set("oom", "FAIL", f"not started: {why}")
            return
        show = self.wait_end(run_id, limit=90)
        self.keep("gpu-oom", run_id, show)
        self.report.set("oom", *judge_oom(show))

    def stop(self) -> None:
        run_id, why = self.launch("gpu-stop", self.probe_config("probe_small"),
                                  ["tests/gpu/gpu_probe.py", "--hidden", "1024", "--layers", "4", "--steps", "0",
                                   "--sleep", "0.2"])
        if run_id is None:
            self.report.set("stop", "FAIL", f"not started: {why}")
            return
        seen = self.watch_on_gpu(run_id, limit=60)
        stop = self.runner.td("stop", run_id, limit=60, essential=True)
        said = [line.strip() for line in stop.out.splitlines() if line.strip()]
        show = self.wait_end(run_id, limit=30) or {}
        self.keep("gpu-stop", run_id, show)
        pids = set(seen["pids"]) | {int(p["pid"]) for p in show.get("pids") or [] if p.get("pid")}
        left = self.wait_gpu_free(pids, limit=15)
        rank = seen["rank"]
        before = (f"rank pid {rank['pid']} on the GPU with {mib(seen['nvml'].get(int(rank['pid'])))}" if rank
                  else f"no rank seen on the GPU before the stop ({seen['why']})")
        figures = (f"before: {before}; `traindeck stop` took {stop.seconds:.1f} s, exit {stop.rc}: "
                   f"{said[-1] if said else stop.why()}; state {show.get('state')} ({show.get('state_detail')}); "
                   f"after {left['after_s']:.0f} s: the run's processes on the GPU: NVML {left['nvml'] or 'none'}, "
                   f"nvidia-smi {left['smi'] or 'none'} ({left['all_nvml']} on the GPU in all)")
        if left["unknown"]:
            figures += f"; NVML's list incomplete: {'; '.join(left['unknown'])}"
        ok = rank is not None and stop.ok and left["free"]
        self.report.set("stop", "PASS" if ok else "FAIL", figures)

    def cleanup(self) -> None:
        """Stops any run of the check still going, so nothing holds the GPU after the call (the steps' reserve)."""
        self.runner.reserve = 0.0
        for run_id in self.launched:
            show = self.show(run_id)
            if show is None or show.get("state") not in FINAL_STATES:
                self.runner.note(f"cleanup: stopping {run_id} ({(show or {}).get('state')})")
                self.runner.td("stop", run_id, "--grace", "2", limit=30, essential=True)

    def run_all(self) -> int:
        t0 = time.monotonic()
        steps: list[tuple[Callable[[], None], tuple[str, ...]]] = [
            (self.machine, ("machine", "wheels")), (self.monitor, ("monitor",)), (self.build_cpu_adam, ("cpu_adam",)),
            (self.demo, ("demo_run", "demo_on_gpu", "demo_recorded", "demo_gone", "demo_steps")),
            (self.estimate, ("estimate", "kept_estimate")), (self.oom, ("oom",)), (self.stop, ("stop",))]
        for step, keys in steps:
            print(f"[{time.monotonic() - t0:5.0f}s] {step.__name__} ({self.runner.left():.0f} s left)", flush=True)
            try:
                step()
            except Exception as exc:  # one broken step must not cost the others their rows
                self.runner.note(f"{step.__name__} raised {type(exc).__name__}: {exc}")
                for key in keys:
                    if self.report.rows[key].figures.startswith("not reached"):
                        self.report.set(key, "FAIL", f"the step raised {type(exc).__name__}: {exc}")
        self.cleanup()
        failed = self.report.failed()
        self.report.footer.append(f"{len(CHECKS) - len(failed)} of {len(CHECKS)} rows without FAIL; the check took "
                                  f"{time.monotonic() - t0:.0f} s. Logs: gpu-check.log (every command), "
                                  "runs-output.log, runs.json, monitor.json, prepare.log, console.log.")
        self.report.write()
        return 1 if failed else 0


def _cut(limit: float, t0: float) -> str:
    """Why a wait ended before its own limit: the check's deadline."""
    return " (the check's time budget ran out)" if time.monotonic() - t0 < limit - 1 else ""


def _took(show: Mapping[str, Any]) -> str:
    try:
        from datetime import datetime

        start = datetime.fromisoformat(show["started_at"])
        end = datetime.fromisoformat(show["ended_at"])
        return f" after {(end - start).total_seconds():.0f} s"
    except (KeyError, TypeError, ValueError):
        return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="where the table and the logs go ($OUT)")
    p.add_argument("--work", required=True, help="a scratch folder (configs)")
    p.add_argument("--deadline", type=float, required=True, help="when everything must be done (Unix time)")
    p.add_argument("--wheels-rc", type=int, default=0, help="the wheels' install status (acceptance.sh)")
    p.add_argument("--source", default="", help="a file saying which commit the tree is (.gpu/source.txt)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = ""
    if args.source and Path(args.source).is_file():
        source = Path(args.source).read_text(encoding="utf-8").strip()
    deadline = time.monotonic() + (args.deadline - time.time())
    return Check(out, Path(args.work), deadline, args.wheels_rc, source).run_all()


if __name__ == "__main__":
    sys.exit(main())

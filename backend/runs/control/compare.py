"""Runs side by side: their configs as they were launched (the run directories' snapshots) and their figures, for
two runs (`compare_runs`: A and B, B's ratio to A) or up to eight (`compare_many`: one column a run, each figure's
ratio to the first), and one metric's curves of several runs over steps (`overlay`), optionally cut to the last step
they all reached so that "final" means the same step for each.

The config snapshot of a run is what its run directory holds: accelerate_config.yaml, ds_config.json and the launch
command (command.json). Paths inside the run directory and the rendezvous port differ between any two runs, so they
are written as "<run dir>" and "<port>" before comparing: what remains is what the user chose differently.
"""

from __future__ import annotations

import bisect
import difflib
import json
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from traindeck.backend.core import format_bytes
from traindeck.backend.runs.control.history import (
    RunFigures,
    format_duration,
    format_rate,
    format_seconds_per_step,
    run_figures,
)
from traindeck.backend.runs.control.history_table import MAX_COMPARED, default_metric
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

ACCELERATE_FILE = "accelerate_config.yaml"
DEEPSPEED_FILE = "ds_config.json"
COMMAND_FILE = "command.json"
RUN_DIR_MARK = "<run dir>"
ENGINE_ROW = "DeepSpeed's engine figure (forward/backward/step only)"
RUN_LETTERS = "ABCDEFGH"
PORT_MARK = "<port>"


@dataclass(frozen=True)
class ConfigSnapshot:
    """A run's launch configuration, normalised: {file label: text} and the flattened keys."""

    texts: dict[str, str]  # "accelerate_config.yaml" / "ds_config.json" / "command" -> normalised text
    values: dict[str, Any]  # "accelerate.num_processes", "deepspeed.zero_optimization.stage", "launch.nproc" ...
    problems: tuple[str, ...] = ()  # files that could not be read


@dataclass(frozen=True)
class ConfigDifference:
    key: str  # dotted: "deepspeed.zero_optimization.stage"
    a: Any
    b: Any
    in_a: bool = True
    in_b: bool = True

    def text(self, which: str) -> str:
        present, value = (self.in_a, self.a) if which == "a" else (self.in_b, self.b)
        if not present:
            return "(not set)"
        return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class ArgvChange:
    """One place where two commands' argument lists differ: A's elements there and B's (either may be empty), and
    the option they are the value of ("--steps" for "--steps 100" vs "--steps 600"; "" when there is none)."""

    position: int  # 0-based index of the first differing element in A's argv
    a: tuple[str, ...]
    b: tuple[str, ...]
    option: str = ""

    @property
    def key(self) -> str:
        """The name this change goes by in a list of config differences: "launch.argv --steps" or "launch.argv[7]"."""
        return f"launch.argv {self.option}" if self.option else f"launch.argv[{self.position}]"


def argv_changes(a: Sequence[str], b: Sequence[str]) -> list[ArgvChange]:
    """Two argument lists compared element by element (a sequence match, so an inserted flag does not make every
    later element differ). An element that is an option's value is named by that option; "--k=v" by "--k"."""
    out: list[ArgvChange] = []
    matcher = difflib.SequenceMatcher(a=list(a), b=list(b), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)  # a replaced stretch: element by element, then what is left over
        for k in range(paired):
            old, new = a[i1 + k], b[j1 + k]
            option = ""
            if i1 + k > 0 and a[i1 + k - 1] == b[j1 + k - 1] and a[i1 + k - 1].startswith("-"):
                option = a[i1 + k - 1]  # "--steps", then its value
            elif old.startswith("-") and "=" in old and old.split("=", 1)[0] == new.split("=", 1)[0]:
                option = old.split("=", 1)[0]  # "--steps=100" vs "--steps=600"
            out.append(ArgvChange(i1 + k, (old,), (new,), option))
        if i2 - i1 > paired or j2 - j1 > paired:
            out.append(ArgvChange(i1 + paired, tuple(a[i1 + paired:i2]), tuple(b[j1 + paired:j2])))
    return out


@dataclass(frozen=True)
class FigureRow:
    """One line of the figures table: what, A and B as text, and B relative to A where both are numbers."""

    what: str
    a: str
    b: str
    change: str = ""


@dataclass(frozen=True)
class RunComparison:
    a: RunFigures
    b: RunFigures
    differences: list[ConfigDifference]  # the command's arguments compared element by element (launch.argv ...)
    same: int  # keys set to the same value in both
    unified_diff: str  # of the normalised config files; "" when they are the same
    figures: list[FigureRow]
    metrics: list[FigureRow]  # final metrics, every name either run reported
    problems: tuple[str, ...] = field(default=())

    def with_figures(self, runs: Mapping[str, RunFigures]) -> RunComparison:
        """The same comparison with the runs' figures as `runs` (by id) now has them: a live run's steps, duration
        and final metrics follow the history's reads without reading the configs again."""
        a, b = runs.get(self.a.run_id, self.a), runs.get(self.b.run_id, self.b)
        return replace(self, a=a, b=b, figures=figure_rows(a, b), metrics=metric_rows(a, b))


def _normalise(text: str, run_dir: str, port: Any) -> str:
    if run_dir:
        text = text.replace(str(Path(run_dir).resolve()), RUN_DIR_MARK).replace(run_dir.rstrip("/"), RUN_DIR_MARK)
    if isinstance(port, int) and not isinstance(port, bool) and port > 0:
        text = text.replace(f"={port}", f"={PORT_MARK}").replace(f" {port}", f" {PORT_MARK}")
    return text


def flatten(data: Any, prefix: str) -> dict[str, Any]:
    """{"a.b.c": leaf} for nested mappings; lists and scalars are leaves (an empty mapping is a leaf too)."""
    out: dict[str, Any] = {}
    if isinstance(data, Mapping) and data:
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix] = data
    return out


def config_snapshot(run_dir: str | Path) -> ConfigSnapshot:
    """The launch configuration a run directory records (missing files are simply absent)."""
    root = Path(run_dir)
    texts: dict[str, str] = {}
    values: dict[str, Any] = {}
    problems: list[str] = []
    command: dict[str, Any] = {}
    try:
        loaded = json.loads((root / COMMAND_FILE).read_text(encoding="utf-8"))
        command = loaded if isinstance(loaded, dict) else {}
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        problems.append(f"{COMMAND_FILE}: {exc}")
    port = command.get("master_port")
    for name, prefix, load in ((ACCELERATE_FILE, "accelerate", yaml.safe_load), (DEEPSPEED_FILE, "deepspeed", json.loads)):
        try:
            text = (root / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{name}: {exc}")
            continue
        text = _normalise(text, str(root), port)
        texts[name] = text
        try:
            data = load(text)
        except (ValueError, yaml.YAMLError) as exc:
            problems.append(f"{name}: not readable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue
        values.update(flatten(data, prefix))
    if command:
        line = _normalise(str(command.get("command_line") or " ".join(command.get("argv") or [])), str(root), port)
        argv = [PORT_MARK if isinstance(port, int) and str(arg) == str(port) else _normalise(str(arg), str(root), port)
                for arg in command.get("argv") or []]
        # One argument a line: a diff of two long command lines then shows the argument that differs, not two
        # lines that look the same up to where a window cuts them.
        texts["command"] = "".join(arg + "\n" for arg in argv) if argv else line + "\n"
        for key in ("launcher", "nproc", "python"):
            if command.get(key) is not None:
                values[f"launch.{key}"] = command[key]
        values["launch.command"] = line
        if argv:
            values["launch.argv"] = argv
    return ConfigSnapshot(texts=texts, values=values, problems=tuple(problems))


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[ConfigDifference], int]:
    """Keys whose values differ (or are set in one only), and how many keys are the same. Order: keys both set
    differently first (the choices people compare), then keys set in one only; DeepSpeed, accelerate, launch."""
    out: list[ConfigDifference] = []
    same = 0
    order = {"deepspeed": 0, "accelerate": 1, "launch": 2}

    def rank(key: str) -> tuple[int, int, str]:
        return (0 if key in a and key in b else 1, order.get(key.split(".")[0], 3), key)

    argv_a, argv_b = a.get("launch.argv"), b.get("launch.argv")
    by_argument = isinstance(argv_a, list) and isinstance(argv_b, list)
    for key in sorted(set(a) | set(b), key=rank):
        if key in a and key in b and a[key] == b[key]:
            same += 1
            continue
        if by_argument and key in ("launch.command", "launch.argv"):
            continue  # the whole line differs where one argument does: the arguments are listed one by one below
        out.append(ConfigDifference(key, a.get(key), b.get(key), key in a, key in b))
    if by_argument and argv_a != argv_b:
        assert isinstance(argv_a, list) and isinstance(argv_b, list)
        for change in argv_changes(argv_a, argv_b):
            out.append(ConfigDifference(change.key, " ".join(change.a), " ".join(change.b),
                                        bool(change.a), bool(change.b)))
    return out, same


def unified_config_diff(a: ConfigSnapshot, b: ConfigSnapshot, label_a: str, label_b: str) -> str:
    parts: list[str] = []
    for name in (DEEPSPEED_FILE, ACCELERATE_FILE, "command"):
        if name not in a.texts and name not in b.texts:
            continue
        lines = difflib.unified_diff(
            a.texts.get(name, "").splitlines(keepends=True), b.texts.get(name, "").splitlines(keepends=True),
            fromfile=f"{label_a}/{name}" if name in a.texts else "/dev/null",
            tofile=f"{label_b}/{name}" if name in b.texts else "/dev/null",
        )
        parts.append("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    return "".join(parts)


def _change(a: float | None, b: float | None, describe: bool = True) -> str:
    """B relative to A ("0.62x (lower)"); "" when either is unknown."""
    if a is None or b is None or a <= 0:
        return ""
    ratio = b / a
    if abs(ratio - 1) < 0.005:
        return "same"
    word = ("lower" if ratio < 1 else "higher") if describe else ""
    return f"{ratio:.2f}x" + (f" ({word})" if word else "")


def figure_rows(a: RunFigures, b: RunFigures, engine: bool | None = None) -> list[FigureRow]:
    """The figures people compare, as text, with B's ratio to A. DeepSpeed's engine figure has a row of its own
    where `engine` (None: where either run logged one)."""
    def state(f: RunFigures) -> str:
        if f.trial is not None and f.state == "stopped" and f.state_detail:  # its trial's stop: why, not the signal
            return f"{f.state}: {f.state_detail}"
        code = f.exit_code
        if code is None or code == 0:
            return f.state
        if code < 0:  # ended by a signal: its name, not "exit code -2"
            try:
                return f"{f.state} ({signal.Signals(-code).name})"
            except ValueError:
                return f"{f.state} (signal {-code})"
        return f"{f.state} (exit code {code})"

    if engine is None:
        engine = a.engine_samples_per_s is not None or b.engine_samples_per_s is not None
    rows = [
        FigureRow("State", state(a), state(b)),
        FigureRow("Preset", a.preset or "-", b.preset or "-"),
        FigureRow("Duration", format_duration(a.duration_s), format_duration(b.duration_s),
                  _change(a.duration_s, b.duration_s)),
        FigureRow("Steps", f"{a.steps:g}" if a.steps else "-", f"{b.steps:g}" if b.steps else "-"),
        FigureRow("Peak GPU memory (fullest GPU)", format_bytes(a.peak_gpu_mem_bytes),
                  format_bytes(b.peak_gpu_mem_bytes), _change(a.peak_gpu_mem_bytes, b.peak_gpu_mem_bytes)),
        FigureRow("Peak host RAM (the run's processes)", format_bytes(a.peak_host_ram_bytes),
                  format_bytes(b.peak_host_ram_bytes), _change(a.peak_host_ram_bytes, b.peak_host_ram_bytes)),
        FigureRow("Peak host RAM used (whole machine)", format_bytes(a.peak_host_used_bytes),
                  format_bytes(b.peak_host_used_bytes), _change(a.peak_host_used_bytes, b.peak_host_used_bytes)),
        FigureRow("Seconds per step", format_seconds_per_step(a.seconds_per_step),
                  format_seconds_per_step(b.seconds_per_step), _change(a.seconds_per_step, b.seconds_per_step)),
        FigureRow("Throughput", format_rate(a.throughput, a.throughput_unit),
                  format_rate(b.throughput, b.throughput_unit),
                  _change(a.throughput, b.throughput) if a.throughput_unit == b.throughput_unit else ""),
    ]
    if engine:
        rows.append(FigureRow(ENGINE_ROW, format_rate(a.engine_samples_per_s, "samples/s"),
                              format_rate(b.engine_samples_per_s, "samples/s"),
                              _change(a.engine_samples_per_s, b.engine_samples_per_s)))
    return rows


def metric_rows(a: RunFigures, b: RunFigures) -> list[FigureRow]:
    rows = []
    for name in sorted(set(a.final_metrics) | set(b.final_metrics)):
        va, vb = a.final_metrics.get(name), b.final_metrics.get(name)
        rows.append(FigureRow(name, "-" if va is None else f"{va:.6g}", "-" if vb is None else f"{vb:.6g}",
                              _change(va, vb, describe=False)))
    return rows


class RunNotFound(LookupError):
    """No run with that id in the store."""


def compare_runs(store: RunStore, id_a: str, id_b: str) -> RunComparison:
    """Run B beside run A: config differences (flattened keys and a unified diff) and their figures."""
    records = []
    for run_id in (id_a, id_b):
        record = store.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id!r} in {store.path}")
        records.append(record)
    fa, fb = (run_figures(store, r) for r in records)
    sa, sb = (config_snapshot(r.run_dir) for r in records)
    differences, same = config_differences(sa.values, sb.values)
    label_a, label_b = (f"{r.name or 'run'} ({r.id})" for r in records)
    problems = tuple(f"{fa.run_id}: {p}" for p in sa.problems) + tuple(f"{fb.run_id}: {p}" for p in sb.problems)
    return RunComparison(a=fa, b=fb, differences=differences, same=same,
                         unified_diff=unified_config_diff(sa, sb, label_a, label_b),
                         figures=figure_rows(fa, fb), metrics=metric_rows(fa, fb), problems=problems)


# ---- N runs side by side -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColumnsRow:
    """One line of an N-run table: what, each run's value as text, and each run's ratio to the first ("" for the
    first, or where a value is not a number)."""

    what: str
    values: tuple[str, ...]
    changes: tuple[str, ...] = ()

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class ManyComparison:
    """Up to eight runs side by side, the first (the oldest) the reference for every ratio."""

    runs: list[RunFigures]
    labels: tuple[str, ...]  # "A", "B", ... in the order of `runs`
    figures: list[ColumnsRow]
    metrics: list[ColumnsRow]  # final metrics (with the step where the runs' final steps differ)
    differences: list[ColumnsRow]  # settings not the same in every run: "(not set)" where a run has none
    same: int  # settings the same in every run
    command: list[ColumnsRow]  # the launch commands, one argument a row, by position
    unified_diff: str  # each run's configs against the first run's
    problems: tuple[str, ...] = ()

    def with_figures(self, runs: Mapping[str, RunFigures]) -> ManyComparison:
        """The same comparison with the runs' figures as `runs` (by id) now has them (see RunComparison's)."""
        now = [runs.get(r.run_id, r) for r in self.runs]
        return replace(self, runs=now, figures=figure_columns(now), metrics=metric_columns(now))


def _ratios(values: Sequence[float | None], describe: bool = True) -> tuple[str, ...]:
    return ("", *(_change(values[0], v, describe) for v in values[1:]))


def figure_columns(runs: Sequence[RunFigures]) -> list[ColumnsRow]:
    """figure_rows for any number of runs: each figure's text per run and its ratio to the first run's."""
    engine = any(r.engine_samples_per_s is not None for r in runs)
    pairs = [figure_rows(runs[0], r, engine) for r in runs]  # the first against each: the same rows, in order
    numbers: dict[str, list[float | None]] = {
        "Duration": [r.duration_s for r in runs],
        "Peak GPU memory (fullest GPU)": [float(r.peak_gpu_mem_bytes) if r.peak_gpu_mem_bytes else None for r in runs],
        "Peak host RAM (the run's processes)": [float(r.peak_host_ram_bytes) if r.peak_host_ram_bytes else None
                                                for r in runs],
        "Peak host RAM used (whole machine)": [float(r.peak_host_used_bytes) if r.peak_host_used_bytes else None
                                               for r in runs],
        "Seconds per step": [r.seconds_per_step for r in runs],
        ENGINE_ROW: [r.engine_samples_per_s for r in runs],
    }
    same_unit = len({r.throughput_unit for r in runs}) == 1
    if same_unit:
        numbers["Throughput"] = [r.throughput for r in runs]
    out = []
    for i, row in enumerate(pairs[0]):
        values = (row.a, *(pair[i].b for pair in pairs[1:]))
        series = numbers.get(row.what)
        out.append(ColumnsRow(row.what, values, _ratios(series) if series else ("",) * len(runs)))
    return out


def metric_columns(runs: Sequence[RunFigures]) -> list[ColumnsRow]:
    """Every metric's final value per run; where the runs' last steps of it differ, each value says its step."""
    rows = []
    for name in sorted({n for r in runs for n in r.final_metrics}):
        values = [r.final_metrics.get(name) for r in runs]
        steps = [r.metric_last_steps.get(name) for r in runs]
        differ = len({s for s, v in zip(steps, values, strict=True) if v is not None and s is not None}) > 1
        texts = tuple("-" if v is None else f"{v:.6g}" + (f" at step {s}" if differ and s is not None else "")
                      for v, s in zip(values, steps, strict=True))
        rows.append(ColumnsRow(name, texts, _ratios(values, describe=False)))
    return rows


def _argv_of(values: Mapping[str, Any]) -> list[str] | None:
    argv = values.get("launch.argv")
    return [str(a) for a in argv] if isinstance(argv, list) else None


def setting_columns(snapshots: Sequence[Mapping[str, Any]]) -> tuple[list[ColumnsRow], int]:
    """config_differences for any number of runs: the settings not the same in every run (both-set-differently
    before set-in-some-only, DeepSpeed, accelerate, launch), and how many are the same. The commands' arguments are
    compared with the first run's, each differing one named by its option as for two runs."""
    first = snapshots[0]
    keys: dict[str, None] = {}
    for values in snapshots:
        keys.update(dict.fromkeys(values))
    argvs = [_argv_of(v) for v in snapshots]
    by_argument = all(a is not None for a in argvs)
    order = {"deepspeed": 0, "accelerate": 1, "launch": 2}

    def rank(key: str) -> tuple[int, int, str]:
        return (0 if all(key in v for v in snapshots) else 1, order.get(key.split(".")[0], 3), key)

    out: list[ColumnsRow] = []
    same = 0
    for key in sorted(keys, key=rank):
        present = [key in v for v in snapshots]
        if all(present) and all(v[key] == first[key] for v in snapshots):
            same += 1
            continue
        if by_argument and key in ("launch.command", "launch.argv"):
            continue  # listed argument by argument below
        texts = tuple(ConfigDifference(key, v.get(key), None, key in v).text("a") for v in snapshots)
        out.append(ColumnsRow(key, texts))
    if by_argument:
        base = argvs[0] or []
        changed: dict[str, list[str]] = {}
        for i, argv in enumerate(argvs[1:], start=1):
            for change in argv_changes(base, argv or []):
                row = changed.setdefault(change.key, [" ".join(change.a) or "(not set)"] * len(argvs))
                row[i] = " ".join(change.b) or "(not set)"
        out += [ColumnsRow(key, tuple(values)) for key, values in changed.items()]
    return out, same


def command_columns(snapshots: Sequence[ConfigSnapshot]) -> list[ColumnsRow]:
    """The launch commands side by side, one argument a row by position ("" where a command is shorter)."""
    lines = [s.texts.get("command", "").splitlines() for s in snapshots]
    return [ColumnsRow(f"{i + 1}", tuple(ln[i] if i < len(ln) else "" for ln in lines))
            for i in range(max((len(ln) for ln in lines), default=0))]


def compare_many(store: RunStore, ids: Sequence[str]) -> ManyComparison:
    """Two to eight runs side by side, in the order given (the first is every ratio's reference). Raises
    RunNotFound for an id not in the store, ValueError for fewer than two or more than eight runs."""
    if not 2 <= len(ids) <= MAX_COMPARED:
        raise ValueError(f"compare 2 to {MAX_COMPARED} runs, not {len(ids)}")
    records = []
    for run_id in ids:
        record = store.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id!r} in {store.path}")
        records.append(record)
    runs = [run_figures(store, r) for r in records]
    snapshots = [config_snapshot(r.run_dir) for r in records]
    labels = tuple(RUN_LETTERS[: len(runs)])
    differences, same = setting_columns([s.values for s in snapshots])
    names = [f"{label}: {r.name or 'run'} ({r.id})" for label, r in zip(labels, records, strict=True)]
    diff = "".join(unified_config_diff(snapshots[0], s, names[0], name)
                   for s, name in zip(snapshots[1:], names[1:], strict=True))
    problems = tuple(f"{f.run_id}: {p}" for f, s in zip(runs, snapshots, strict=True) for p in s.problems)
    return ManyComparison(runs=runs, labels=labels, figures=figure_columns(runs), metrics=metric_columns(runs),
                          differences=differences, same=same, command=command_columns(snapshots),
                          unified_diff=diff, problems=problems)


# ---- one metric of several runs over steps -----------------------------------------------------------------------
@dataclass(frozen=True)
class OverlayCurve:
    run_id: str
    label: str  # "A: gpt2-finetune"
    steps: list[int]
    values: list[float]
    last_step: int | None  # the run's own last step of the metric, before any cut
    times: list[float] = field(default_factory=list)  # when each point was logged (UNIX seconds), beside `steps`
    start: float | None = None  # when the run started (x as time since the start)
    last_t: float | None = None  # the newest point's time read (a live run's next read starts after it)

    def since_start(self) -> list[float]:
        """Each point's seconds since the run's start (its first point's time when the start is unknown)."""
        origin = self.start if self.start is not None else (self.times[0] if self.times else 0.0)
        return [t - origin for t in self.times]


@dataclass(frozen=True)
class Overlay:
    """Several runs' curves of one metric over steps. With equal_steps every curve ends at `common_step`, the
    smallest last step of them all, so each curve's last value is taken at the same step. `live`: the runs that were
    running when it was read (their curves grow: `extend_overlay` reads only what they logged since); `whole`: the
    curves before any cut (what the next read extends)."""

    metric: str
    metrics: tuple[str, ...]  # the metrics every run logged with step numbers (to choose from), sorted
    curves: list[OverlayCurve]
    common_step: int | None  # the last step every run reached (None: no curve)
    equal_steps: bool
    live: tuple[str, ...] = ()
    whole: tuple[OverlayCurve, ...] = ()

    @property
    def steps_differ(self) -> bool:
        return len({c.last_step for c in self.curves if c.last_step is not None}) > 1

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(c.run_id for c in (self.whole or self.curves))


def _stepped(rows: Sequence[tuple[int | None, float, float]]) -> list[tuple[int, float, float]]:
    """(step, t, value) of the rows logged with a step, in step order (a resumed run's rows stay in order)."""
    out = [(int(step), t, value) for step, t, value in rows if step is not None]
    out.sort(key=lambda r: r[0])
    return out


def _curve(run_id: str, label: str, rows: list[tuple[int, float, float]], start: float | None,
           last_t: float | None) -> OverlayCurve:
    return OverlayCurve(run_id, label, [r[0] for r in rows], [r[2] for r in rows], rows[-1][0] if rows else None,
                        [r[1] for r in rows], start, last_t)


def _assembled(metric: str, shared: Sequence[str], curves: list[OverlayCurve], equal_steps: bool,
               live: Sequence[str]) -> Overlay:
    """The overlay of these whole curves: cut at the common step when asked."""
    lasts = [c.last_step for c in curves if c.last_step is not None]
    common = min(lasts) if lasts else None
    shown = curves
    if equal_steps and common is not None:
        shown = []
        for c in curves:
            keep = bisect.bisect_right(c.steps, common)  # steps are in order
            shown.append(OverlayCurve(c.run_id, c.label, c.steps[:keep], c.values[:keep], c.last_step,
                                      c.times[:keep], c.start, c.last_t))
    return Overlay(metric, tuple(shared), shown, common, equal_steps, tuple(live), tuple(curves))


def overlay(store: RunStore, ids: Sequence[str], metric: str | None = None, equal_steps: bool = False) -> Overlay:
    """The runs' curves of `metric` (None: loss, or the first shared metric with loss in its name) over steps, in
    the order given; only rows logged with a step count. Runs missing from the store are left out."""
    spans: dict[str, dict[str, tuple[int, int, float, float, int]]] = {}
    records: dict[str, RunRecord] = {}
    for run_id in ids:
        record = store.get_run(run_id)
        if record is not None:
            spans[run_id] = store.metric_step_spans(run_id)
            records[run_id] = record
    shared = sorted(set.intersection(*(set(s) for s in spans.values()))) if spans else []
    metric = metric or default_metric(shared)
    curves = []
    for i, run_id in enumerate(spans):
        series = store.metric_series(run_id, metric)
        record = records[run_id]
        label = f"{RUN_LETTERS[i] if i < len(RUN_LETTERS) else i + 1}: {record.name or run_id}"
        curves.append(_curve(run_id, label, _stepped(series), record.started_at or record.created_at,
                             max((t for _step, t, _value in series), default=None)))
    live = [run_id for run_id, record in records.items() if record.state == "running"]
    return _assembled(metric, shared, curves, equal_steps, live)


def extend_overlay(store: RunStore, previous: Overlay, equal_steps: bool | None = None) -> Overlay:
    """`previous` with what its live runs logged since it was read: only their newer rows are read (a seek on the
    series' index), the finished runs' curves are kept as they were. `live` is read again: a run that ended since is
    read one last time and then no more. `equal_steps` (None: as before) cuts the result anew."""
    curves = []
    live = []
    for curve in previous.whole or previous.curves:
        if curve.run_id not in previous.live:
            curves.append(curve)
            continue
        record = store.get_run(curve.run_id)
        if record is not None and record.state == "running":
            live.append(curve.run_id)
        series = store.metric_series(curve.run_id, previous.metric, after_t=curve.last_t)
        if not series:
            curves.append(curve)
            continue
        new = _stepped(series)
        last_t = max(t for _step, t, _value in series)
        if new and curve.steps and new[0][0] < curve.steps[-1]:  # logged out of step order: merge
            rows = _stepped(list(zip(curve.steps, curve.times, curve.values, strict=True)) + new)
            curves.append(_curve(curve.run_id, curve.label, rows, curve.start, last_t))
            continue
        # The usual case, new steps after the old: the lists extended (copies: the overlay shown stays as it was).
        steps = curve.steps + [r[0] for r in new]
        curves.append(OverlayCurve(curve.run_id, curve.label, steps, curve.values + [r[2] for r in new],
                                   steps[-1] if steps else None, curve.times + [r[1] for r in new], curve.start,
                                   last_t))
    return _assembled(previous.metric, previous.metrics, curves,
                      previous.equal_steps if equal_steps is None else equal_steps, live)

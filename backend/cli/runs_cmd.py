"""`traindeck runs list|show`: the runs the store knows, as a table that fits the terminal, or one run in full.

A trial's candidate is listed by its trial and set-up (`trial:ID/zero2-cpu-mb4`), as `trial show` names it; its
JSON says the same under "trial" (null for a run of no trial); `runs show` says which trial and candidate it is."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindeck.backend.cli.run_lookup import (
    clock,
    exit_text,
    iso,
    open_store,
    progress_text,
    resolve_run,
    signal_text,
)

if TYPE_CHECKING:
    from traindeck.backend.runs import RunRecord, RunStore, TrialMark

ORDER = 31
# Columns that give way, in this order, when the table is wider than the terminal, and how narrow each may get.
SHRINKABLE = (("PROGRESS", 12), ("NAME", 8))


def register(sub: argparse._SubParsersAction) -> None:
    runs = sub.add_parser("runs", help="list runs or show one")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    lst = runs_sub.add_parser("list", help="all runs, newest first")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=_list)
    show = runs_sub.add_parser("show", help="one run: state, progress, metrics, resources, diagnosis, processes")
    show.add_argument("id", metavar="ID", help="run id (or a unique part of it, or the run's name)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)
    runs.set_defaults(handler=_list, json=False)


def run_summary(store: RunStore, record: RunRecord) -> dict[str, Any]:
    """What `runs show --json` prints (and the dashboard may reuse)."""
    progress = record.progress or {}
    data: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "state": record.state,
        "state_detail": record.state_detail,
        "exit_code": record.exit_code,
        "diagnosis": record.diagnosis,
        "progress": {k: progress.get(k) for k in ("current", "total", "rate", "eta_s", "unit")} if progress else None,
        "metrics": store.last_metrics(record.id),
        "pids": [{k: p.get(k) for k in ("pid", "role", "rank", "returncode")} for p in record.processes],
        "supervisor_pid": record.supervisor_pid,
        "log": str(record.log_path),
        "run_dir": record.run_dir,
        "launcher": record.launcher,
        "preset": record.preset,
        "script": record.script,
        "argv": record.argv,
        "cwd": record.cwd,
        "created_at": iso(record.created_at),
        "started_at": iso(record.started_at),
        "ended_at": iso(record.ended_at),
    }
    try:
        from traindeck.backend.monitor import resource_summary  # optional: numpy may be missing
    except ImportError:
        pass
    else:
        try:
            data["resources"] = resource_summary(store.path, record.id)
        except Exception as exc:  # a missing table or an older recorder must not break `runs show`
            data["resources"] = {"error": str(exc)}
    from traindeck.backend.runs import summary_fields

    data.update(summary_fields(record.run_dir))  # parent, resumed_from, provenance, stop
    from traindeck.backend.runs import read_trial_file

    data["trial"] = _trial_json(read_trial_file(record.run_dir)) if record.run_dir else None
    from traindeck.backend.slurm import slurm_fields

    data.update(slurm_fields(record.run_dir))  # a Slurm run's slurm_job_id, slurm_state, nodes
    # The end-of-run check: nothing remains, these PIDs remain (leftovers), or unknown with the reason.
    checks = [e for e in store.events(record.id) if e.kind in ("confirmed", "unconfirmed", "leftovers")]
    data["end_check"] = {"kind": checks[-1].kind, "text": checks[-1].text} if checks else None
    # The cgroup the run's processes are kept in (listed, stopped and confirmed gone through it), or why none.
    cgroups = [e.text for e in store.events(record.id) if e.kind == "cgroup"]
    data["cgroup"] = cgroups[-1] if cgroups else None
    from traindeck.backend.estimate import estimate_vs_measured, load_estimate

    estimate = load_estimate(record.run_dir) if record.run_dir else None
    data["estimate"] = estimate  # the pre-launch estimate (`run --model-size`, the Launch page), or null
    if estimate is not None and isinstance(data.get("resources"), dict) and "error" not in data["resources"]:
        data["estimate_vs_measured"] = estimate_vs_measured(estimate, data["resources"])
    from traindeck.backend.runs import batch_shape, nodes_summary, run_step_anatomy, shape_json

    # The run's global batch and sequence length (its throughput's other half): a dashboard reading the run over
    # SSH has no run directory to read them from.
    data["batch_shape"] = shape_json(batch_shape(record.run_dir)) if record.run_dir else None

    # Each rank's median step phases and memory, what bounds the run, and why (the site hook's step timing).
    data["step_anatomy"] = run_step_anatomy(record, store).to_json()
    nodes = nodes_summary(Path(record.run_dir)) if record.run_dir else None
    if nodes is not None:  # multi-node runs: per node its host, ranks and peaks
        data["nodes"] = nodes
    return data


# ---- list ---------------------------------------------------------------------------------------------------------
def _list(args: argparse.Namespace) -> int:
    from traindeck.backend.runs import read_trial_file

    store = open_store()
    records = store.list_runs()
    marks = {r.id: read_trial_file(r.run_dir) for r in records}
    if args.json:
        print(json.dumps([{"id": r.id, "name": r.name, "state": r.state, "exit_code": r.exit_code,
                           "launcher": r.launcher, "preset": r.preset, "script": r.script,
                           "progress": r.progress, "created_at": iso(r.created_at), "started_at": iso(r.started_at),
                           "ended_at": iso(r.ended_at), "log": str(r.log_path), "trial": _trial_json(marks[r.id])}
                          for r in records], indent=2))
        return 0
    if not records:
        print("no runs yet (start one with `traindeck run SCRIPT`)")
        return 0
    header = ("ID", "NAME", "STATE", "PROGRESS", "STARTED", "TIME", "EXIT")
    rows = [header]
    for r in records:
        end = r.ended_at or time.time()
        mark = marks[r.id]
        rows.append((r.id, f"trial:{mark.trial_id}/{mark.slug}" if mark is not None else r.name, r.state, progress_text(r.progress, running=r.state == "running",
                                                          stalled=r.state_detail.startswith("stalled")),
                     # a queued run has not started: when it was queued, said as such
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at or r.created_at))
                     if r.state != "queued" else time.strftime("queued %H:%M", time.localtime(r.created_at)),
                     clock(end - r.started_at) if r.started_at else "-", exit_text(r)))
    for line in format_table(rows, _table_width()):
        print(line)
    return 0


def _trial_json(mark: TrialMark | None) -> dict[str, Any] | None:
    """A trial's candidate: the trial's id, the candidate's place and set-up (its label as `trial show` prints it)."""
    if mark is None:
        return None
    return {"id": mark.trial_id, "index": mark.index, "candidate": mark.slug, "label": mark.label,
            "setup": dict(mark.candidate)}


def _table_width() -> int | None:
    """The terminal's width (COLUMNS wins, as in every shell tool); None when printing to a pipe or file, where
    nothing is cut."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def format_table(rows: Sequence[Sequence[str]], width: int | None) -> list[str]:
    """Left-aligned columns two spaces apart; wider than `width`, PROGRESS and then NAME are cut ('...')."""
    header = rows[0]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    if width is not None:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        for name, narrowest in SHRINKABLE:
            if excess <= 0:
                break
            i = header.index(name)
            cut = min(excess, max(0, widths[i] - narrowest))
            widths[i] -= cut
            excess -= cut
    lines = []
    for row in rows:
        cells = [cell if len(cell) <= w else cell[: max(0, w - 3)] + "..." for cell, w in zip(row, widths, strict=True)]
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip())
    return lines


# ---- show ---------------------------------------------------------------------------------------------------------
def _show(args: argparse.Namespace) -> int:
    store = open_store()
    record = resolve_run(store, args.id)
    data = run_summary(store, record)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"run       {data['id']}  ({data['name']})")
    if data.get("trial"):
        trial = data["trial"]
        print(f"trial     candidate #{trial['index']} {trial['label']} of trial {trial['id']} "
              f"(`traindeck trial show {trial['id']}`)")
    state = data["state"] + (f" ({data['state_detail']})" if data["state_detail"] else "")
    code = data["exit_code"]
    if code is not None:
        state += f", launcher killed by {signal_text(code)}" if code < 0 else f", exit code {code}"
    print(f"state     {state}")
    print(f"launcher  {data['launcher']}" + (f", preset {data['preset']}" if data["preset"] else ""))
    print(f"command   {' '.join(data['argv'])}")
    took = f" ({clock(record.ended_at - record.started_at)})" if record.started_at and record.ended_at else ""
    print(f"started   {data['started_at'] or '-'}   ended {data['ended_at'] or '-'}{took}")
    if data["progress"]:
        print(f"progress  {progress_text(record.progress, running=record.state == 'running', stalled=record.state_detail.startswith('stalled'))}")
    if data["metrics"]:
        print("metrics   " + ", ".join(f"{k}={v:.6g}" for k, v in data["metrics"].items()))
    print(f"resources {resources_text(data.get('resources'))}")
    if data.get("nodes"):
        from traindeck.backend.runs import node_text

        for node in data["nodes"]:
            print(f"node      {node_text(node)}")
    for p in data["pids"]:
        role = p["role"] + (f" {p['rank']}" if p["rank"] is not None else "")
        end = "" if p["returncode"] is None else f" ({_ended(p['returncode'])})"
        print(f"process   {p['pid']} {role}{end}")
    if data["diagnosis"]:
        print("\n".join(diagnosis_lines(data["diagnosis"])))
    for i, pair in enumerate(data.get("estimate_vs_measured") or []):
        measured = pair["measured_bytes"]
        print(f"{'memory' if i == 0 else '':9} {pair['what']}: estimated {gib(pair['estimated_bytes'])}, measured "
              + (f"{gib(measured)} (x{pair['measured_over_estimate']:.2f})" if measured is not None
                 else "not recorded"))
    resources = data.get("resources") or {}
    versions = resources.get("gpu_versions") or {}
    if versions:
        print("gpus      " + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
              + (f"; the run's GPUs: {', '.join(resources['run_gpus'])}" if resources.get("run_gpus") else ""))
    if data["cgroup"]:
        print(f"cgroup    {data['cgroup']}")
    if data["end_check"]:
        print(f"end       {data['end_check']['kind']}: {data['end_check']['text']}")
    _show_left_behind(data)
    print(f"log       {data['log']}")
    return 0


def _show_left_behind(data: dict[str, Any]) -> None:
    print("stop      " + ("save a checkpoint, then stop (the script uses traindeck's companion)"
                          if data.get("stop") == "save-then-stop" else "signals (SIGINT, SIGTERM, SIGKILL)"))
    if data.get("parent"):
        print(f"parent    {data['parent']}" + (f", resumed from {data['resumed_from']}" if data.get("resumed_from")
                                              else " (rerun)"))
    git = (data.get("provenance") or {}).get("git")
    if git:
        print(f"git       {git.get('commit')} ({git.get('branch')})" + (", uncommitted changes: "
                                                                      + str(git.get('diff_file'))
                                                                      if git.get("dirty") else ""))


def resources_text(resources: dict[str, Any] | None) -> str:
    """The recorder's figures in one line: samples, peak rank RSS, peak GPU memory, peak host RAM, mean CPU."""
    if resources is None:
        return "not available (the monitor's packages are not installed)"
    if "error" in resources:
        return f"could not be read: {resources['error']}"
    if not resources.get("samples"):
        return "no samples recorded"
    parts = [f"{resources['samples']} samples",
             f"peak rank RSS {gib(resources.get('peak_rank_rss_bytes'))}",
             f"peak host RAM used {gib(resources.get('peak_host_used_bytes'))}"]
    if resources.get("ram_total_bytes"):
        parts[-1] += f" of {gib(resources['ram_total_bytes'])}"
    if resources.get("peak_gpu_mem_bytes") is not None:
        parts.append(f"peak GPU memory {gib(resources['peak_gpu_mem_bytes'])}")
    else:
        parts.append("no GPU" + (f" ({resources['gpu_error']})" if resources.get("gpu_error") else ""))
    if resources.get("mean_ranks_cpu_percent") is not None:
        parts.append(f"ranks' mean CPU {resources['mean_ranks_cpu_percent']:.0f}%")
    return ", ".join(parts)


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def _ended(code: int) -> str:
    return f"killed by {signal_text(code)}" if code < 0 else f"exit code {code}"


def diagnosis_lines(diagnosis: dict[str, Any]) -> list[str]:
    """A diagnosis (Diagnosis.to_json) as `runs show` and `diagnose` print it: the sentence, which memory, the
    evidence, the consequences apart, the advice."""
    from traindeck.backend.runs import MEMORY_WORDS

    lines = [f"diagnosis {diagnosis['summary']}"]
    memory = MEMORY_WORDS.get(diagnosis.get("memory") or "")
    if memory:
        lines.append(f"          memory: {memory}")
    lines += [f"          - {item}" for item in diagnosis.get("evidence", [])]
    follow_ons = diagnosis.get("follow_ons") or []
    if follow_ons:
        lines.append("          then (consequences, not the cause):")
        lines += [f"          - {item}" for item in follow_ons]
    if diagnosis.get("advice"):
        lines.append(f"          {diagnosis['advice']}")
    return lines

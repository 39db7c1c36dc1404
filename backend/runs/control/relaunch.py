"""`rerun` and `resume`: a new run from an earlier one's launch request (resume.py), recorded with its lineage."""

from __future__ import annotations

from pathlib import Path

from traindeck.backend.runs.control.new_run import LaunchOutcome, launch_run
from traindeck.backend.runs.control.resume import (
    Lineage,
    ResumeError,
    load_request,
    remember_template,
    remembered_template,
    request_from,
    resume_args,
    save_lineage,
)
from traindeck.backend.runs.record.checkpoints import Checkpoint, newest, run_checkpoints
from traindeck.backend.runs.record.run_store import RunRecord, RunStore


def checkpoints_of(record: RunRecord) -> list[Checkpoint]:
    """The checkpoints the run wrote: found where it writes (checkpoints.py), written while it ran (a folder
    shared by several runs holds theirs too). Script arguments only: the launcher's own are not folders of it."""
    data_argv = record.argv
    try:
        data_argv = list(load_request(record.run_dir).get("script_args") or record.argv)
    except ResumeError:
        pass
    found = run_checkpoints(data_argv, record.cwd or ".")
    start = record.created_at - 1.0
    end = (record.ended_at + 5.0) if record.ended_at else None
    return [c for c in found if c.time >= start and (end is None or c.time <= end)]


def pick_checkpoint(record: RunRecord, path: str | None) -> Checkpoint:
    found = checkpoints_of(record)
    if path is None:
        chosen = newest(found)
        if chosen is None:
            raise ResumeError(f"run {record.id} left no checkpoint (see `traindeck runs checkpoints {record.id}`)")
        return chosen
    wanted = Path(path).expanduser().resolve()
    for checkpoint in found:
        if Path(checkpoint.path) == wanted:
            return checkpoint
    # A checkpoint from elsewhere (another run, copied): take its layout from the folder itself.
    from traindeck.backend.runs.record.checkpoints import find_checkpoints

    for checkpoint in find_checkpoints([wanted.parent]):
        if Path(checkpoint.path) == wanted:
            return checkpoint
    raise ResumeError(f"{path} is not a checkpoint traindeck recognises (HF Trainer checkpoint-N, DeepSpeed tag "
                      "folder beside `latest`, accelerate save_state folder)")


def rerun(record: RunRecord, *, store: RunStore | None = None) -> LaunchOutcome:
    """The same run again: same script, arguments, configs, launcher, interpreter, working directory."""
    data = load_request(record.run_dir)
    request = request_from(data)
    outcome = launch_run(request, name=record.name, preset_name=data.get("preset_name"), store=store,
                         resume_arg=data.get("resume_arg"))
    if outcome.record is not None:
        save_lineage(outcome.record.run_dir, Lineage(record.id, None, "rerun"))
    return outcome


def resume(record: RunRecord, *, checkpoint: str | None = None, template: str | None = None,
           store: RunStore | None = None) -> tuple[LaunchOutcome, Checkpoint]:
    """The same run, continued from one of its checkpoints (default: the newest). `template`: how the script is
    told (`--load {checkpoint}`); remembered for the script; default: the one remembered, else the HF Trainer's."""
    data = load_request(record.run_dir)
    chosen = pick_checkpoint(record, checkpoint)
    script, cwd, preset = str(data["script"]), str(data.get("cwd") or "."), data.get("preset_name")
    if template is not None:
        remember_template(template, script=script, cwd=cwd, preset=preset)
    template = template or data.get("resume_arg") or remembered_template(script, cwd, preset)
    request = request_from(data)
    from dataclasses import replace

    request = replace(request, script_args=resume_args(request.script_args, chosen, template))
    outcome = launch_run(request, name=record.name, preset_name=preset, store=store, resume_arg=template)
    if outcome.record is not None:
        save_lineage(outcome.record.run_dir, Lineage(record.id, chosen.path, "resume"))
    return outcome, chosen

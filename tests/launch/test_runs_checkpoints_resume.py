"""Issue 14, points 1-3 on real runs: a real HF Trainer script and a real DeepSpeed script write checkpoints,
`runs checkpoints` lists them, `resume` continues each from one (the script's own log says so), and with the
in-run companion Stop saves a checkpoint before the run ends. CPU only; no hub downloads (models from configs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.runhelp import SCRIPTS, events, wait_finished, wait_until

from traindeck.backend.runs.record.run_store import RunStore

HF_SCRIPT = SCRIPTS / "hf_tiny_trainer.py"
DS_SCRIPT = SCRIPTS / "ds_tiny_checkpoints.py"

pytestmark = pytest.mark.timeout(900)


def traindeck(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def started(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def log_of(run_id: str, cwd: Path) -> str:
    return traindeck("logs", run_id, cwd=cwd).stdout


def listed(run_id: str, cwd: Path) -> list[dict]:  # type: ignore[type-arg]
    result = traindeck("runs", "checkpoints", run_id, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def show(run_id: str, cwd: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(traindeck("runs", "show", run_id, "--json", cwd=cwd).stdout)  # type: ignore[no-any-return]


def test_hf_trainer_checkpoints_are_listed_and_resume_continues_from_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = started(traindeck("run", "--detach", str(HF_SCRIPT), "--output_dir", str(out), "--max_steps", "6",
                              "--save_steps", "3", cwd=tmp_path))
    done = wait_finished(first, 300)
    assert done.state == "succeeded", log_of(first, tmp_path)[-2000:]
    found = listed(first, tmp_path)
    assert [(c["step"], c["kind"], Path(c["path"]).name) for c in found] == [
        (3, "hf-trainer", "checkpoint-3"), (6, "hf-trainer", "checkpoint-6")]
    assert all(c["bytes"] > 10_000 and c["time"] >= done.created_at for c in found)
    table = traindeck("runs", "checkpoints", first, cwd=tmp_path).stdout
    assert "checkpoint-3" in table and "hf-trainer" in table and "KiB" in table

    second = started(traindeck("resume", first, "--checkpoint", str(out / "checkpoint-3"), "--detach",
                               cwd=tmp_path))
    resumed = wait_finished(second, 300)
    log = log_of(second, tmp_path)
    assert resumed.state == "succeeded", log[-2000:]
    # The Trainer's own words (transformers 5.x; 4.x said "Continuing training from checkpoint").
    assert "Resuming training from checkpoint with epoch 0 and global step 3" in log
    assert "trained to step 6" in log
    shown = show(second, tmp_path)
    assert shown["parent"] == first and shown["resumed_from"] == str(out / "checkpoint-3")
    assert shown["argv"][-2:] == ["--resume_from_checkpoint", str(out / "checkpoint-3")]
    assert show(first, tmp_path)["parent"] is None


def test_companion_turns_stop_into_save_then_stop(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_id = started(traindeck("run", "--detach", str(HF_SCRIPT), "--output_dir", str(out), "--max_steps", "5000",
                               "--save_steps", "100000", "--companion", "--step_sleep", "0.1", cwd=tmp_path))
    with RunStore() as store:
        def stepping() -> bool:
            record = store.get_run(run_id)
            assert record is not None and not record.finished, log_of(run_id, tmp_path)[-2000:]
            return bool(record.progress and record.progress["current"] >= 3)

        wait_until(stepping, 300, 0.5)
    assert show(run_id, tmp_path)["stop"] == "save-then-stop"
    assert "save a checkpoint, then stop" in traindeck("runs", "show", run_id, cwd=tmp_path).stdout
    assert not list(out.glob("checkpoint-*"))  # save_steps is far away: only the stop can make one
    stopped = traindeck("stop", run_id, cwd=tmp_path, timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "save a checkpoint and stop" in stopped.stdout
    record = wait_finished(run_id, 60)
    assert record.state == "stopped"
    saved = list(out.glob("checkpoint-*"))
    assert len(saved) == 1 and (saved[0] / "trainer_state.json").is_file()
    step = int(saved[0].name.split("-")[1])
    assert 3 <= step < 5000
    log = log_of(run_id, tmp_path)
    assert "KeyboardInterrupt" not in log and f"trained to step {step}" in log  # the script ended by itself
    kinds = [kind for kind, _text in events(run_id)]
    assert "stop_signal" not in kinds  # no signal was needed
    assert "without a signal" in (record.diagnosis or {}).get("summary", "")
    # The companion reported the Trainer's logs exactly: the parsed dict lines did not add a second series.
    assert [c["step"] for c in listed(run_id, tmp_path)] == [step]


def test_deepspeed_checkpoints_and_resume_with_a_template(tmp_path: Path) -> None:
    save = tmp_path / "ckpt"
    first = started(traindeck("run", "--detach", str(DS_SCRIPT), "--save_dir", str(save), "--steps", "4",
                              cwd=tmp_path))
    done = wait_finished(first, 600)
    assert done.state == "succeeded", (done.diagnosis, log_of(first, tmp_path)[-3000:])
    found = listed(first, tmp_path)
    assert [(c["step"], c["kind"], Path(c["path"]).name, c["latest"]) for c in found] == [
        (2, "deepspeed", "global_step2", False), (4, "deepspeed", "global_step4", True)]

    refused = traindeck("resume", first, "--detach", cwd=tmp_path)
    assert refused.returncode == 2 and "--resume-arg" in refused.stderr and "Traceback" not in refused.stderr

    second = started(traindeck("resume", first, "--detach", "--resume-arg", "--load_dir {checkpoint_dir} --tag {tag}",
                               cwd=tmp_path))
    resumed = wait_finished(second, 600)
    log = log_of(second, tmp_path)
    assert resumed.state == "succeeded", (resumed.state_detail, resumed.diagnosis, log[-3000:])
    assert f"resumed from checkpoint {save / 'global_step4'}" in log and "at step 4" in log
    assert "done at step 8" in log
    assert show(second, tmp_path)["resumed_from"] == str(save / "global_step4")

    # The template was remembered for the script: the next resume needs none.
    third = started(traindeck("resume", second, "--detach", cwd=tmp_path))
    assert "done at step 12" in (wait_finished(third, 600) and log_of(third, tmp_path))


def test_accelerate_save_state_folders_are_listed_and_resumed_with_a_template(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    script = SCRIPTS / "accelerate_save_state.py"
    first = started(traindeck("run", "--detach", "--resume-arg", "--resume_dir {checkpoint}", str(script),
                              "--project_dir", str(project), cwd=tmp_path))
    assert wait_finished(first, 300).state == "succeeded", log_of(first, tmp_path)[-2000:]
    found = listed(first, tmp_path)
    # accelerate numbers its save_state folders from 0 (checkpoint_0, checkpoint_1): the number, not the step.
    assert [(c["kind"], Path(c["path"]).name) for c in found] == [("accelerate", "checkpoint_0"),
                                                                   ("accelerate", "checkpoint_1")]
    assert all(c["bytes"] > 0 for c in found)
    # The template given with `run --resume-arg` is used without being given again.
    second = started(traindeck("resume", first, "--detach", cwd=tmp_path))
    assert wait_finished(second, 300).state == "succeeded"
    assert f"loaded state from {project / 'checkpoints' / 'checkpoint_1'}" in log_of(second, tmp_path)


def test_save_stop_helper_in_a_deepspeed_loop_saves_now_and_saves_then_stops(tmp_path: Path) -> None:
    save = tmp_path / "ckpt"
    run_id = started(traindeck("run", "--detach", str(DS_SCRIPT), "--save_dir", str(save), "--steps", "100000",
                               "--companion", "--step_sleep", "0.1", cwd=tmp_path))
    wait_until(lambda: show(run_id, tmp_path)["stop"] == "save-then-stop" and "step 3 " in log_of(run_id, tmp_path),
               600, 1.0)
    assert not save.exists()
    asked = traindeck("runs", "save", run_id, cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    first = wait_until(lambda: listed(run_id, tmp_path), 120, 0.5)
    assert len(first) == 1 and first[0]["kind"] == "deepspeed"
    assert show(run_id, tmp_path)["state"] == "running"  # saving now does not stop it
    stopped = traindeck("stop", run_id, cwd=tmp_path, timeout=300)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    record = wait_finished(run_id, 60)
    assert record.state == "stopped" and "without a signal" in (record.diagnosis or {})["summary"]
    found = listed(run_id, tmp_path)
    assert len(found) == 2 and found[-1]["latest"] and found[-1]["step"] > first[0]["step"]
    assert f"saved at step {found[-1]['step']} and stopping" in log_of(run_id, tmp_path)

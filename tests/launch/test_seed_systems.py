"""The systems the seed documents describe, run for real through traindeck on this CPU machine (2 ranks each).

- accelerate's FSDP YAML: accelerate cannot shard on the CPU (its FSDP plugin wants an accelerator; without one
  its processes start unsharded), so `traindeck run` refuses it before start in accelerate's own words and offers
  torchrun with the same sharding; accelerate itself is run on the same YAML to show those are still its words.
- Megatron-LM (accelerate's plugin): refused before start with one line naming why (no CUDA, no megatron-core).
- ZeRO-3 with parameter offload to the CPU, and ZeRO-Infinity (optimizer and parameters to `nvme`, `nvme_path` a
  local folder): real 2-rank DeepSpeed runs on the CPU accelerator; for NVMe the swap files are seen under the path
  while the run holds after a step, the disk holding the path is recorded as the run's NVMe traffic, and the
  run's end says which swap files DeepSpeed left (it clears them only when the next run starts).

DeepSpeed's ops come from the folder `make setup` builds them into (support.runhelp.job_env); the NVMe run's
async_io op needs libaio's headers (`sudo apt-get install -y libaio-dev`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.runhelp import (
    SCRIPTS,
    events,
    job_env,
    launch,
    leftovers,
    metrics,
    ranks,
    wait_finished,
    wait_until,
)

from traindeck.backend.estimate import GIB, shape_from_params
from traindeck.backend.estimate.prelaunch import FreeMemory, check_preset
from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE, LIBAIO_HEADER, nvme_problems
from traindeck.backend.launch.ports import pick_free_port
from traindeck.backend.monitor.offload import offload_view
from traindeck.backend.presets import Preset
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

pytestmark = [pytest.mark.slow, pytest.mark.train]
torch = pytest.importorskip("torch", reason="needs the train extra")

ACCELERATE_FSDP = SCRIPTS / "accelerate_fsdp_tiny.py"
ZERO3 = SCRIPTS / "zero3_offload_tiny.py"
# The seed's accelerate FSDP YAML as accelerate ships it (examples/config_yaml_templates/fsdp.yaml).
SEED_FSDP_YAML = """\
distributed_type: FSDP
mixed_precision: 'bf16'
num_processes: 2
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_use_orig_params: true
"""
# accelerate's own Megatron-LM test config (tests/test_configs/megatron.yaml).
MEGATRON_YAML = """\
compute_environment: LOCAL_MACHINE
distributed_type: MEGATRON_LM
num_processes: 1
megatron_lm_config:
  megatron_lm_recompute_activations: false
"""
CPU = {"DS_ACCELERATOR": "cpu"}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="what is refused here runs on a GPU machine")


def _traindeck_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traindeck", "run", "--detach", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=job_env())


def _accelerate(config: Path, cwd: Path) -> str:
    """`accelerate launch --config_file CONFIG accelerate_fsdp_tiny.py` run by hand: its whole output."""
    result = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                             "--main_process_port", str(pick_free_port()), str(ACCELERATE_FSDP)],
                            capture_output=True, text=True, timeout=300, cwd=cwd, env=job_env())
    return result.stdout + result.stderr


def _runs() -> int:
    with RunStore() as store:
        return len(store.list_runs())


# ---- accelerate FSDP and Megatron-LM: refused before start, in accelerate's words ------------------------------

@no_cuda
def test_seed_fsdp_yaml_is_refused_before_launch_with_accelerates_reason(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.yaml"
    config.write_text(SEED_FSDP_YAML)
    before = _runs()
    result = _traindeck_run("--config", str(config), str(ACCELERATE_FSDP), cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert _runs() == before  # nothing was started or recorded
    refusal = [line for line in result.stderr.splitlines() if "FSDP under accelerate needs CUDA" in line]
    assert len(refusal) == 1, result.stderr
    assert ACCELERATE_NO_DEVICE in refusal[0]
    # The torchrun route with the same sharding: FULL_SHARD reshards after forward, bf16 parameters.
    assert "--launcher torchrun --nproc 2" in refusal[0]
    assert ("fully_shard(module, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy("
            "param_dtype=torch.bfloat16))") in refusal[0]
    # accelerate itself, on the same YAML here, stops every process with those words.
    said = _accelerate(config, tmp_path)
    assert said.count(f"RuntimeError: {ACCELERATE_NO_DEVICE}") == 2, said[-3000:]
    assert "accelerate_fsdp_tiny: process" not in said


@no_cuda
def test_fsdp_yaml_without_sync_is_refused_as_unsharded_which_accelerate_confirms(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.yaml"
    config.write_text(SEED_FSDP_YAML.replace("fsdp_sync_module_states: true", "fsdp_sync_module_states: false")
                      .replace("fsdp_cpu_ram_efficient_loading: true", "fsdp_cpu_ram_efficient_loading: false")
                      .replace("mixed_precision: 'bf16'", "mixed_precision: 'no'")
                      .replace("FULL_SHARD", "SHARD_GRAD_OP") + "use_cpu: true\n")
    result = _traindeck_run("--config", str(config), str(ACCELERATE_FSDP), cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    refusal = next(line for line in result.stderr.splitlines() if "FSDP under accelerate needs CUDA" in line)
    assert "distributed type NO" in refusal and "unsharded" in refusal
    assert "fully_shard(module, reshard_after_forward=False) on each layer" in refusal
    # accelerate's processes indeed run as two unsharded, unconnected copies.
    said = _accelerate(config, tmp_path)
    assert said.count("of 1: distributed type NO, model Sequential") == 2, said[-3000:]


@no_cuda
def test_megatron_is_refused_before_launch_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "megatron.yaml"
    config.write_text(MEGATRON_YAML)
    before = _runs()
    result = _traindeck_run("--config", str(config), str(ACCELERATE_FSDP), cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert _runs() == before
    refusal = [line for line in result.stderr.splitlines() if "Megatron-LM" in line]
    assert len(refusal) == 1, result.stderr
    assert "CUDA is not available" in refusal[0]
    assert "megatron-core" in refusal[0]  # not installed in the training environment here


# ---- ZeRO-Infinity before start: the path, libaio, the free space against the estimate -------------------------

def _infinity(path: str) -> dict[str, Any]:
    nvme = {"device": "nvme", "nvme_path": path}
    return {"zero_optimization": {"stage": 3, "offload_param": nvme, "offload_optimizer": nvme},
            "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}, "train_micro_batch_size_per_gpu": 1}


def test_nvme_path_that_cannot_be_written_and_missing_libaio_are_said_before_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    errors, warnings = nvme_problems(_infinity(str(blocker / "nvme")), header=str(tmp_path / "libaio.h"))
    assert errors == [f"nvme_path {blocker / 'nvme'}: {blocker} is not a folder, so DeepSpeed cannot create its "
                      "swap files"]
    assert warnings == [f"NVMe offload uses DeepSpeed's async_io op, which builds only with libaio's headers "
                        f"({tmp_path / 'libaio.h'} is missing): sudo apt-get install -y libaio-dev"]
    # A folder still to be made under a writable one is fine: DeepSpeed creates it.
    assert nvme_problems(_infinity(str(tmp_path / "new" / "nvme")), header=str(blocker)) == ([], [])


def test_system_check_names_the_apt_line_for_libaio(tmp_path: Path) -> None:
    from traindeck.backend.system_check import libaio_note

    assert libaio_note(str(tmp_path / "libaio.h")) == (
        "no libaio headers: DeepSpeed's NVMe offload (ZeRO-Infinity) builds its async_io op against them: "
        "sudo apt-get install -y libaio-dev")
    assert libaio_note(str(tmp_path)) is None


def test_free_space_at_nvme_path_is_checked_against_the_estimate(tmp_path: Path) -> None:
    free = FreeMemory(gpu_free_bytes=(80 * GIB,) * 2, gpu_total_bytes=(80 * GIB,) * 2,
                      host_available_bytes=500 * GIB, host_total_bytes=512 * GIB)
    preset = Preset(name="infinity", launcher="deepspeed", deepspeed=_infinity(str(tmp_path / "nvme")),
                    num_processes=2)
    small = check_preset(preset, shape_from_params(10**6), free=free)
    assert small.row.disk_bytes_per_node > 0 and small.disk_verdict == "fits", small
    assert small.nvme_path == str(tmp_path / "nvme") and small.disk_free_bytes
    assert small.lines()[-1].startswith("NVMe: about ") and str(tmp_path / "nvme") in small.lines()[-1]
    # Ten trillion parameters' states do not fit on this disk: said, and the verdict says it.
    huge = check_preset(preset, shape_from_params(10**13), free=free)
    nvme = [w for w in huge.warnings if w.startswith("NVMe:")]
    assert len(nvme) == 1 and "free at the NVMe path" in nvme[0], huge.warnings
    assert huge.disk_verdict == "does not fit" and huge.verdict == "does not fit"


# ---- ZeRO-3 parameter offload and ZeRO-Infinity: real 2-rank runs -------------------------------------------------

def _ds_config(tmp_path: Path, zero: dict[str, Any], **extra: Any) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                                "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
                                "zero_optimization": {"stage": 3, **zero}, **extra}))
    return path


def _succeeded(run: RunRecord, timeout: float) -> RunRecord:
    done = wait_finished(run.id, timeout)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    assert set(ranks(done)) == {0, 1}
    assert "[rank0]: zero3_offload_tiny: rank 0 done" in log and "[rank1]: zero3_offload_tiny: rank 1 done" in log
    assert "loss" in metrics(run.id)
    assert leftovers(done) == []
    return done


def test_zero3_parameter_offload_to_cpu_trains_on_two_ranks(tmp_path: Path) -> None:
    config = _ds_config(tmp_path, {"offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}})
    run = launch(ZERO3, "--deepspeed_config", "{ds_config}", "--steps", "3", launcher="deepspeed", nproc=2,
                 config=config, env=CPU, name="zero3-param-offload")
    done = _succeeded(run, 600)
    assert "offload_param" in Path(done.run_dir, "ds_config.json").read_text()


@pytest.mark.skipif(not os.path.exists(LIBAIO_HEADER), reason="DeepSpeed's async_io op needs libaio-dev")
@pytest.mark.timeout(1800)  # a fresh set-up builds the async_io op on first use: minutes on a busy 2-core machine
def test_zero_infinity_swaps_to_the_nvme_path_and_records_its_disk(tmp_path: Path) -> None:
    nvme = tmp_path / "nvme"
    release = tmp_path / "release"
    aio = {"block_size": 1048576, "queue_depth": 8, "single_submit": False, "overlap_events": True,
           "thread_count": 1}
    config = _ds_config(tmp_path, {
        "offload_param": {"device": "nvme", "nvme_path": str(nvme), "buffer_count": 4, "buffer_size": 5_000_000},
        "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme)},
        "stage3_param_persistence_threshold": 0}, aio=aio, bf16={"enabled": True})
    run = launch(ZERO3, "--deepspeed_config", "{ds_config}", "--steps", "3", "--hold-at", "1", "--release",
                 str(release), launcher="deepspeed", nproc=2, config=config, env=CPU, name="zero-infinity")
    try:
        # Both ranks hold after their first step: the parameters' and optimizer states' swap files are there now.
        def swapped() -> list[Path]:
            files = [p for p in nvme.rglob("*") if p.is_file() and p.stat().st_size > 0]
            both = {part for p in files for part in p.parts if part in ("rank0", "rank1")} == {"rank0", "rank1"}
            return files if both and any("optimizer" in str(p) for p in files) else []

        files = wait_until(swapped, timeout=900, interval=0.5)
    finally:
        release.touch()
    assert any("params" in str(p.relative_to(nvme)) for p in files), files
    done = _succeeded(run, 600)
    left = sorted(str(p.relative_to(nvme)) for p in nvme.rglob("*") if p.is_file())
    print(f"zero-infinity: {len(files)} swap files seen during the run; left after it: {left}")
    # DeepSpeed clears its swap folder only at the next start: the run's end says what it left, and where.
    said = [text for kind, text in events(done.id) if kind == "nvme_leftovers"]
    if left:
        assert len(said) == 1 and f"{len(left)} NVMe swap file(s)" in said[0], said
        assert str(nvme / "zero_stage_3") in said[0]
    else:
        assert said == []
    # The disk holding nvme_path was watched, and the run's reads and writes recorded on it.
    with RunStore() as store:
        view = offload_view(store.path, done.id)
    assert [path for path, _ in view["nvme_devices"]] == [str(nvme)], view["nvme_devices"]
    written, read = view["nvme_write_bps"], view["nvme_read_bps"]
    assert (written[written == written] > 0).any(), written
    print(f"zero-infinity: {done.ended_at - done.started_at:.0f} s; NVMe peak write {float(np.nanmax(written)) / 2**20:.1f} MiB/s, "
          f"peak read {float(np.nanmax(read)) / 2**20:.1f} MiB/s over {len(written)} samples")

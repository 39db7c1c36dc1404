"""The facts behind the accelerate rules, checked against accelerate's own launch code (no process is started).

Each test runs what `accelerate launch --config_file FILE train.py` does before it starts the processes
(_validate_launch_command, then the launcher's environment) and, where the rule is about what each process does,
builds the plugin the way the processes do (from that environment). The rules cite accelerate 1.15.0: when a newer
accelerate changes one of these behaviours, the test here fails and the rule's text must be revisited.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support import TESTS

from traindeck.backend.config.validate import check_files

pytestmark = pytest.mark.train
accelerate = pytest.importorskip("accelerate")

DIR = TESTS / "fixtures" / "configs" / "accelerate"


def launch(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str] | None, dict[str, str]]:
    """accelerate launch's preparation for `path`: (its config, the DeepSpeed launcher's command or None, the
    processes' environment, which is also applied to os.environ)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    monkeypatch.chdir(path.parent)  # relative deepspeed_config_file paths, as when launched from the YAML's folder
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)  # as launch_command does
        cmd, env = prepare_deepspeed_cmd_env(args)
    else:
        cmd, env = None, prepare_multi_gpu_env(args)
    for key, value in env.items():
        if key.startswith(("ACCELERATE_", "FSDP_")) and os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    return defaults, cmd, env


def errors(name: str) -> list[str]:
    return [m.message for m in check_files([DIR / name]) if m.severity == "error"]


def test_inline_keys_next_to_a_config_file_stop_each_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import DeepSpeedPlugin

    launch(DIR / "pitfall_ds_file_with_inline.yaml", monkeypatch)
    with pytest.raises(ValueError, match="following accelerate config variables will be ignored"):
        DeepSpeedPlugin()
    assert len(errors("pitfall_ds_file_with_inline.yaml")) == 4


def test_mixed_precision_no_alone_is_refused_next_to_a_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from accelerate.utils import DeepSpeedPlugin

    text = (DIR / "written_deepspeed_file.yaml").read_text() + "mixed_precision: 'no'\n"
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "ds_zero2.json").write_text((DIR / "ds_zero2.json").read_text())
    launch(tmp_path / "a.yaml", monkeypatch)
    with pytest.raises(ValueError, match="will be ignored"):
        DeepSpeedPlugin()
    assert any("(even 'no')" in m.message for m in check_files([tmp_path / "a.yaml"]))


def test_the_config_file_accelerate_config_writes_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import DeepSpeedPlugin

    launch(DIR / "written_deepspeed_file.yaml", monkeypatch)
    assert DeepSpeedPlugin().deepspeed_config["zero_optimization"]["stage"] == 2
    assert check_files([DIR / "written_deepspeed_file.yaml"]) == []


def test_precision_disagreement_stops_each_process() -> None:
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config=str(DIR / "ds_bf16.json"))
    with pytest.raises(ValueError, match="cannot be set to `fp16` when `bf16` is set"):
        plugin.set_mixed_precision("fp16")


def test_a_deepspeed_config_without_zero_optimization_is_refused() -> None:
    from accelerate.utils import DeepSpeedPlugin

    with pytest.raises(ValueError, match="Please specify the ZeRO optimization config"):
        DeepSpeedPlugin(hf_ds_config=str(DIR / "ds_no_zero.json"))


def test_inline_nvme_paths_never_reach_the_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import DeepSpeedPlugin

    _, _, env = launch(DIR / "pitfall_nvme.yaml", monkeypatch)
    assert env["ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"] == "nvme"
    assert not any("NVME_PATH" in key for key in env)
    zero = DeepSpeedPlugin().deepspeed_config["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == "none"  # /mnt/nvme in the YAML


def test_fsdp1_reshard_after_forward_loses_to_the_sharding_strategy_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import FullyShardedDataParallelPlugin

    _, _, env = launch(DIR / "written_fsdp1_shard_grad_op_size_wrap.yaml", monkeypatch)
    assert env["FSDP_RESHARD_AFTER_FORWARD"] == "shard_grad_op" and env["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD"
    monkeypatch.setenv("FSDP_SYNC_MODULE_STATES", "false")  # no accelerator here to broadcast from
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.sharding_strategy.name == "FULL_SHARD"  # the Accelerator uses sharding_strategy first


def test_fsdp2_refuses_a_strategy_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.utils import FullyShardedDataParallelPlugin

    launch(DIR / "pitfall_fsdp2_strategy_name.yaml", monkeypatch)
    with pytest.raises(ValueError):
        FullyShardedDataParallelPlugin()


def test_sync_module_states_off_is_refused_by_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="set `--fsdp_sync_module_states` to `True`"):
        launch(DIR / "pitfall_fsdp_sync_module_states_off.yaml", monkeypatch)


@pytest.mark.parametrize(("name", "exception"), [("pitfall_gpu_ids_number.yaml", AttributeError)])
def test_gpu_ids_as_a_number_crashes_launch(name: str, exception: type[Exception],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(exception, match="split"):
        launch(DIR / name, monkeypatch)


def test_one_gpu_id_with_multi_gpu_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: '0'\n")
    with pytest.raises(ValueError, match="Less than two GPU ids"):
        launch(path, monkeypatch)
    assert any("Less than two GPU ids" in text for text in errors_at(path))


def errors_at(path: Path) -> list[str]:
    return [m.message for m in check_files([path]) if m.severity == "error"]


def test_missing_num_processes_is_refused_by_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="manually pass in `--num_processes`"):
        launch(DIR / "pitfall_no_num_processes.yaml", monkeypatch)


def test_use_cpu_is_not_passed_by_the_multi_gpu_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, env = launch(DIR / "pitfall_use_cpu_with_gpu.yaml", monkeypatch)
    assert env.get("ACCELERATE_USE_CPU", "False").lower() in ("false", "0")


def test_pdsh_without_hostfile_passes_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _, cmd, _ = launch(DIR / "pitfall_ds_2_machines_no_hostfile.yaml", monkeypatch)
    assert cmd is not None and cmd[:3] == ["deepspeed", "--hostfile", "None"]


MULTI_CPU = ("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_machines: 1\nmachine_rank: 0\n"
             "num_processes: 2\nuse_cpu: true\n")


def warnings_at(path: Path) -> list[str]:
    return [m.message for m in check_files([path]) if m.severity == "warning"]


def test_multi_cpu_without_an_mpirun_hostfile_starts_one_process(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    path = tmp_path / "multi_cpu.yaml"
    path.write_text(MULTI_CPU)
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(["--config_file", str(path), "t.py"]))
    # Nothing that launch_command sends to torchrun, DeepSpeed or a TPU: it takes simple_launcher, the script once.
    assert not (args.multi_gpu or args.use_deepspeed or args.use_fsdp or args.use_megatron_lm or args.tpu)
    cmd, env = prepare_simple_launcher_cmd_env(args)
    assert cmd[-1] == "t.py" and "mpirun" not in " ".join(cmd) and "WORLD_SIZE" not in env
    assert any("MULTI_CPU without mpirun_config.mpirun_hostfile starts one process per machine" in w
               for w in warnings_at(path))

    with_mpi = tmp_path / "multi_cpu_mpi.yaml"
    with_mpi.write_text(MULTI_CPU + "mpirun_config:\n  mpirun_hostfile: /etc/hosts\n")
    assert not any("mpirun_hostfile starts one process" in w for w in warnings_at(with_mpi))

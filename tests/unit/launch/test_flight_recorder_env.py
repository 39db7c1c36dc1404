"""The run's environment arms torch's flight recorder (backend/launch/environ.py: arm_flight_recorder), unless the
user switches it off or sets its variables themselves. torch 2.6+ reads TORCH_FR_BUFFER_SIZE and warns in every
rank's output where the old TORCH_NCCL_TRACE_BUFFER_SIZE is set, so the old name is set only for an older torch."""

from __future__ import annotations

from traindeck.backend.launch.environ import arm_flight_recorder, training_env


def test_the_flight_recorder_is_armed_for_every_run_by_the_name_this_torch_reads() -> None:
    env = training_env({}, base={"PATH": "/usr/bin"})  # this interpreter's torch: 2.6 or newer
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env  # torch would warn of it in every rank's output
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    for version, old_name in (("2.5.1+cu121", True), ("2.6.0", False), ("2.13.0+cpu", False), (None, False)):
        env = {}
        arm_flight_recorder(env, version)
        assert ("TORCH_NCCL_TRACE_BUFFER_SIZE" in env) == old_name, version


def test_the_users_own_values_win() -> None:
    env = training_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "64", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"},
                       base={"PATH": "/usr/bin"})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "64"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    env = training_env({}, base={"PATH": "/usr/bin", "TORCH_FR_BUFFER_SIZE": "8"})
    assert env["TORCH_FR_BUFFER_SIZE"] == "8"


def test_switched_off_nothing_is_added() -> None:
    env = training_env({"TRAINDECK_FLIGHT_RECORDER": "0"}, base={"PATH": "/usr/bin"})
    assert not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT"} & set(env)

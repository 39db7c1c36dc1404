"""The run's environment arms torch's flight recorder (backend/launch/environ.py: arm_flight_recorder), unless the
user switches it off or sets its variables themselves."""

from __future__ import annotations

from traindeck.backend.launch.environ import training_env


def test_the_flight_recorder_is_armed_for_every_run() -> None:
    env = training_env({}, base={"PATH": "/usr/bin"})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_the_users_own_values_win() -> None:
    env = training_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "64", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"},
                       base={"PATH": "/usr/bin"})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "64"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    env = training_env({}, base={"PATH": "/usr/bin", "TORCH_FR_BUFFER_SIZE": "8"})
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "8"


def test_switched_off_nothing_is_added() -> None:
    env = training_env({"TRAINDECK_FLIGHT_RECORDER": "0"}, base={"PATH": "/usr/bin"})
    assert not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT"} & set(env)

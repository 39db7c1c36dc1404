"""Memory estimator and strategy advisor: pure arithmetic (no torch at import), DeepSpeed-exact model states.

    shape = shape_from_params(parse_count("7B"))            # or count_model_config("config.json") (child process)
    machine = describe_machine(gpu_mem_bytes=80 * GIB)      # detected where not given
    rows = estimate_rows(shape, machine, Workload(micro_batch=4, seq_len=2048))
    advice = advise(rows, workload)                          # -> Advice(row, reason, preset, settings, rejected)
    check_against_machine(row, free_gpu_bytes, available_host_bytes)   # before launch: warnings
    compare_with_measured(row, monitor_summary)                         # after a run: (what, est, measured, ratio)
"""

from traindeck.backend.estimate.advisor import (
    ADVICE_ORDER,
    Advice,
    Comparison,
    Rejection,
    advise,
    check_against_machine,
    compare_with_measured,
    preset_for,
    preset_settings,
)
from traindeck.backend.estimate.estimator import (
    STRATEGIES,
    STRATEGY_BY_NAME,
    EstimateRow,
    Strategy,
    Workload,
    estimate_row,
    estimate_rows,
)
from traindeck.backend.estimate.machine import Machine, describe_machine, detect_gpus, host_memory
from traindeck.backend.estimate.model_shape import (
    ModelConfigError,
    ModelShape,
    count_model_config,
    count_model_configs,
    shape_from_params,
    with_overrides,
)
from traindeck.backend.estimate.quantity import (
    GIB,
    QuantityError,
    format_count,
    format_gib,
    parse_count,
    parse_size,
)

__all__ = [
    "ADVICE_ORDER",
    "GIB",
    "STRATEGIES",
    "STRATEGY_BY_NAME",
    "Advice",
    "Comparison",
    "EstimateRow",
    "Machine",
    "ModelConfigError",
    "ModelShape",
    "QuantityError",
    "Rejection",
    "Strategy",
    "Workload",
    "advise",
    "check_against_machine",
    "compare_with_measured",
    "count_model_config",
    "count_model_configs",
    "describe_machine",
    "detect_gpus",
    "estimate_row",
    "estimate_rows",
    "format_count",
    "format_gib",
    "host_memory",
    "parse_count",
    "parse_size",
    "preset_for",
    "preset_settings",
    "shape_from_params",
    "with_overrides",
]

from .advised_preset import AdvisedPreset as AdvisedPreset
from .advised_preset import preset_from_advice as preset_from_advice
from .advisor import (
    ADVICE_ORDER as ADVICE_ORDER,
)
from .advisor import (
    Advice as Advice,
)
from .advisor import (
    Comparison as Comparison,
)
from .advisor import (
    Rejection as Rejection,
)
from .advisor import (
    advise as advise,
)
from .advisor import (
    check_against_machine as check_against_machine,
)
from .advisor import (
    compare_with_measured as compare_with_measured,
)
from .advisor import (
    preset_for as preset_for,
)
from .advisor import (
    preset_settings as preset_settings,
)
from .estimator import (
    STRATEGIES as STRATEGIES,
)
from .estimator import (
    STRATEGY_BY_NAME as STRATEGY_BY_NAME,
)
from .estimator import (
    EstimateRow as EstimateRow,
)
from .estimator import (
    Strategy as Strategy,
)
from .estimator import (
    Workload as Workload,
)
from .estimator import (
    estimate_row as estimate_row,
)
from .estimator import (
    estimate_rows as estimate_rows,
)
from .explain import zero2_above_zero1 as zero2_above_zero1
from .inputs import (
    FIELD_LABELS as FIELD_LABELS,
)
from .inputs import (
    OPTIMIZERS as OPTIMIZERS,
)
from .inputs import (
    DetectedMachine as DetectedMachine,
)
from .inputs import (
    Estimate as Estimate,
)
from .inputs import (
    EstimateForm as EstimateForm,
)
from .inputs import (
    InputProblem as InputProblem,
)
from .inputs import (
    check_form as check_form,
)
from .inputs import (
    counted_shape as counted_shape,
)
from .inputs import (
    detect_machine as detect_machine,
)
from .inputs import (
    estimate_form as estimate_form,
)
from .machine import (
    Machine as Machine,
)
from .machine import (
    describe_machine as describe_machine,
)
from .machine import (
    detect_gpus as detect_gpus,
)
from .machine import (
    host_memory as host_memory,
)
from .model_shape import (
    ModelConfigError as ModelConfigError,
)
from .model_shape import (
    ModelShape as ModelShape,
)
from .model_shape import (
    count_model_config as count_model_config,
)
from .model_shape import (
    count_model_configs as count_model_configs,
)
from .model_shape import (
    shape_from_params as shape_from_params,
)
from .model_shape import (
    with_overrides as with_overrides,
)
from .model_states import PRECISIONS as PRECISIONS
from .prelaunch import FreeMemory as FreeMemory
from .prelaunch import LaunchMemoryCheck as LaunchMemoryCheck
from .prelaunch import check_preset as check_preset
from .prelaunch import free_memory as free_memory
from .prelaunch import preset_workload as preset_workload
from .prelaunch import read_model_size as read_model_size
from .quantity import (
    GIB as GIB,
)
from .quantity import (
    QuantityError as QuantityError,
)
from .quantity import (
    format_count as format_count,
)
from .quantity import (
    format_gib as format_gib,
)
from .quantity import (
    parse_count as parse_count,
)
from .quantity import (
    parse_size as parse_size,
)
from .run_estimate import estimate_vs_measured as estimate_vs_measured
from .run_estimate import load_estimate as load_estimate

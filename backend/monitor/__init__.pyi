from .demo import demo_machine as demo_machine
from .demo import demo_offload_view as demo_offload_view
from .demo import demo_samples as demo_samples
from .gpu_health import health_during as health_during
from .health_strip import HealthSpan as HealthSpan
from .health_strip import HealthTimeline as HealthTimeline
from .health_strip import health_row as health_row
from .health_strip import health_spans as health_spans
from .health_strip import span_at as span_at
from .health_strip import spans_by_gpu as spans_by_gpu
from .health_strip import step_at as step_at
from .live import (
    LiveSampler as LiveSampler,
)
from .live import (
    RunChoice as RunChoice,
)
from .live import (
    RunWatch as RunWatch,
)
from .live import (
    run_choices as run_choices,
)
from .live import (
    run_health_strip as run_health_strip,
)
from .live import (
    run_history as run_history,
)
from .live import (
    run_offload as run_offload,
)
from .live import (
    summarize_steps as summarize_steps,
)
from .loop import MAX_INTERVAL_S as MAX_INTERVAL_S
from .loop import MIN_INTERVAL_S as MIN_INTERVAL_S
from .loop import check_interval as check_interval
from .machine import MACHINE_EVERY_S as MACHINE_EVERY_S
from .machine import PROCESS_SORT_KEYS as PROCESS_SORT_KEYS
from .machine import MachineProcessSampler as MachineProcessSampler
from .machine import ProcessTable as ProcessTable
from .machine import short_command as short_command
from .nvml import NvmlLibrary as NvmlLibrary
from .process_signals import SIGNAL_WORDS as SIGNAL_WORDS
from .process_signals import SIGNALS as SIGNALS
from .process_signals import SignalPlan as SignalPlan
from .process_signals import plan_signal as plan_signal
from .process_signals import refusal as refusal
from .process_signals import send_signal as send_signal
from .sampler import ResourceSampler as ResourceSampler
from .snapshots import GpuHealth as GpuHealth
from .snapshots import GpuSnapshot as GpuSnapshot
from .snapshots import MachineProcess as MachineProcess
from .snapshots import MachineSnapshot as MachineSnapshot
from .snapshots import ResourceSample as ResourceSample
from .snapshots import RunSnapshot as RunSnapshot
from .store_read import read_gpu_health as read_gpu_health
from .store_read import resource_summary as resource_summary

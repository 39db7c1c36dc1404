from .control.alert_feed import Alert as Alert
from .control.alert_feed import alert_mark as alert_mark
from .control.alert_feed import alerts_after as alerts_after
from .control.compare import MAX_COMPARED as MAX_COMPARED
from .control.compare import ColumnsRow as ColumnsRow
from .control.compare import ManyComparison as ManyComparison
from .control.compare import Overlay as Overlay
from .control.compare import OverlayCurve as OverlayCurve
from .control.compare import RunComparison as RunComparison
from .control.compare import compare_many as compare_many
from .control.compare import compare_runs as compare_runs
from .control.compare import extend_overlay as extend_overlay
from .control.compare import overlay as overlay
from .control.console_feed import ConsoleBatch as ConsoleBatch
from .control.console_feed import ConsoleFeed as ConsoleFeed
from .control.disk_notice import DiskNotice as DiskNotice
from .control.disk_notice import data_disk_notice as data_disk_notice
from .control.history import (
    RunFigures as RunFigures,
)
from .control.history import (
    RunHistory as RunHistory,
)
from .control.history import (
    format_duration as format_duration,
)
from .control.history import (
    format_rate as format_rate,
)
from .control.history import (
    format_seconds_per_step as format_seconds_per_step,
)
from .control.history_table import HistoryRow as HistoryRow
from .control.history_table import HistoryTable as HistoryTable
from .control.history_table import SweepGroup as SweepGroup
from .control.history_table import TrialGroup as TrialGroup
from .control.history_table import format_metric as format_metric
from .control.history_table import higher_is_better as higher_is_better
from .control.history_table import history_table as history_table
from .control.leftbehind import summary_fields as summary_fields
from .control.lifecycle import (
    StopOutcome as StopOutcome,
)
from .control.lifecycle import (
    new_run_dir as new_run_dir,
)
from .control.lifecycle import (
    start_run as start_run,
)
from .control.lifecycle import (
    stop_run as stop_run,
)
from .control.lineage import (
    ChainPlace as ChainPlace,
)
from .control.lineage import (
    LineageIndex as LineageIndex,
)
from .control.lineage import (
    checkpoint_name as checkpoint_name,
)
from .control.lineage import (
    line_of_work as line_of_work,
)
from .control.live_rate import RateText as RateText
from .control.live_rate import rate_text as rate_text
from .control.metric_charts import MAX_SMOOTHING as MAX_SMOOTHING
from .control.metric_charts import X_MODES as X_MODES
from .control.metric_charts import ChartChoice as ChartChoice
from .control.metric_charts import LastFigure as LastFigure
from .control.metric_charts import StepClock as StepClock
from .control.metric_charts import XMode as XMode
from .control.metric_charts import ema as ema
from .control.metric_charts import filter_metrics as filter_metrics
from .control.metric_charts import last_figures as last_figures
from .control.metric_charts import masked_words as masked_words
from .control.metric_charts import moment_words as moment_words
from .control.metric_charts import page_of as page_of
from .control.metric_charts import positive_only as positive_only
from .control.metric_charts import read_metric_table as read_metric_table
from .control.metric_charts import read_step_clock as read_step_clock
from .control.metric_charts import time_x as time_x
from .control.metric_charts import write_export as write_export
from .control.metric_charts import write_metrics_csv as write_metrics_csv
from .control.metric_charts import x_values as x_values
from .control.new_run import LaunchOutcome as LaunchOutcome
from .control.new_run import launch_run as launch_run
from .control.node_report import node_text as node_text
from .control.node_report import nodes_summary as nodes_summary
from .control.relaunch import checkpoints_of as checkpoints_of
from .control.relaunch import rerun as rerun
from .control.relaunch import resume as resume
from .control.resume import ResumeError as ResumeError
from .control.resume import check_template as check_template
from .control.run_filter import RunFilter as RunFilter
from .control.run_filter import count_text as count_text
from .control.run_filter import figures_words as figures_words
from .control.run_filter import parse_filter as parse_filter
from .control.run_filter import record_words as record_words
from .control.step_view import STEP_TIMING_ENV as STEP_TIMING_ENV
from .control.step_view import StepView as StepView
from .control.step_view import read_step_view as read_step_view
from .control.step_view import run_step_anatomy as run_step_anatomy
from .control.system_series import RANKS_SUM as RANKS_SUM
from .control.system_series import SYSTEM_CHARTS as SYSTEM_CHARTS
from .control.system_series import SystemChart as SystemChart
from .control.system_series import SystemLines as SystemLines
from .control.system_series import SystemSection as SystemSection
from .control.system_series import SystemSeries as SystemSeries
from .control.system_series import ended_lines as ended_lines
from .control.system_series import read_system_series as read_system_series
from .control.system_series import read_system_table as read_system_table
from .control.system_series import system_choice as system_choice
from .control.system_series import system_export_name as system_export_name
from .control.view import RunView as RunView
from .control.view import duration_text as duration_text
from .control.view import read_view as read_view
from .control.watched_run import (
    STOPPED_TRACEBACK_NOTE as STOPPED_TRACEBACK_NOTE,
)
from .control.watched_run import (
    ViewChange as ViewChange,
)
from .control.watched_run import (
    WatchedRun as WatchedRun,
)
from .demo.history import create_demo_runs as create_demo_runs
from .demo.live import create_failed_demo as create_failed_demo
from .demo.live import create_running_demo as create_running_demo
from .diagnosis.diagnose import MEMORY_WORDS as MEMORY_WORDS
from .diagnosis.diagnose import Diagnosis as Diagnosis
from .diagnosis.diagnose import diagnose as diagnose
from .diagnosis.log_only import LogDiagnosis as LogDiagnosis
from .diagnosis.log_only import diagnose_logs as diagnose_logs
from .diagnosis.run_stacks import take_run_stacks as take_run_stacks
from .diagnosis.stacks import report_text as report_text
from .record.bundle import write_bundle as write_bundle
from .record.layout import RunDir as RunDir
from .record.log_follow import LogReader as LogReader
from .record.log_follow import follow_lines as follow_lines
from .record.provenance_diff import (
    ProvenanceComparison as ProvenanceComparison,
)
from .record.provenance_diff import (
    compare_provenance as compare_provenance,
)
from .record.run_store import RunEvent as RunEvent
from .record.run_store import RunRecord as RunRecord
from .record.run_store import RunStore as RunStore
from .record.savestop import SAVE_THEN_STOP as SAVE_THEN_STOP
from .record.savestop import request_save as request_save
from .record.savestop import save_hold_s as save_hold_s
from .record.series import BoundedSeries as BoundedSeries
from .record.series import RunningEma as RunningEma
from .record.store_rebuild import on_store_rebuilt as on_store_rebuilt
from .record.store_rebuild import store_rebuilds as store_rebuilds
from .record.sweep_mark import SweepMark as SweepMark
from .record.sweep_mark import read_sweep_mark as read_sweep_mark
from .record.sweep_mark import write_sweep_mark as write_sweep_mark
from .record.throughput import GlobalBatch as GlobalBatch
from .record.throughput import Throughput as Throughput
from .record.throughput import batch_shape as batch_shape
from .record.throughput import global_batch as global_batch
from .record.throughput import run_throughput as run_throughput
from .record.throughput import shape_json as shape_json
from .record.trial_mark import TrialMark as TrialMark
from .record.trial_mark import TrialSummary as TrialSummary
from .record.trial_mark import candidate_label as candidate_label
from .record.trial_mark import read_trial_file as read_trial_file
from .supervisor.alerts import desktop_notifications as desktop_notifications
from .supervisor.liveness import (
    INTERNAL_MODULES as INTERNAL_MODULES,
)
from .supervisor.liveness import (
    end_lost_run as end_lost_run,
)
from .supervisor.liveness import (
    reconcile as reconcile,
)
from .supervisor.liveness import (
    run_processes as run_processes,
)
from .supervisor.liveness import (
    supervisor_alive as supervisor_alive,
)
from .supervisor.loss_guard import STOP_ON_NAN_ENV as STOP_ON_NAN_ENV

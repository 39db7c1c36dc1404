"""Monitor page: real host sampling reaches the charts, the real no-GPU reason is shown, GPU charts take NVML
snapshots (a stand-in pynvml answering from a recorded GPU, swapped in at NvmlLibrary only), and a real child
process's memory reaches the run charts, live and read back from a real recording."""

from __future__ import annotations

import ctypes.util
import html
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

pytest.importorskip("PySide6")

from fixtures.monitor_run_tree import run_tree  # noqa: E402
from fixtures.nvml.fake_driver import MIB, FakePynvml, recording  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402

from traindeck.backend.monitor.live import RunChoice  # noqa: E402
from traindeck.backend.monitor.nvml import NvmlLibrary  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402
from traindeck.gui.widgets.chart_axis import format_value  # noqa: E402

GIB = 1024**3
KIB = 1024
WAIT_MS = 15000


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.2)  # fast samples keep the tests short
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    qtbot.addWidget(page)
    page.resize(1200, 800)
    yield page
    page.shutdown()
    ctx.tasks.wait(10000)


def _write_recording(run_id: str, samples: list) -> None:  # type: ignore[type-arg]
    """The samples as a run's supervisor records them: the run's resource recording in the run store."""
    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor.sample_store import ResourceWriter

    writer = ResourceWriter(run_store_path(), run_id, interval_s=1.0, started_at=samples[0].t)
    try:
        for sample in samples:
            writer.write(sample, commit=False)
        writer.commit()
    finally:
        writer.close()


def _start(page, qtbot) -> None:
    page.show()
    qtbot.waitExposed(page)
    page.page_shown()


def test_real_host_sampling_reaches_the_charts(page, qtbot):
    _start(page, qtbot)
    assert page.bridge.running and page.bridge.interval_s == pytest.approx(0.2)
    host = page.host_panel
    qtbot.waitUntil(lambda: host.cpu_chart.point_count("CPU") >= 3 and host.ram_chart.point_count("used") >= 3,
                    timeout=WAIT_MS)
    total = psutil.virtual_memory().total
    assert 0 < page.host_panel.ram_chart.last("used") < total
    assert page.host_panel.ram_chart.references()["total"] == total
    assert 0 <= page.host_panel.cpu_chart.last("CPU") <= 100
    assert page.host_panel.ram_chart.point_count("swap used") >= 3
    assert host.disk_chart.point_count("read") >= 3 and host.net_chart.point_count("received") >= 3
    assert len(page.host_panel.core_bars.values()) == psutil.cpu_count()
    assert "RAM" in page.summary.text() and f"{psutil.cpu_count()} cores" in page.summary.text()
    x, _ = page.host_panel.cpu_chart.data("CPU")
    assert abs(x[-1] - time.time()) < 10  # clock time on the x axis
    page.shutdown()
    assert not page.bridge.running


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_no_gpu_state_shows_the_real_nvml_reason_while_the_rest_works(page, qtbot):
    reason = NvmlLibrary().open()  # what the real NVML says here (off the page, in the test's own thread)
    assert reason
    _start(page, qtbot)
    qtbot.waitUntil(lambda: "No NVIDIA GPU found: " in page.gpu_panel.no_gpu_label.text(), timeout=WAIT_MS)
    assert html.escape(reason) in page.gpu_panel.no_gpu_label.text()
    assert page.gpu_panel.currentWidget() is page.gpu_panel.no_gpu_label
    assert all(chart.series_names() == [] for chart in page.gpu_panel.charts)
    qtbot.waitUntil(lambda: page.host_panel.ram_chart.point_count("used") >= 2, timeout=WAIT_MS)
    assert "no NVIDIA GPU" in page.summary.text()
    # Issue 12: the page opened on an empty GPU tab; without a GPU it shows the host (the GPU tab says why).
    assert page.tabs.currentIndex() == 1
    # The Run tab's GPU memory chart: NVML's reason in its place, not an empty 0-1 axis.
    slot = page.run_panel.rank_gpu_slot
    assert slot.currentWidget() is slot.label and f"No NVIDIA GPU found: {html.escape(reason)}." in slot.label.text()


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_the_tab_the_person_chose_comes_back_even_without_a_gpu(qtbot, traindeck_home):
    # The page opened on GPUs, empty without one, whatever the person had chosen before.
    from traindeck.gui.pages.monitor import TAB_KEY, MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.2)
    pages = []
    try:
        first = MonitorPage(AppContext(settings=settings))
        pages.append(first)
        qtbot.addWidget(first)
        _start(first, qtbot)
        qtbot.waitUntil(lambda: first.tabs.currentWidget() is first.host_panel, timeout=WAIT_MS)  # no GPU: Host
        assert settings.value(TAB_KEY) is None  # the page's own choice is not remembered
        first.tabs.tabBar().setCurrentIndex(first.tabs.indexOf(first.processes))  # as a click or Ctrl+Tab does
        assert settings.value(TAB_KEY) == "processes"
        again = MonitorPage(AppContext(settings=settings))
        pages.append(again)
        qtbot.addWidget(again)
        _start(again, qtbot)
        assert again.tabs.currentWidget() is again.processes
        qtbot.waitUntil(lambda: "No NVIDIA GPU found: " in again.gpu_panel.no_gpu_label.text(), timeout=WAIT_MS)
        assert again.tabs.currentWidget() is again.processes  # no GPU found: the person's tab stays
        again.tabs.setCurrentWidget(again.gpu_panel)
        assert settings.value(TAB_KEY) == "gpus"
        third = MonitorPage(AppContext(settings=settings))
        pages.append(third)
        qtbot.addWidget(third)
        _start(third, qtbot)
        qtbot.waitUntil(lambda: "No NVIDIA GPU found: " in third.gpu_panel.no_gpu_label.text(), timeout=WAIT_MS)
        assert third.tabs.currentWidget() is third.gpu_panel  # chosen, even if empty here
    finally:
        for page in pages:
            page.shutdown()
            page.ctx.tasks.wait(10000)


def test_gpu_charts_receive_the_values_of_nvml_snapshots(page, qtbot):
    page.bridge.gpu_library_factory = lambda: NvmlLibrary(FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0))
    _start(page, qtbot)
    qtbot.waitUntil(lambda: page.gpu_panel.pcie_h2d_chart.point_count("GPU 1") >= 2, timeout=WAIT_MS)
    assert page.gpu_panel.currentIndex() == 1
    # The recording's values in our units, as the GPU sampler converts them.
    assert page.gpu_panel.gpu_mem_chart.last("GPU 0") == 22437 * MIB
    assert page.gpu_panel.gpu_mem_chart.last("GPU 1") == 17253 * MIB
    assert page.gpu_panel.gpu_mem_chart.references() == {"total": 24564 * MIB}
    assert page.gpu_panel.gpu_power_chart.last("GPU 1") == pytest.approx(13.6)
    assert page.gpu_panel.gpu_power_chart.references() == {"limit": 230.0}
    assert page.gpu_panel.gpu_temp_chart.last("GPU 0") == 13.0
    assert page.gpu_panel.gpu_util_chart.last("GPU 0") == 0.0
    gpus = page.gpu_panel
    assert gpus.pcie_h2d_chart.last("GPU 0") == 439 * KIB and gpus.pcie_d2h_chart.last("GPU 0") == 488 * KIB
    assert page.gpu_panel.pcie_h2d_chart.last("GPU 1") == 488 * KIB
    assert page.gpu_panel.gpu_table.rowCount() == 2
    assert page.gpu_panel.gpu_table.item(0, 1).text() == "NVIDIA RTX A5000"
    assert page.gpu_panel.gpu_table.item(0, 3).text() == "21.9 GiB / 24 GiB"
    assert "2 GPUs" in page.summary.text()


def test_a_running_runs_ranks_are_sampled_live_with_their_real_memory(page, qtbot, traindeck_home):
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    with run_tree(ranks=2, mib=64) as tree:
        with RunStore() as store:
            store.add_run(RunRecord(id="live-run-1", run_dir=str(traindeck_home), created_at=time.time(),
                                    name="tree", state="running", started_at=time.time(),
                                    launcher_pid=tree["launcher"]))
        _start(page, qtbot)
        qtbot.waitUntil(lambda: page.picker.combo.count() == 2, timeout=WAIT_MS)
        assert page.picker.combo.itemData(1).id == "live-run-1" and "running" in page.picker.combo.itemText(1)
        page.picker.combo.setCurrentIndex(1)
        assert page.bridge.root_pid == tree["launcher"]
        qtbot.waitUntil(lambda: page.run_panel.rank_rss_chart.point_count("rank 1") >= 2, timeout=WAIT_MS)
        for rank in (0, 1):
            assert page.run_panel.rank_rss_chart.last(f"rank {rank}") >= 64 * MIB  # each rank touched 64 MiB
        assert page.run_panel.rank_rss_chart.last("all ranks") >= 128 * MIB
        assert page.run_panel.rank_cpu_chart.point_count("rank 0") >= 2
        # The run's totals follow each sample too, not only the recording (they stood still once).
        rss = page.run_panel.rank_rss_chart
        assert rss.last("largest rank") == max(rss.last("rank 0"), rss.last("rank 1"))
        assert rss.point_count("largest rank") == rss.point_count("all ranks") >= 2
        cpu = page.run_panel.rank_cpu_chart
        assert cpu.point_count("all ranks") >= 2
        assert cpu.last("all ranks") == pytest.approx(cpu.last("rank 0") + cpu.last("rank 1"))
        assert page.run_panel.rank_locked_chart.point_count("all ranks") >= 2
        assert "all ranks" not in page.run_panel.rank_gpu_chart.series_names()  # no GPU here: no line promising figures
        slot = page.run_panel.rank_gpu_slot
        if ctypes.util.find_library("nvidia-ml") is None:  # the reason where the chart would be, never empty axes
            assert slot.currentWidget() is slot.label and not slot.chart.isVisibleTo(page.run_panel)
            assert "No NVIDIA GPU found: " in slot.label.text()
        qtbot.waitUntil(lambda: page.run_panel.process_table.rowCount() == 3, timeout=WAIT_MS)
        table = page.run_panel.process_table
        rows = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(3)}
        assert rows == {str(tree["launcher"]): "launcher", str(tree["ranks"][0]): "rank", str(tree["ranks"][1]): "rank"}
    page.picker.choose(None)
    assert page.bridge.root_pid is None and page.run_panel.rank_rss_chart.series_names() == []


def test_a_rank_that_exits_ends_its_lines_and_its_legend_says_when_not_its_last_figure(page, qtbot, traindeck_home):
    """Rank 1 of a live run is killed (as the OOM killer ends one): its lines stop at its last sample, and its
    legends say when it exited (the Runs page System view's words and rule) in place of a figure that is no longer
    of now; the sum's legend says how many ranks it counts."""
    import os
    import signal

    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    run_panel = page.run_panel
    rss, cpu = run_panel.rank_rss_chart, run_panel.rank_cpu_chart
    with run_tree(ranks=2, mib=16) as tree:
        with RunStore() as store:
            store.add_run(RunRecord(id="live-run-3", run_dir=str(traindeck_home), created_at=time.time(),
                                    name="tree", state="running", started_at=time.time(),
                                    launcher_pid=tree["launcher"]))
        _start(page, qtbot)
        page.tabs.setCurrentWidget(run_panel)
        page.picker.choose(RunChoice("live-run-3", "tree", "running", tree["launcher"], time.time()))
        qtbot.waitUntil(lambda: rss.point_count("rank 1") >= 2, timeout=WAIT_MS)
        rss.flush()
        assert rss.legend_text("rank 1") == f"rank 1  {format_value(rss.last('rank 1'), 'B', 3)}"
        os.kill(tree["ranks"][1], signal.SIGKILL)
        qtbot.waitUntil(lambda: "exited at" in (rss.legend_text("rank 1") or ""), timeout=WAIT_MS)
        last = float(rss.data("rank 1")[0][-1])
        qtbot.waitUntil(lambda: rss.point_count("rank 0") >= rss.point_count("rank 1") + 3, timeout=WAIT_MS)
        assert float(rss.data("rank 1")[0][-1]) == last  # its line ended there; rank 0's goes on
        exited = time.strftime("%H:%M:%S", time.localtime(last))
        for chart in (rss, cpu, run_panel.rank_locked_chart):
            chart.flush()
            assert chart.legend_text("rank 1") == f"rank 1  exited at {exited}"
        assert rss.legend_text("all ranks").endswith("  (1 live)")
        assert rss.legend_text("rank 0") == f"rank 0  {format_value(rss.last('rank 0'), 'B', 3)}"
    page.picker.choose(None)


def test_a_recording_says_when_a_rank_exited_as_the_runs_page_does(page, qtbot, traindeck_home):
    """A finished run's recording in which rank 3 exited at sample 42 of 60: read back, its lines end there and its
    legends say so, at the time the Runs page's System view says (the same rule, backend SystemLines)."""
    import dataclasses

    from fixtures.monitor_samples import training_sample

    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    t0 = float(int(time.time())) - 200

    def sample(i: int):  # type: ignore[no-untyped-def]
        whole = training_sample(i, t0=t0, gpus=4, ranks=4)
        kept = tuple(p for p in whole.run.processes if i < 43 or p.rank != 3)  # rank 3 exits after sample 42
        return dataclasses.replace(whole, run=dataclasses.replace(whole.run, processes=kept))

    samples = [sample(i) for i in range(60)]
    with RunStore() as store:
        store.add_run(RunRecord(id="done-run-3", run_dir=str(traindeck_home), created_at=t0, name="done",
                                state="succeeded", started_at=t0, ended_at=samples[-1].t))
    _write_recording("done-run-3", samples)
    _start(page, qtbot)
    page.tabs.setCurrentWidget(page.run_panel)
    page.picker.choose(RunChoice("done-run-3", "done", "succeeded", None, t0))
    rss = page.run_panel.rank_rss_chart
    qtbot.waitUntil(lambda: rss.point_count("rank 0") == 60, timeout=WAIT_MS)
    assert rss.data("rank 3")[0][-1] == samples[42].t
    rss.flush()
    assert rss.legend_text("rank 3") == f"rank 3  exited at {time.strftime('%H:%M:%S', time.localtime(samples[42].t))}"
    assert rss.legend_text("all ranks").endswith("  (3 live)")


def test_a_run_picked_before_its_launcher_pid_is_recorded_is_sampled_once_it_is(page, qtbot, traindeck_home):
    """The first second of a launch: the run is listed as running before its supervisor records the launcher's pid.
    Watching it then must turn live when the pid arrives (it stayed unsampled until the run ended)."""
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    with run_tree(ranks=1, mib=16) as tree:
        with RunStore() as store:
            store.add_run(RunRecord(id="live-run-2", run_dir=str(traindeck_home), created_at=time.time(),
                                    name="early", state="running", started_at=time.time()))
        _start(page, qtbot)
        qtbot.waitUntil(lambda: page.picker.combo.count() == 2, timeout=WAIT_MS)
        page.picker.combo.setCurrentIndex(1)
        assert page.bridge.root_pid is None
        with RunStore() as store:
            store.update_run("live-run-2", launcher_pid=tree["launcher"])
        page.picker.refresh()
        qtbot.waitUntil(lambda: page.bridge.root_pid == tree["launcher"], timeout=WAIT_MS)
        qtbot.waitUntil(lambda: page.run_panel.rank_rss_chart.point_count("rank 0") >= 1, timeout=WAIT_MS)


def test_a_finished_run_is_read_back_with_its_offload_view_and_steps(page, qtbot, traindeck_home):
    from traindeck.backend.monitor.demo import demo_samples, demo_steps
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore
    from traindeck.backend.steps import StepRecord

    samples = demo_samples(seconds=180, end=time.time() - 60)
    with RunStore() as store:
        store.add_run(RunRecord(id="done-run-1", run_dir=str(traindeck_home), created_at=samples[0].t,
                                name="finished", state="succeeded", started_at=samples[0].t, ended_at=samples[-1].t))
        store.add_metrics("done-run-1", [("loss", step, t, 2.0, 0) for t, step in demo_steps(samples)])
        # Each step's phases as the ranks time them: rank 1 spends 30 ms more of its own in the optimizer.
        store.add_steps("done-run-1", [
            StepRecord(rank=rank, step=step, t=t, step_ms=100.0,
                       phases_ms={"forward": 10.0, "backward": 20.0, "communication": 40.0 - 30.0 * rank,
                                  "optimizer": 20.0 + 30.0 * rank, "swap": 0.0, "other": 10.0})
            for t, step in demo_steps(samples) for rank in (0, 1)])
    _write_recording("done-run-1", samples)

    _start(page, qtbot)
    page.picker.choose(RunChoice("done-run-1", "finished", "succeeded", None, samples[0].t))
    assert page.bridge.root_pid is None  # nothing to sample: it is read back
    qtbot.waitUntil(lambda: page.run_panel.rank_rss_chart.point_count("all ranks") > 100, timeout=WAIT_MS)
    assert page.run_panel.rank_rss_chart.last("all ranks") == pytest.approx(samples[-1].run.ranks_rss_bytes)
    assert page.run_panel.rank_rss_chart.x_window is None  # the whole run, not the live window
    qtbot.waitUntil(lambda: page.run_panel.process_table.rowCount() == 3, timeout=WAIT_MS)

    page.tabs.setCurrentWidget(page.offload)
    qtbot.waitUntil(lambda: page.offload.view.host.point_count("ranks' RSS") > 100, timeout=WAIT_MS)
    assert page.offload.view.pcie.point_count("host -> GPU") > 100 and page.offload.view.nvme.point_count("read") > 100
    assert "nvme0n1" in page.offload.view.nvme.title
    assert page.offload.view.table.rowCount() == len(demo_steps(samples)) - 1
    assert "s/step" in page.offload.view.summary.text()
    first_step_t = demo_steps(samples)[0][0]
    assert page.offload.view.step_axis.tickStrings([first_step_t], 1, 1) == ["1"]
    # The slowest rank's phases, stacked on the same time axis: the top line is the whole step.
    phases = page.offload.view.phases
    assert phases.title == "Step phases of rank 1, the slowest (stacked, ms per step); no time in swap"
    assert phases.point_count("other") == len(demo_steps(samples))
    assert phases.last("forward") == 10.0 and phases.last("communication") == 40.0
    assert phases.last("optimizer") == 90.0 and phases.last("other") == 100.0
    phases.flush()
    legend = {sample.item.name(): label.text for sample, label in phases.legend.items}
    assert legend["optimizer"] == "optimizer  50 ms" and legend["other"] == "other  10 ms"  # each part's own


def test_a_run_whose_log_has_no_step_numbers_is_stepped_by_its_timed_steps_in_coloured_bands(page, qtbot,
                                                                                            traindeck_home):
    """A DeepSpeed script that prints no loss lines: the steps its ranks timed label the step axis and make the
    per-step table; the phases are bands in their own colours, and a phase that took no time (swap without NVMe)
    is not drawn, so its line does not cover the optimizer's."""
    from traindeck.backend.monitor.demo import demo_samples, demo_steps
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore
    from traindeck.backend.steps import StepRecord
    from traindeck.gui.widgets.phase_colours import phase_colours

    samples = demo_samples(seconds=120, end=time.time() - 60)
    timed = demo_steps(samples)
    with RunStore() as store:
        store.add_run(RunRecord(id="quiet-run-1", run_dir=str(traindeck_home), created_at=samples[0].t,
                                name="quiet", state="succeeded", started_at=samples[0].t, ended_at=samples[-1].t))
        store.add_steps("quiet-run-1", [
            StepRecord(rank=rank, step=step, t=t, step_ms=100.0,
                       phases_ms={"forward": 10.0, "backward": 20.0, "communication": 30.0, "optimizer": 30.0,
                                  "swap": 0.0, "other": 10.0})
            for t, step in timed for rank in (0, 1)])
    _write_recording("quiet-run-1", samples)

    _start(page, qtbot)
    page.picker.choose(RunChoice("quiet-run-1", "quiet", "succeeded", None, samples[0].t))
    page.tabs.setCurrentWidget(page.offload)
    view = page.offload.view
    qtbot.waitUntil(lambda: view.phases.point_count("other") == len(timed), timeout=WAIT_MS)
    assert view.step_axis.tickStrings([timed[0][0], timed[-1][0]], 1, 1) == [str(timed[0][1]), str(timed[-1][1])]
    assert view.table.rowCount() == len(timed) - 1 and "s/step" in view.summary.text()
    phases = view.phases
    assert "swap" not in phases.series_names() and phases.title.endswith("; no time in swap")
    # Both ranks timed alike: one is drawn, and the title does not call it the slowest (the Step tab marks none).
    assert phases.title == "Step phases of rank 0 (ranks evenly matched; stacked, ms per step); no time in swap"
    colours = phase_colours(view)
    drawn = ["forward", "backward", "communication", "optimizer", "other"]
    assert phases.series_names() == drawn
    bottom = view.phase_curve("forward")
    assert bottom is not None and bottom.opts["fillLevel"] == 0
    assert bottom.opts["fillBrush"].color().name() == colours["forward"]
    for lower, upper in zip(drawn, drawn[1:], strict=False):
        band = view._bands[upper]
        assert band.curves == [view.phase_curve(lower), view.phase_curve(upper)]
        assert band.brush().color().name() == colours[upper]
        assert view.phase_curve(upper).opts["fillLevel"] is None  # no fill down to zero over the bands below
    # The dark theme: the phases drawn again in its colours (the light ones are too dark on near-black).
    from PySide6.QtGui import QColor, QPalette

    from traindeck.gui.widgets.phase_colours import PHASE_COLOURS_DARK

    dark = QPalette(view.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor("#121212"))
    view.setPalette(dark)
    for name in drawn:
        assert view.phase_curve(name).opts["pen"].color().name() == PHASE_COLOURS_DARK[name]
    assert view._bands["backward"].brush().color().name() == PHASE_COLOURS_DARK["backward"]
    assert view._bands["backward"].curves == [view.phase_curve("forward"), view.phase_curve("backward")]


def test_a_page_opened_on_the_offload_tab_reads_the_run_chosen(qtbot, traindeck_home):
    """The person left the Monitor on its Offload tab: the next session opens on it, and a run chosen there is read
    (not "Choose a run above" beside the chosen run)."""
    from traindeck.backend.monitor.demo import demo_samples, demo_steps
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore
    from traindeck.backend.steps import StepRecord
    from traindeck.gui.pages.monitor import TAB_KEY, MonitorPage

    samples = demo_samples(seconds=120, end=time.time() - 60)
    assert demo_steps(samples)
    with RunStore() as store:
        store.add_run(RunRecord(id="again-run-1", run_dir=str(traindeck_home), created_at=samples[0].t,
                                name="again", state="succeeded", started_at=samples[0].t, ended_at=samples[-1].t))
        store.add_steps("again-run-1", [
            StepRecord(rank=0, step=step, t=t, step_ms=50.0, phases_ms={"forward": 20.0, "backward": 30.0})
            for t, step in demo_steps(samples)])
    _write_recording("again-run-1", samples)
    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue(TAB_KEY, "offload")
    ctx = AppContext(settings=settings)
    page = MonitorPage(ctx)
    qtbot.addWidget(page)
    try:
        page.resize(1200, 800)
        _start(page, qtbot)
        assert page.tabs.currentWidget() is page.offload
        page.picker.choose(RunChoice("again-run-1", "again", "succeeded", None, samples[0].t))
        qtbot.waitUntil(lambda: page.offload.view.phases.point_count("backward") > 0, timeout=WAIT_MS)
        assert page.offload.view.stack.currentIndex() == 1
    finally:
        page.shutdown()
        ctx.tasks.wait(10000)


def test_a_recording_that_outlived_its_ranks_says_when_they_ended_in_the_legends(page, qtbot, traindeck_home):
    """A lost run's recording ends with samples taken after its ranks had gone (host figures only): the run's totals
    end in a gap there, and their legends say when they ended, as the ranks' own lines say when they exited (the
    Runs page System view's words), not a blank for the gap."""
    import dataclasses

    from traindeck.backend.monitor.demo import demo_samples
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    ran = demo_samples(seconds=30, end=time.time() - 60)
    after = [dataclasses.replace(ran[-1], t=ran[-1].t + k, run=None) for k in (1, 2, 3)]
    with RunStore() as store:
        store.add_run(RunRecord(id="lost-run-1", run_dir=str(traindeck_home), created_at=ran[0].t, name="lost",
                                state="lost", started_at=ran[0].t, ended_at=after[-1].t))
    _write_recording("lost-run-1", ran + after)

    _start(page, qtbot)
    page.tabs.setCurrentWidget(page.run_panel)
    page.picker.choose(RunChoice("lost-run-1", "lost", "lost", None, ran[0].t))
    rss, cpu = page.run_panel.rank_rss_chart, page.run_panel.rank_cpu_chart
    qtbot.waitUntil(lambda: rss.point_count("all ranks") == len(ran) + len(after), timeout=WAIT_MS)
    assert np.isnan(rss.data("all ranks")[1][-1])  # the gap after the ranks
    rss.flush()
    cpu.flush()
    gone = time.strftime("%H:%M:%S", time.localtime(ran[-1].t))
    assert rss.legend_text("all ranks") == f"all ranks  ended at {gone}"
    assert rss.legend_text("largest rank") == f"largest rank  ended at {gone}"
    assert cpu.legend_text("all ranks") == f"all ranks  ended at {gone}"
    assert rss.legend_text("rank 0") == cpu.legend_text("rank 0") == f"rank 0  exited at {gone}"


def test_estimate_is_drawn_as_reference_lines_and_removed(page):
    page.set_estimate(20 * GIB, 40 * GIB)
    for chart in (page.gpu_panel.gpu_mem_chart, page.run_panel.rank_gpu_chart):
        assert chart.references()["estimate"] == 20 * GIB
    for chart in (page.run_panel.rank_rss_chart, page.host_panel.ram_chart, page.offload.view.host):
        assert chart.references()["estimate"] == 40 * GIB
    page.set_estimate(None, None)
    for chart in (page.gpu_panel.gpu_mem_chart, page.run_panel.rank_gpu_chart, page.run_panel.rank_rss_chart,
                  page.host_panel.ram_chart, page.offload.view.host):
        assert "estimate" not in chart.references()


def test_host_sampling_goes_on_while_the_page_is_hidden_and_the_charts_have_every_second_on_return(page, qtbot):
    """Issue 26: the host charts had holes for the time the page was hidden (sampling stopped after a minute)."""
    _start(page, qtbot)
    cpu = page.host_panel.cpu_chart
    qtbot.waitUntil(lambda: cpu.point_count("CPU") >= 2, timeout=WAIT_MS)
    page.hide()
    hidden_at = time.time()
    assert page.bridge.running and page.bridge._sampler.interval_s == 1.0  # 1 Hz while nobody looks (0.2 s shown)
    qtbot.wait(4500)
    back = time.time()
    page.show()
    page.page_shown()
    assert page.bridge._sampler.interval_s == pytest.approx(0.2)
    x, y = cpu.data("CPU")
    while_hidden = x[(x > hidden_at) & (x < back)]
    assert 3 <= len(while_hidden) <= 6  # every second of the 4.5 s, at one sample a second
    assert not np.isnan(y[x > hidden_at]).any()  # no gap
    assert np.diff(while_hidden).max() < 1.5
    for chart, name in ((page.host_panel.ram_chart, "used"), (page.host_panel.net_chart, "received")):
        xs = chart.data(name)[0]
        assert len(xs[(xs > hidden_at) & (xs < back)]) >= 3


def test_the_first_open_shows_a_window_that_fits_what_was_sampled(page, qtbot):
    """Issue 26: on first open the 10-minute window showed a sliver of data at its right end."""
    assert page.toolbar.window_s == 600
    _start(page, qtbot)
    cpu = page.host_panel.cpu_chart
    qtbot.waitUntil(lambda: cpu.point_count("CPU") >= 15, timeout=WAIT_MS)  # 3 s at 0.2 s
    x, _ = cpu.data("CPU")
    # What was sampled (ten samples at least: 3 s, longer on a loaded machine), not ten minutes.
    sampled_s = x[-1] - x[0]
    assert 2.0 <= cpu.x_window <= max(5.0, sampled_s + 2.0) < 600, (cpu.x_window, sampled_s)
    cpu.flush()
    low, high = cpu.plot_item.getViewBox().viewRange()[0]
    assert high - low < cpu.x_window + 5 and low <= x[0] + 1  # the data spans the chart
    assert page.gpu_panel.gpu_util_chart.x_window == cpu.x_window
    # A window chosen shorter than what was sampled is shown as chosen; a longer one fits the samples again.
    page._sampled_since = time.time() - 120
    page.toolbar.window_combo.setCurrentText("1 min")
    assert cpu.x_window == 60
    page.toolbar.window_combo.setCurrentText("1 hour")
    assert 120 <= cpu.x_window < 130
    # A chart the person zoomed keeps its view.
    view = cpu.plot_item.getViewBox()
    view.setXRange(x[0], x[0] + 1)
    view.sigRangeChangedManually.emit([True, False])  # what a mouse zoom emits
    assert not cpu.following
    window = cpu.x_window
    qtbot.waitUntil(lambda: cpu.point_count("CPU") >= 20, timeout=WAIT_MS)
    assert cpu.x_window == window and not cpu.following


def _choice(run_id: str, state: str, started: float) -> RunChoice:
    return RunChoice(run_id, f"train_tiny · {state}", state, 4242 if state == "running" else None, started)


def test_watch_run_follows_the_running_run_unless_the_person_picked_one(page):
    """Issue 12: "Watch run" stayed on None (or on a finished run) while a run was running."""
    model = page.picker.model
    done = _choice("done-1", "succeeded", 100.0)
    first = _choice("run-1", "running", 200.0)
    # Nothing watched, one run running: watch it.
    assert page.picker.run_to_follow([first, done]) == "run-1"
    model.watched = first
    assert page.picker.run_to_follow([first, done]) is None  # already watching it
    model.known_running = {"run-1"}
    # It finished and another started: follow the new one.
    model.watched = _choice("run-1", "succeeded", 200.0)
    second = _choice("run-2", "running", 300.0)
    assert page.picker.run_to_follow([second, model.watched, done]) == "run-2"
    # The person picked a finished run while run-2 runs: that holds...
    model.watched, model.pinned, model.known_running = done, True, {"run-2"}
    assert page.picker.run_to_follow([second, done]) is None
    # ...until a new run starts.
    third = _choice("run-3", "running", 400.0)
    assert page.picker.run_to_follow([third, second, done]) == "run-3"
    # A run launched from this window is watched as soon as it is listed, even over a pick.
    model.pinned, model.known_running = True, {"run-3", "run-2"}
    page.picker.run_started("run-2")
    assert page.picker.run_to_follow([third, second, done]) == "run-2"


def test_interval_setting_restarts_sampling_and_is_remembered(page, qtbot):
    _start(page, qtbot)
    page.toolbar.interval_spin.setValue(0.5)
    assert page.bridge.running and page.bridge.interval_s == 0.5
    assert float(page.ctx.settings.value("monitor/interval")) == 0.5
    page.toolbar.window_combo.setCurrentText("1 hour")
    assert page.host_panel.cpu_chart.x_window == 3600
    assert page.ctx.settings.value("monitor/window") == "1 hour"


def test_demo_fills_every_chart_including_a_gpu_section(page, qtbot):
    _start(page, qtbot)
    page.load_demo()
    assert not page.bridge.running and page.toolbar.demo_label.isVisibleTo(page)
    for chart in page.gpu_panel.charts + page.host_panel.charts + page.run_panel.charts:
        assert chart.series_names() and all(chart.point_count(n) > 100 for n in chart.series_names()), chart.title
    assert page.gpu_panel.currentIndex() == 1 and page.gpu_panel.gpu_table.rowCount() == 2
    assert page.run_panel.process_table.rowCount() == 3
    table = page.processes.table  # the machine's processes: the run's three highlighted among the others
    assert len(table.rows) > 5 and sum(table.watched(p) for p in table.rows) == 3
    qtbot.waitUntil(lambda: page.offload.view.table.rowCount() > 50, timeout=WAIT_MS)
    assert page.offload.view.host.point_count("ranks' RSS") > 100
    page.page_shown()  # showing the page again keeps the demo (no live sampling mixed in)
    assert not page.bridge.running


def test_offload_step_labels_keep_their_distance():
    """Issue 12: steps crowded in time drew their labels into one another ("246800")."""
    from traindeck.gui.widgets.offload_view import MIN_LABEL_GAP_PX, spaced

    times = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 5.0, 10.0])  # a burst of steps, then steady ones
    chosen = spaced(times, 0.0, 10.0, 500.0)  # 50 px per second
    assert chosen == [0.0, 5.0, 10.0]
    pixels = np.diff(np.array(chosen)) * 50
    assert (pixels >= MIN_LABEL_GAP_PX).all()
    assert spaced(times, 5.0, 5.0, 500.0) == []


def test_demo_offload_without_gpu_samples_has_no_empty_series(page, qtbot):
    from traindeck.backend.monitor.demo import demo_offload_view, demo_samples

    view = dict(demo_offload_view(demo_samples()))
    view["gpu_error"] = "NVML Shared Library Not Found: libnvidia-ml.so.1 is not on this machine (no NVIDIA driver)"
    page.offload.view.set_view(view)
    assert page.offload.view.gpu.series_names() == []  # no lone legend mark beside "none recorded"
    assert page.offload.view.gpu.title == "GPU utilisation: none recorded"
    assert "libnvidia-ml" in page.offload.view.gpu.toolTip()
    assert page.offload.view.pcie.series_names() == [] and "none recorded" in page.offload.view.pcie.title
    assert page.offload.view.table.isColumnHidden(2) and not page.offload.view.table.isColumnHidden(4)
    # Not two empty charts saying "waiting for data" for a run that will never have any: hidden, and said why.
    assert page.offload.view.gpu.isHidden() and page.offload.view.pcie.isHidden()
    assert not page.offload.view.note.isHidden()
    assert page.offload.view.note.text().startswith("No GPU recorded, so no PCIe or GPU utilisation chart: NVML")


def test_a_run_timed_off_says_why_it_has_no_step_phases(page, qtbot, traindeck_home):
    import json

    from traindeck.backend.core.fileio import atomic_write_text
    from traindeck.backend.monitor.demo import demo_samples
    from traindeck.backend.runs import STEP_TIMING_ENV
    from traindeck.backend.runs.record.layout import create_run_dir
    from traindeck.backend.runs.record.run_store import RunRecord, RunStore

    samples = demo_samples(seconds=60, end=time.time() - 60)
    run_dir = create_run_dir()
    run_dir.output.write_bytes(b"")
    atomic_write_text(run_dir.command, json.dumps({"argv": ["python", "train.py"], "env": {STEP_TIMING_ENV: "0"}}))
    with RunStore() as store:
        store.add_run(RunRecord(id=run_dir.run_id, run_dir=str(run_dir.path), created_at=samples[0].t,
                                name="untimed", state="succeeded", started_at=samples[0].t, ended_at=samples[-1].t))
    _write_recording(run_dir.run_id, samples)

    _start(page, qtbot)
    page.picker.choose(RunChoice(run_dir.run_id, "untimed", "succeeded", None, samples[0].t))
    page.tabs.setCurrentWidget(page.offload)
    view = page.offload.view
    qtbot.waitUntil(lambda: view.host.point_count("ranks' RSS") > 10, timeout=WAIT_MS)
    assert view.phases.isHidden() and not view.note.isHidden()
    assert "No step phases to draw: step timing was off for this run (--no-step-timing)." in view.note.text()


@pytest.mark.launch
def test_a_run_launched_while_the_page_is_hidden_shows_its_recording_when_the_page_is_back(page, qtbot):
    """Issue: the Monitor visited once, a run launched from the Launch page, the Monitor shown again 45 s later:
    the Run tab said "nothing recorded yet; sampling live" and its charts started at the return, Refresh too, while
    the run store held the samples of those seconds. The tab must show the recording since the run started, then
    go on live; Refresh reads the recording again (here: the seconds sampling was stopped)."""
    from support.runhelp import python_job, wait_finished, wait_until

    from traindeck.backend.core.paths import run_store_path
    from traindeck.backend.monitor.store_read import read_series
    from traindeck.backend.runs.control.lifecycle import stop_run
    from traindeck.backend.runs.record.run_store import RunStore

    def recorded() -> np.ndarray:
        return read_series(run_store_path(), run.id)["t"]

    def before(t: float) -> np.ndarray:
        x, y = page.run_panel.rank_rss_chart.data("all ranks")
        return x[(x < t) & ~np.isnan(y)]

    _start(page, qtbot)  # the Monitor visited once
    page.hide()  # another page shown
    page.stop_sampling()  # sampling stopped meanwhile (the page samples on while hidden; a stop leaves seconds unsampled)
    run = python_job("--steps", "150", "--step-time", "0.1")  # ~15 s
    try:
        with RunStore() as store:  # listed live, as the "sampling live" says it was
            wait_until(lambda: (store.get_run(run.id) or run).launcher_pid, timeout=30)
        page.ctx.run_started.emit(run.id)  # as the Launch page does
        qtbot.waitUntil(lambda: page.picker.watched is not None and page.picker.watched.id == run.id, timeout=WAIT_MS)
        assert page.picker.watched.live
        wait_until(lambda: len(recorded()) >= 4, timeout=30)  # the run records while the page is hidden

        back = time.time()
        page.show()
        page.page_shown()
        qtbot.waitUntil(lambda: len(before(back)) >= 3, timeout=WAIT_MS)
        assert "nothing recorded" not in page.run_panel.run_title.text()
        assert "sampled live" in page.run_panel.run_title.text()
        assert before(back)[0] < back - 2 and before(back)[-1] > back - 3  # the recording up to the return
        rss = page.run_panel.rank_rss_chart
        qtbot.waitUntil(lambda: rss.data("all ranks")[0][-1] > back + 1, timeout=WAIT_MS)  # and on live
        assert any(name != "all ranks" and rss.point_count(name) for name in rss.series_names())  # the ranks' lines

        # Sampling stopped for a few seconds: Refresh reads what the run recorded meanwhile.
        page.stop_sampling()
        stopped = rss.data("all ranks")[0][-1]
        wait_until(lambda: recorded()[-1] > stopped + 2.5, timeout=30)
        page.picker.refresh_button.click()
        qtbot.waitUntil(lambda: len(before(np.inf)[before(np.inf) > stopped]) >= 2, timeout=WAIT_MS)
        assert "nothing recorded" not in page.run_panel.run_title.text()
    finally:
        with RunStore() as store:
            record = store.get_run(run.id)
            if record is not None and not record.finished:
                stop_run(store, run.id, grace_s=1.0, wait=False)
        wait_finished(run.id, 60)


def test_recorded_totals_fill_what_live_samples_do_not_cover():
    from traindeck.gui.pages.monitor.run_panel import with_recording

    t = np.arange(0.0, 10.0)  # recorded every second from 0 to 9
    values = t * 10
    # Live from 3 to 4, a break (sampling stopped while hidden) at 8, live again from 8.5.
    x = np.array([3.2, 4.2, 8.0, 8.5, 9.5])
    y = np.array([1.0, 2.0, np.nan, 3.0, 4.0])
    jx, jy = with_recording(t, values, x, y)
    assert list(jx) == [0, 1, 2, 3, 3.2, 4.2, 5, 6, 7, 8, 8.5, 9.5]  # 4 and 9 fall in a live stretch
    assert list(jy) == [0, 10, 20, 30, 1, 2, 50, 60, 70, 80, 3, 4]  # the filled gap loses its NaN
    # Nothing recorded in a gap: its NaN stays; nothing live: the recording whole.
    jx, jy = with_recording(np.array([0.0, 1.0]), np.array([5.0, 6.0]), x, y)
    assert np.isnan(jy[list(jx).index(8.0)])
    assert list(with_recording(t, values, np.empty(0), np.empty(0))[0]) == list(t)


def _record(run_id: str, name: str, started: float, *, state: str = "running", supervisor: tuple[int, float] | None
            = None, launcher: int | None = None):  # type: ignore[no-untyped-def]
    """A run record as a supervisor writes it: `supervisor` (pid, start time) alive or not; none: this process."""
    from traindeck.backend.runs.record.run_store import RunRecord

    me = psutil.Process()
    pid, since = supervisor or (me.pid, me.create_time())
    return RunRecord(id=run_id, run_dir=f"/nonexistent/{run_id}", created_at=started, started_at=started, name=name,
                     state=state, supervisor_pid=pid, supervisor_started=since, launcher_pid=launcher,
                     exit_code=None if state == "running" else 0)


def _ended_process() -> tuple[int, float]:
    """The pid and start time of a real process that has ended (a supervisor that died without a word)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = psutil.Process(proc.pid).create_time()
    proc.stdin.close()
    proc.wait(10)
    return proc.pid, started


def test_watch_run_opens_on_the_newest_live_run_not_a_newer_one_whose_supervisor_is_gone(page, qtbot):
    """A run left "running" by a supervisor that died (a stopped machine, a kill -9) is newer than the run started
    from the CLI that is running now: the page watches the live one, and lists the other as lost."""
    from traindeck.backend.runs.record.run_store import RunStore

    now = time.time()
    with run_tree(ranks=1, mib=1) as tree:
        with RunStore() as store:
            store.add_run(_record("20260101-100000-aaaa", "cli-run", now - 60, launcher=tree["launcher"]))
            store.add_run(_record("20260101-110000-bbbb", "dead-run", now - 5, supervisor=_ended_process(),
                                  launcher=tree["launcher"]))
        _start(page, qtbot)
        qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)
        assert page.picker.watched.id == "20260101-100000-aaaa" and page.picker.watched.live
        assert page.bridge.root_pid == tree["launcher"]
        lost = next(page.picker.combo.itemData(i) for i in range(1, page.picker.combo.count())
                    if page.picker.combo.itemData(i).id == "20260101-110000-bbbb")
        assert lost.state == "lost" and not lost.live and "lost" in lost.label


def test_a_run_launched_here_that_ended_gives_way_to_a_newer_live_run_from_the_cli(page, qtbot):
    """The Launch page started a run that was stopped, then a run was started from the CLI: the Monitor, shown
    afterwards, watches the live CLI run, not the stopped one it was told about."""
    from traindeck.backend.runs.record.run_store import RunStore

    now = time.time()
    with run_tree(ranks=1, mib=1) as tree:
        with RunStore() as store:
            store.add_run(_record("20260101-100000-aaaa", "from-here", now - 60, state="stopped"))
            store.add_run(_record("20260101-110000-bbbb", "from-cli", now - 5, launcher=tree["launcher"]))
        page.ctx.run_started.emit("20260101-100000-aaaa")  # as the Launch page says it, before the page is shown
        _start(page, qtbot)
        qtbot.waitUntil(lambda: page.picker.watched is not None and page.picker.combo.count() == 3, timeout=WAIT_MS)
        page.picker.refresh()
        qtbot.waitUntil(lambda: page.ctx.tasks.waiting == 0, timeout=WAIT_MS)
        assert page.picker.watched.id == "20260101-110000-bbbb" and page.bridge.root_pid == tree["launcher"]


def test_without_a_live_run_the_newest_run_is_watched(page, qtbot):
    from traindeck.backend.runs.record.run_store import RunStore

    now = time.time()
    with RunStore() as store:
        store.add_run(_record("20260101-100000-aaaa", "older", now - 60, state="succeeded"))
        store.add_run(_record("20260101-110000-bbbb", "newer", now - 5, state="stopped"))
    _start(page, qtbot)
    qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)
    assert page.picker.watched.id == "20260101-110000-bbbb" and not page.picker.watched.live


def test_when_the_watched_run_ends_the_live_one_is_watched_and_said_and_a_pick_is_offered_it(page, qtbot):
    from traindeck.backend.runs.record.run_store import RunStore

    now = time.time()
    with run_tree(ranks=1, mib=1) as first, run_tree(ranks=1, mib=1) as second:
        with RunStore() as store:
            store.add_run(_record("20260101-100000-aaaa", "other", now - 60, launcher=second["launcher"]))
            store.add_run(_record("20260101-110000-bbbb", "watched", now - 5, launcher=first["launcher"]))
        _start(page, qtbot)
        qtbot.waitUntil(lambda: page.picker.watched is not None, timeout=WAIT_MS)
        assert page.picker.watched.id == "20260101-110000-bbbb" and page.picker.note.isHidden()
        with RunStore() as store:
            store.finish_run("20260101-110000-bbbb", "stopped")
        page.picker.refresh()
        qtbot.waitUntil(lambda: page.picker.watched.id == "20260101-100000-aaaa", timeout=WAIT_MS)
        assert page.bridge.root_pid == second["launcher"]
        assert not page.picker.note.isHidden()
        assert "watched ·bbbb ended (stopped)" in page.picker.note.text() and "other ·aaaa" in page.picker.note.text()
        assert page.picker.note.toolTip() == page.picker.note.text()  # the whole note, where the bar cuts it
        assert page.picker.watch_live.isHidden()  # already watching it: nothing to offer
        # Long run names never widen the bar (and so the window) past the screen: the note is cut instead.
        narrow = page.picker.minimumSizeHint().width()
        page.picker.note.setText(page.picker.note.text() * 12)
        assert page.picker.minimumSizeHint().width() == narrow

        # The person goes back to the ended run: it holds, and the live run is offered.
        index = next(i for i in range(1, page.picker.combo.count())
                     if page.picker.combo.itemData(i).id == "20260101-110000-bbbb")
        page.picker.combo.setCurrentIndex(index)
        page.picker.combo.activated.emit(index)
        page.picker.refresh()
        qtbot.waitUntil(lambda: page.ctx.tasks.waiting == 0, timeout=WAIT_MS)
        assert page.picker.watched.id == "20260101-110000-bbbb"
        assert "other ·aaaa is running" in page.picker.note.text() and not page.picker.watch_live.isHidden()
        page.picker.watch_live.click()
        assert page.picker.watched.id == "20260101-100000-aaaa" and page.bridge.root_pid == second["launcher"]
        assert page.picker.note.isHidden()

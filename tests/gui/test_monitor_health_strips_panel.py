"""The GPUs tab's health strips, offscreen: a run recorded over the fake NVIDIA driver (GPU 0 throttled at its
power cap, then at its thermal limit; GPU 1's link trained down to Gen2 x8 while busy, then an XID 79), its
timed steps in the run store; the panel watches the run and draws each GPU's states on the utilisation chart's
time axis with the step ends as ticks. The screenshot is kept at /tmp/s14-health.png."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from fixtures.nvml.fake_driver import FakePynvml, recording  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402

from traindeck.backend.core.paths import run_store_path  # noqa: E402
from traindeck.backend.monitor import ResourceSample, RunChoice  # noqa: E402
from traindeck.backend.monitor.nvml import NvmlLibrary  # noqa: E402
from traindeck.backend.monitor.sample_store import ResourceWriter  # noqa: E402
from traindeck.backend.monitor.sampler import ResourceSampler  # noqa: E402
from traindeck.backend.runs.record.run_store import RunRecord, RunStore  # noqa: E402
from traindeck.backend.steps import PHASES, StepRecord  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402

RUN = "20261127-194500-4ea1"
EVERY_S = 5.0  # the recording's sample spacing (its times are laid out so, from the real samples taken)
SCREENSHOT = Path("/tmp/s14-health.png")


def at(sample: ResourceSample, t: float) -> ResourceSample:
    """The sample as if taken at `t` (the recording spans minutes without the test waiting them)."""
    gpus = tuple(dataclasses.replace(g, t=t, pcie_t=t) for g in sample.gpus)
    return dataclasses.replace(sample, t=t, gpus=gpus)


def record_run(start: float) -> list[ResourceSample]:
    """Samples of the fake driver's two A5000s through the recorder's writer, 40 of them EVERY_S apart."""
    fake = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    driver = fake.driver
    sampler = ResourceSampler(lambda: None, gpu_library=NvmlLibrary(fake, host_pid_namespace=True), interval_s=0.1)
    writer = ResourceWriter(run_store_path(), RUN, interval_s=EVERY_S, started_at=start)
    samples = []
    sampler.start()
    try:
        for n in range(40):
            for gpu in (0, 1):
                driver.gpus[gpu]["utilization"]["gpu"] = 95 if n >= 2 else 0
                if n == 2:  # busy: the link leaves its resting Gen1 for its Gen4 (as the A5000s do)
                    driver.set_health(gpu, pcie_gen=4)
            if n == 8:
                driver.set_health(0, clocks_event_reasons=["sw_power_cap"])
            if n == 12:
                driver.set_health(0, clocks_event_reasons=["hw_thermal_slowdown"])
            if n == 16:
                driver.set_health(0, clocks_event_reasons=[])
            if n == 20:
                driver.set_health(1, pcie_gen=2, pcie_width=8)
            if n == 28:
                driver.set_health(1, pcie_gen=4, pcie_width=16)
            if n == 33:
                driver.raise_xid(1, 79)
            sample = at(sampler.sample(), start + EVERY_S * n)
            if sample.gpus[1].health is not None and sample.gpus[1].health.xid:
                health = dataclasses.replace(sample.gpus[1].health, xid=tuple(
                    {**e, "t": start + EVERY_S * 33} for e in sample.gpus[1].health.xid))
                sample = dataclasses.replace(sample, gpus=(sample.gpus[0],
                                                           dataclasses.replace(sample.gpus[1], health=health)))
            writer.write(sample)
            samples.append(sample)
    finally:
        sampler.stop()
        writer.close()
    return samples


@pytest.fixture
def panel(qtbot, traindeck_home: Path):  # type: ignore[no-untyped-def]
    from traindeck.gui.pages.monitor.gpus_panel import GpuPanel

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    panel = GpuPanel(AppContext(settings=settings))
    qtbot.addWidget(panel)
    panel.resize(1200, 820)
    yield panel
    panel.pause()
    panel.ctx.tasks.wait(30000)


def test_each_gpus_strip_shows_its_throttling_slow_link_and_xid_over_the_runs_steps(panel, qtbot) -> None:
    start = time.time() - 600
    with RunStore() as store:
        store.add_run(RunRecord(id=RUN, run_dir=str(run_store_path().parent), created_at=start, name="hot",
                                state="failed"))
    samples = record_run(start)
    phases = {p: 0.0 for p in PHASES} | {"forward": 4000.0, "backward": 6000.0}
    with RunStore() as store:  # a step every 10 s from 15 s on, timed on rank 0 (rank 1 a little later)
        store.add_steps(RUN, [StepRecord(rank=rank, step=n, t=start + 5 + 10 * n + rank, step_ms=10_000.0,
                                         phases_ms=dict(phases)) for n in range(1, 19) for rank in (0, 1)])
    panel.show()
    qtbot.waitExposed(panel)
    for n, sample in enumerate(samples):  # charted as live samples (the strips take their readings too)
        panel.show_sample(sample, tables=n == len(samples) - 1)
    panel.set_window(EVERY_S * 40)
    panel.watch(RunChoice(RUN, "hot", "failed", None, start))
    strips = panel.health_strips
    qtbot.waitUntil(lambda: strips.steps != [], timeout=15000)

    states = {gpu: [(s.state, s.reasons, round(s.start - start), round(s.end - start)) for s in spans]
              for gpu, spans in strips.spans.items()}
    assert states[0] == [("ok", (), 0, 40), ("throttled", ("sw_power_cap",), 40, 60),
                         ("throttled", ("hw_thermal_slowdown",), 60, 80), ("ok", (), 80, 195)]
    assert states[1] == [("ok", (), 0, 100), ("pcie", (), 100, 140), ("ok", (), 140, 165), ("xid", ("79",), 165, 167),
                         ("ok", (), 167, 195)]
    # Hovering says the state, why, and the step then running (rank 0's: a step ends every 10 s from 15 s on).
    assert strips.hover_text(0, start + 50) == "GPU 0: throttled: power cap · step 5"
    assert strips.hover_text(0, start + 70) == "GPU 0: throttled: thermal (hardware) · step 7"
    assert strips.hover_text(1, start + 120) == "GPU 1: PCIe link at Gen2 x8 of Gen4 x16 while busy · step 12"
    assert strips.hover_text(1, start + 166) == "GPU 1: XID 79 · step 17"
    # On the utilisation chart's time axis, with a tick per step end in view.
    panel.gpu_util_chart.flush()
    chart_range = panel.gpu_util_chart.plot_item.getViewBox().viewRange()[0]
    for strip in strips.strips.values():
        assert strip.widget.getPlotItem().getViewBox().viewRange()[0] == pytest.approx(chart_range)
        x, _y = strip.ticks.getData()
        assert sorted(set(x.tolist())) == [start + 5 + 10 * n for n in range(1, 19)
                                           if chart_range[0] <= start + 5 + 10 * n <= chart_range[1]]
    assert strips.strips[0].widget.mapToGlobal(strips.strips[0].widget.rect().topLeft()).x() < \
        panel.gpu_util_chart.mapToGlobal(panel.gpu_util_chart.rect().topRight()).x()
    qtbot.wait(200)
    assert panel.grab().save(str(SCREENSHOT))

"""What the Monitor page's GPU panel says for each driver case, through the real sampling loop and the real pynvml
over a fake driver: versions, a GPU this job may not open, a GPU lost mid-run, process lists NVML refuses,
and GPUs appearing once the driver loads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from fixtures.nvml.fake_driver import FakeDriver, FakePynvml, install, no_driver, recording  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402

from traindeck.backend.monitor.nvml import NvmlLibrary  # noqa: E402
from traindeck.gui.context import AppContext  # noqa: E402

WAIT_MS = 15000


@pytest.fixture
def page(qtbot, traindeck_home: Path):
    from traindeck.gui.pages.monitor import MonitorPage

    settings = QSettings(str(traindeck_home / "window.ini"), QSettings.Format.IniFormat)
    settings.setValue("monitor/interval", 0.2)
    page = MonitorPage(AppContext(settings=settings))
    qtbot.addWidget(page)
    page.resize(1200, 800)
    yield page
    page.shutdown()


def _start(page, qtbot, module, **options) -> None:
    options.setdefault("host_pid_namespace", True)
    page.bridge.gpu_library_factory = lambda: NvmlLibrary(module, **options)
    page.show()
    qtbot.waitExposed(page)
    page.page_shown()


def _cell(page, row: int, column: int) -> str:
    item = page.gpu_panel.gpu_table.item(row, column)
    return "" if item is None else item.text()


def test_versions_and_a_gpu_this_job_may_not_open(page, qtbot):
    module = FakePynvml(recording("dual_rtx_a5000"), no_permission=(0,), pcie_delay_s=0)
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: page.gpu_panel.gpu_table.rowCount() == 2 and _cell(page, 1, 9) == "1", timeout=WAIT_MS)
    note = page.gpu_panel.gpu_note.text()
    assert "NVIDIA driver 590.44.01" in note and "CUDA 13.1" in note and "NVML 13.590.44.01" in note
    assert "GPU 0: no permission to open this GPU" in note
    assert "no permission" in _cell(page, 0, 1) and _cell(page, 0, 3) == "-"
    assert _cell(page, 1, 3) == "16.8 GiB / 24 GiB"
    assert _cell(page, 1, 7).endswith("(est.)")  # sampled PCIe is labelled an estimate


def test_a_gpu_lost_mid_run_is_said_in_its_row(page, qtbot):
    module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: _cell(page, 1, 1) == "NVIDIA RTX A5000", timeout=WAIT_MS)
    module.driver.lose(1)
    qtbot.waitUntil(lambda: "Xid 79" in _cell(page, 1, 1), timeout=WAIT_MS)
    assert "GPU 1: GPU lost" in page.gpu_panel.gpu_note.text()
    assert _cell(page, 0, 1) == "NVIDIA RTX A5000"


def test_refused_process_lists_show_unknown_not_zero(page, qtbot):
    module = FakePynvml(recording("a100_sxm4_80gb_mig"), privileged=False, pcie_delay_s=0)
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: _cell(page, 0, 9) != "", timeout=WAIT_MS)
    assert _cell(page, 0, 9) == "unknown"
    assert page.gpu_panel.gpu_table.item(0, 9).toolTip() == "NVML lists a MIG-enabled GPU's processes only to root"
    note = page.gpu_panel.gpu_note.text()
    assert "GPU 0: processes unknown" in note and "NVIDIA driver 535.54.03" in note


def test_gpus_appear_once_the_driver_loads(page, qtbot):
    module = no_driver()
    _start(page, qtbot, module, retry_every_s=0.0)
    qtbot.waitUntil(lambda: "No NVIDIA GPU found: " in page.gpu_panel.no_gpu_label.text(), timeout=WAIT_MS)
    # One sentence, one colon: what is missing, not "NVML: no NVIDIA driver: the NVML library ...".
    said = page.gpu_panel.no_gpu_label.text().split("'>", 1)[1].split("</p>", 1)[0]  # the sentence, not its style
    assert said == "No NVIDIA GPU found: the NVML library (libnvidia-ml.so.1) is not installed."
    install(module, FakeDriver(recording("gt_1030"), pcie_delay_s=0))
    gpus = page.gpu_panel
    qtbot.waitUntil(lambda: gpus.currentIndex() == 1 and gpus.gpu_table.rowCount() == 1, timeout=WAIT_MS)
    assert _cell(page, 0, 1) == "NVIDIA GeForce GT 1030" and _cell(page, 0, 9) == "10"


def test_gpus_nvml_can_read_none_of_say_why_instead_of_empty_charts(page, qtbot):
    module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: _cell(page, 1, 1) == "NVIDIA RTX A5000", timeout=WAIT_MS)
    module.driver.lose(0)
    module.driver.lose(1)
    gpus = page.gpu_panel
    qtbot.waitUntil(lambda: gpus.currentWidget() is gpus.no_gpu_label, timeout=WAIT_MS)
    text = gpus.no_gpu_label.text()
    assert "NVML can read none of the GPUs. GPU 0: " in text and "GPU 1: " in text and "Xid 79" in text
    slot = page.run_panel.rank_gpu_slot
    assert slot.reason == gpus.reason and slot.currentWidget() is slot.label


def test_each_gpus_health_is_a_column_and_a_throttled_one_says_why(page, qtbot):
    """The A5000s of the recording rest at Gen1 of Gen4 (idle: fine); one is then throttled at the hardware's
    thermal limit with its link trained down to Gen2 x8 while busy."""
    module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: page.gpu_panel.gpu_table.rowCount() == 2 and _cell(page, 0, 10) != "", timeout=WAIT_MS)
    assert _cell(page, 0, 10) == "ok · Gen1 x16 of Gen4 x16 (GPU under 30 % busy: a lower link is not counted)"
    module.driver.gpus[1]["utilization"]["gpu"] = 97
    module.driver.set_health(1, clocks_event_reasons=["hw_thermal_slowdown"], pcie_gen=2, pcie_width=8)
    qtbot.waitUntil(lambda: _cell(page, 1, 10).startswith("throttled"), timeout=WAIT_MS)
    assert _cell(page, 1, 10) == "throttled: thermal (hardware); PCIe link at Gen2 x8 of Gen4 x16 while busy"
    tip = page.gpu_panel.gpu_table.item(1, 10).toolTip()
    assert "clock-event reasons: hw_thermal_slowdown" in tip and "ECC: disabled" in tip


def test_a_gpus_process_count_lists_each_process_with_its_memory_and_sm_use(page, qtbot):
    module = FakePynvml(recording("dual_rtx_a5000"), pcie_delay_s=0)
    module.driver.add_sm_sample(0, 100477, 93, at=time.time() + 60)  # newer than any reading of the test
    _start(page, qtbot, module)
    qtbot.waitUntil(lambda: page.gpu_panel.gpu_table.rowCount() == 2 and _cell(page, 0, 9) == "1", timeout=WAIT_MS)
    tip = page.gpu_panel.gpu_table.item(0, 9).toolTip()
    assert tip == "PID 100477 · 21.9 GiB · SM 93 %"
    assert page.gpu_panel.gpu_table.item(1, 9).toolTip() == "PID 100477 · 16.8 GiB · SM 0 %"

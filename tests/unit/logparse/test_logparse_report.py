"""The reporting helper (resources/pyhelpers/traindeck_report.py) and its exact Progress/Metric."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from support import FIXTURES, REPO

from traindeck.backend.logparse import REPORT_MARKER, Line, LineAssembler, Metric, OutputParser, Progress

HELPERS = REPO / "resources" / "pyhelpers"
LOGS = FIXTURES / "logs"


def run_script(code: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "TRAINDECK_REPORT",
                                                                  "TRAINDECK_REPORT_ALL_RANKS")}
    full_env.update(env, PYTHONPATH=str(HELPERS))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=60,
                            check=True)
    assert result.stderr == ""
    return result.stdout


def parse_all(text: str) -> list:
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    return [i for ln in asm.feed(text.encode()) + asm.flush() for i in p.feed(ln)] + p.flush()


SCRIPT = (
    "import traindeck_report as td\n"
    "td.progress(3, total=10)\n"
    "td.metrics(step=3, loss=0.25, **{'train/acc': 0.5})\n"
    "td.report(step=4, loss=0.125)\n"  # the name the demo script uses
    "td.metric('step', 7)\n"
)


def test_helper_prints_one_line_per_call_and_the_parser_reads_it_exactly():
    out = run_script(SCRIPT)
    lines = [line for line in out.splitlines() if line]  # each starts with "\r" (see the test below)
    assert len(lines) == 4 and all(line.startswith(REPORT_MARKER + "{") for line in lines)
    assert json.loads(lines[0][len(REPORT_MARKER):])["kind"] == "progress"
    items = parse_all(out)
    assert items[0] == Progress(3, 10, None, None, "step", None, "report", "")
    assert items[1:] == [
        Metric("loss", 0.25, 3, None, "report"),
        Metric("train/acc", 0.5, 3, None, "report"),
        Metric("loss", 0.125, 4, None, "report"),
        Metric("step", 7.0, 3, None, "report"),  # no step given: the run's current step
    ]


@pytest.mark.parametrize(
    "env,prints",
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "1"}, False),
        ({"LOCAL_RANK": "1"}, False),
        ({"RANK": "0", "LOCAL_RANK": "1"}, True),  # RANK wins
        ({"RANK": "3", "TRAINDECK_REPORT_ALL_RANKS": "1"}, True),
        ({"TRAINDECK_REPORT": "0"}, False),
    ],
)
def test_only_rank_zero_prints_unless_told_otherwise(env, prints):
    out = run_script(SCRIPT, **env)
    assert bool(out) is prints
    if out and "RANK" in env:
        assert {i.rank for i in parse_all(out)} == {int(env["RANK"])}


def test_all_ranks_argument():
    out = run_script("import traindeck_report as td\ntd.metrics(step=1, all_ranks=True, loss=1.0)", RANK="2")
    assert parse_all(out) == [Metric("loss", 1.0, 1, 2, "report")]


def test_values_tensor_like_nan_and_junk():
    code = (
        "import traindeck_report as td\n"
        "class T:\n"
        "    def item(self): return 0.5\n"
        "class Bad:\n"
        "    def item(self): raise RuntimeError('no')\n"
        "td.metrics(step=2.0, t=T(), nan=float('nan'), inf=float('inf'), s='x', n=None, b=Bad(), ok=3)\n"
        "td.metrics(step=1, junk='x')\n"  # nothing numeric: no line
        "td.progress(float('nan'))\n"  # not a count: no line
    )
    out = run_script(code)
    assert len([line for line in out.splitlines() if line]) == 1
    items = parse_all(out)
    got = {m.name: m.value for m in items}
    assert got["t"] == 0.5 and got["ok"] == 3.0 and math.isnan(got["nan"]) and got["inf"] == math.inf
    assert set(got) == {"t", "nan", "inf", "ok"} and {m.step for m in items} == {2}


def test_helper_never_raises_when_stdout_is_closed():
    code = "import sys, traindeck_report as td\nsys.stdout.close()\ntd.metrics(step=1, loss=1.0)\nprint('x', file=sys.stderr)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(HELPERS)})
    assert result.returncode == 0 and result.stderr == "x\n"


def test_helper_has_no_dependencies():
    text = (HELPERS / "traindeck_report.py").read_text()
    imports = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "json", "math", "os", "sys", "time", "typing"}


def test_a_report_after_a_plain_carriage_return_bar_is_not_glued_to_it():
    # A script's own bar ("\rtrain: 10%| 1/10", no newline) then a report: the report starts a segment of its own,
    # so `traindeck logs` and the console hide it whole, and the parser reads it.
    code = "import sys, traindeck_report as td\nsys.stdout.write('\\rtrain:  10%| 1/10')\ntd.progress(1, total=10)\n"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "TRAINDECK_REPORT")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**env, "PYTHONPATH": str(HELPERS)},
                         timeout=60, check=True).stdout.decode()  # bytes: text mode would turn "\r" into "\n"
    bar, report = out.rstrip("\n").split("\r")[1:]
    assert bar == "train:  10%| 1/10" and report.startswith(REPORT_MARKER + "{")
    assert Progress(1, 10, None, None, "step", None, "report", "") in parse_all(out)


def test_marker_glued_after_a_bar_is_found():
    items = parse_all(" 30%|███       | 3/10 [00:00<00:01,  5.00it/s]@traindeck {\"kind\":\"metrics\",\"step\":3,"
                      "\"values\":{\"loss\":0.5},\"v\":1} trailing\n")
    assert Metric("loss", 0.5, 3, None, "report") in items


@pytest.mark.parametrize(
    "text",
    [
        "@traindeck {not json}",
        '@traindeck {"kind": "progress"}',
        '@traindeck {"kind": "metrics", "values": [1, 2]}',
        '@traindeck {"kind": "other", "values": {"a": 1}}',
        '@traindeck ["kind"]',
        "@traindeck loss=0.5",
    ],
)
def test_malformed_reports_are_ignored(text):
    assert [i for i in parse_all(text + "\n") if i.source == "report"] == []


def test_rate_and_eta_from_the_scripts_own_timestamps():
    p = OutputParser(clock=lambda: 1e9)  # arrival time is meaningless here: all lines arrive at once
    items = []
    for step in range(0, 21):
        t = 1000.0 + step * 0.5  # 2 steps per second, as the script measured
        items += p.feed(Line(f'@traindeck {{"kind":"progress","current":{step},"total":100,"t":{t},"v":1}}'))
    last = items[-1]
    assert isinstance(last, Progress) and last.current == 20
    assert last.rate == pytest.approx(2.0) and last.eta_s == pytest.approx(40.0)


def test_real_script_with_a_tqdm_bar_on_screen():
    asm, p = LineAssembler(), OutputParser(clock=lambda: 0.0)
    data = (LOGS / "report_helper.raw").read_bytes()
    items = [i for ln in asm.feed(data) + asm.flush() for i in p.feed(ln)] + p.flush()
    reports = [i.current for i in items if isinstance(i, Progress) and i.source == "report"]
    assert reports == list(range(13))
    loss = [(m.step, m.value) for m in items if isinstance(m, Metric) and m.name == "loss"]
    assert loss == [(4, 0.25), (8, 0.125), (12, 1 / 12)]
    assert p.progress is not None and p.progress.source == "report"  # the script's own count wins over its bar

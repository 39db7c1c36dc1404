"""Launcher output -> lines, progress and metrics (no Qt, no torch; pure string work, safe to call in a hot loop).

    asm, parser = LineAssembler(), OutputParser()
    for chunk in pipe:                      # raw bytes, any chunking
        for line in asm.feed(chunk):        # Line(text, rank, transient)
            log(line); items = parser.feed(line)   # [Progress | Metric]
    for line in asm.flush(): ...            # the unterminated tail
    items = parser.flush()                  # a dict line held back for its exact step

Readers: `ConsoleBuffer` / `collapse_transient` turn lines into what a console shows.
Scripts: resources/pyhelpers/traindeck_report.py prints exact progress/metrics (`@traindeck {...}` lines).
"""

from .assembler import LineAssembler, strip_ansi
from .model import Line, Metric, Progress
from .parser import OutputParser
from .report import MARKER as REPORT_MARKER
from .screen import ConsoleBuffer, collapse_transient

__all__ = [
    "REPORT_MARKER",
    "ConsoleBuffer",
    "Line",
    "LineAssembler",
    "Metric",
    "OutputParser",
    "Progress",
    "collapse_transient",
    "strip_ansi",
]

"""Logging prefixes in front of the messages, and accelerate's rank tag.

accelerate's `get_logger` adapter prepends `[RANK <process_index>] ` to every message (accelerate >= 0.20) and
leaves the rest of the format to the script's logging configuration; `accelerator.print` prints bare text, and
`Accelerator.log` goes to the configured trackers only (nothing reaches stdout with none installed). The formats
seen in practice, removed here so the message parsers see the message alone:

  accelerate / transformers examples: `11/21/2026 17:27:50 - INFO - __main__ - [RANK 0] epoch 0: ...`
  logging.basicConfig() default:      `INFO:__main__:message`
  DeepSpeed's logger:                 `[2026-11-21 17:26:06,122] [INFO] [engine.py:3793:_report_progress] message`
  asctime-first formats, loguru:      `2024-05-01 12:00:00,123 - name - INFO - message`, `... | INFO | mod:f:1 - message`
  torch's glog-style C++/elastic logs: `W1121 17:30:13.193000 13507 torch/distributed/run.py:874] message`
"""

from __future__ import annotations

import re

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|SUCCESS)"
# By first character, so an ordinary line costs one short match at most.
_DIGIT_FIRST = re.compile(
    rf"\d\d/\d\d/\d{{4}} \d\d:\d\d:\d\d - {_LEVEL} - \S+ - "  # examples' format (datefmt %m/%d/%Y %H:%M:%S)
    rf"|\d{{4}}-\d\d-\d\d[ T][\d:,.]+\s*[-|]\s*(?:\S+\s*[-|]\s*)?{_LEVEL}\s*[-|]\s*(?:[\w.<>:-]+\s*-\s*)?"
    rf"|\d{{4}}-\d\d-\d\d[ T][\d:,.]+\s*(?:\[{_LEVEL}\]|{_LEVEL})\s*(?:[-|:]\s*)?"
)
_BRACKET_FIRST = re.compile(rf"\[\d{{4}}-\d\d-\d\d [\d:,.]+\] \[{_LEVEL}\] \[[^\]]*\] ")  # DeepSpeed
_LETTER_FIRST = re.compile(
    rf"{_LEVEL}:[\w.<>-]+:"  # basicConfig default
    r"|[IWEF]\d{4} [\d:.]+ +\d+ [^\]\s]+\] "  # glog
)
_ACCEL_RANK = re.compile(r"\[RANK (\d+)\] ")


def split_message(text: str) -> tuple[str, int | None]:
    """(message without a known logging prefix, rank from accelerate's `[RANK N]` tag or None)."""
    c = text[:1]
    m = None
    if c == "[":
        m = _BRACKET_FIRST.match(text)
    elif c.isdigit():
        m = _DIGIT_FIRST.match(text)
    elif c in "DIWECFTS":
        m = _LETTER_FIRST.match(text)
    if m:
        text = text[m.end():]
    if text.startswith("[RANK "):
        m = _ACCEL_RANK.match(text)
        if m:
            return text[m.end():], int(m.group(1))
    return text, None

"""tqdm bars as tqdm 4.x's `format_meter` writes them (default bar_format).

Known total:   `{desc}: {pct:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]`
               (`ncols=0`: `{desc}: 45% 45/100 [...]`, no bar)
Unknown total: `{desc}: {n_fmt}{unit} [{elapsed}, {rate_fmt}{postfix}]`
rate_fmt:      `{rate:5.2f}{unit}/s`, or `{1/rate:5.2f}s/{unit}` below 1 item/s, `?{unit}/s` before the first
               rate; with `unit_scale` numbers carry SI suffixes (`1.20k/10.0k`, `208kB/s`).
elapsed/remaining: `MM:SS` or `H:MM:SS` (`?` when unknown).
postfix:       `, loss=0.123, lr=0.0001` (set_postfix) or free text (set_postfix_str).
The bar may be cut at the terminal width (`disp_trim`): the closing bracket is optional.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_NUM = r"\d+(?:\.\d+)?[kMGTPEZY]?"
_TIME = r"-?(?:\d+:)?\d+:\d\d|\?"
_RATE = r"(?P<rate>\?|\d+(?:\.\d+)?[kMGTPEZY]?)(?P<runit>[^\s,\]/]*/s|s/[^\s,\]]*)"
# postfix: up to the bar's closing bracket, allowing one level of [...] inside (e.g. lr=[0.001]).
_POST = r"(?:,(?P<post>[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*))?\]?"

# Searched from its literal " [" (fast): the bracket with the times and the rate, then the postfix.
_BRACKET = re.compile(
    rf" \[(?P<elapsed>{_TIME})(?:<(?P<remaining>{_TIME}))?,\s*{_RATE}{_POST}"
)
# The token right before the bracket: "45/100" (known total) or "123it" / "1.20kit" (unknown total).
_KNOWN_TOKEN = re.compile(rf"(?P<n>{_NUM})/(?P<total>{_NUM})")
_UNKNOWN_TOKEN = re.compile(rf"(?P<n>{_NUM})(?P<unit>[^\W\d][^\s\[\]/:]*)?")
_POSTFIX_PAIR = re.compile(r"([A-Za-z_][\w./-]*)=([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)(?=,|$|\s)")
_SI = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}


class TqdmBar(NamedTuple):
    current: int
    total: int | None
    rate: float | None  # items per second (the inverse "s/it" form converted)
    eta_s: float | None
    elapsed_s: float | None
    unit: str
    label: str  # the description, without its ": "
    postfix: dict[str, float]
    end: int  # where the bar ends in the text (something may be glued after it)


_INVERSE_RATE = re.compile(r"\ds/[^\s,\]/]*[\],]")


def might_be_bar(text: str) -> bool:
    """Cheap pre-test: every default-format bar has " [" before its times and a rate ending in "/s" or starting
    with "s/", followed by "]" or by ", " and the postfix."""
    if " [" not in text:
        return False
    if "/s]" in text or "/s," in text:
        return True
    return "s/" in text and _INVERSE_RATE.search(text) is not None


def _num(s: str) -> float:
    scale = _SI.get(s[-1])
    return float(s[:-1]) * scale if scale else float(s)


def _clock(s: str | None) -> float | None:
    if not s or s == "?":
        return None
    if len(s) == 5 and s[2] == ":":  # MM:SS, the common case
        try:
            return float(int(s[:2]) * 60 + int(s[3:]))
        except ValueError:
            return None
    sign = -1.0 if s.startswith("-") else 1.0
    total = 0.0
    for part in s.lstrip("-").split(":"):
        total = total * 60 + int(part)
    return sign * total


def _label(prefix: str) -> str:
    label = prefix.strip()
    if label.endswith(":"):
        label = label[:-1].rstrip()
    return label


def _match(text: str) -> tuple[re.Match[str], re.Match[str], int, bool] | None:
    """(bracket match, token match, where the token starts in text, known total) or None."""
    m = _BRACKET.search(text)
    while m is not None:
        known = m.group("remaining") is not None
        end = m.start()
        start = text.rfind(" ", 0, end) + 1
        if start == 0:  # no space before: the token may follow a tag-less "|" or start the text
            start = max(text.rfind("|", 0, end), text.rfind(":", 0, end)) + 1
        h = (_KNOWN_TOKEN if known else _UNKNOWN_TOKEN).fullmatch(text, start, end)
        if h is not None:
            return m, h, start, known
        m = _BRACKET.search(text, m.end())
    return None


def parse_bar(text: str) -> TqdmBar | None:
    """The tqdm bar in `text`, or None. Call `might_be_bar` first on hot paths."""
    found = _match(text)
    if found is None:
        return None
    m, h, head_start, known = found
    try:
        current = int(round(_num(h.group("n"))))
        total = int(round(_num(h.group("total")))) if known else None
        raw_rate = m.group("rate")
        runit = m.group("runit")
        if runit.startswith("s/"):
            unit = runit[2:]
            inv = None if raw_rate == "?" else _num(raw_rate)
            rate = (1.0 / inv) if inv else None
        else:
            unit = runit[:-2]
            rate = None if raw_rate == "?" else _num(raw_rate)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if not known:
        unit = h.group("unit") or unit
    postfix: dict[str, float] = {}
    post = m.group("post")
    if post and "=" in post:
        for key, value in _POSTFIX_PAIR.findall(post):
            try:
                postfix[key] = float(value)
            except ValueError:
                pass
    prefix = text[:head_start]
    if known:  # drop "45%|████▌     | " (or "45% " with ncols=0)
        j = prefix.rfind("%")
        if j >= 0:
            k = j
            while k > 0 and prefix[k - 1] in "0123456789":
                k -= 1
            if k < j:
                prefix = prefix[:k]
    return TqdmBar(
        current=current,
        total=total,
        rate=rate,
        eta_s=_clock(m.group("remaining")) if known else None,
        elapsed_s=_clock(m.group("elapsed")),
        unit=unit or "it",
        label=_label(prefix),
        postfix=postfix,
        end=m.end(),
    )


def looks_like_bar(text: str) -> bool:
    """True when `text` is a tqdm bar (used by the console to fold bars that were printed as separate lines)."""
    return might_be_bar(text) and _match(text) is not None


def bar_label(text: str) -> str | None:
    """The bar's description ("" for an unnamed bar), or None when `text` is not a bar."""
    if not might_be_bar(text):
        return None
    bar = parse_bar(text)
    return bar.label if bar is not None else None

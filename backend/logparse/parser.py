"""Lines -> Progress and Metric items, from unmodified scripts' output and from the reporting helper.

Order of the checks (cheap substring tests first: an ordinary line costs a few substring tests and one lower()):
  1. `@traindeck {...}` from resources/pyhelpers/traindeck_report.py  -> exact Progress/Metric, source "report"
  2. a whole-line dict (HF Trainer's log/eval/summary dicts, JSON)     -> Metric, source "trainer" (or "dict")
  3. a tqdm bar                                    -> Progress (+ Metric from its postfix/description), "tqdm"
  4. DeepSpeed's step / throughput / wall-clock / pipeline lines       -> Progress + Metric, "deepspeed"
  5. the message after a logging prefix (and accelerate's `[RANK N]` tag):
     a dict after a short label (`epoch 0: {'accuracy': ...}`)        -> Metric, "dict"
     key/value loss lines (generic.py)                                -> Progress + Metric, "generic"

Steps: a metric carries its line's own step when the line has one; otherwise the run's current step (the current
value of the primary progress, see `progress`). HF Trainer writes its dict between two redraws of its bar, and the
redraw before it can be stale, so a dict that directly follows a bar is held until the next line (normally the
redraw that shows the exact step) and returned with that line's items; `flush()` returns anything still held.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .deepspeed_log import might_be_deepspeed, parse_deepspeed
from .dicts import is_trainer_dict, numeric_items, parse_dict_text
from .generic import MAX_GENERIC_CHARS, has_keyword, parse_generic
from .logprefix import split_message
from .model import Line, Metric, Progress
from .rate import RateEstimator
from .report import Report, parse_report
from .tqdm_bar import TqdmBar, might_be_bar, parse_bar

Item = Progress | Metric
_MAX_LABEL_BEFORE_DICT = 48
MAX_METRIC_NAMES = 4096
_DIGITS = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# "epoch 0: {...}", "eval results: {...}", "metrics = {...}"; not a config dump ("aio_config ....... {...}").
_DICT_LABEL = re.compile(r"(?:[\w/\[\]() -]{0,40}[:=] ?)?$")
_LABEL_STEP = re.compile(r"\b(?:step|global_step|iter|iteration)\s*[=:]?\s*(\d+)", re.IGNORECASE)


@dataclass
class _Stream:
    """One progress stream: a tqdm bar (by rank, label, total), DeepSpeed's steps, the report helper's, ..."""

    estimator: RateEstimator = field(default_factory=RateEstimator)
    last: Progress | None = None
    seq: int = 0
    postfix_seen: dict[str, float] = field(default_factory=dict)


class OutputParser:
    """Stateful: remembers progress streams (for rates, ETAs and the run's current step) and held dict lines."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_streams: int = 64) -> None:
        self._clock = clock
        self._streams: dict[tuple[object, ...], _Stream] = {}
        self._max_streams = max_streams
        self._primary: tuple[object, ...] | None = None
        self._seq = 0
        self._held: list[tuple[dict[str, float], int | None, str]] = []
        self._last_was_bar = False
        self._line_bar_key: tuple[object, ...] | None = None
        self._ds_step: int | None = None
        self.latest_metrics: dict[str, Metric] = {}
        self.lines_seen = 0

    # ---- public API -------------------------------------------------------------------------------------------
    def feed(self, line: Line, now: float | None = None) -> list[Item]:
        """Items found in `line` (plus any dict line held back from the previous call, see the module doc)."""
        self.lines_seen += 1
        text = line.text
        if not self._held and not self._last_was_bar:
            # Fast path for ordinary text, which is most of any log: a few substring tests, one short regex.
            if not text:
                return []
            if (
                "@traindeck {" not in text
                and text[0] != "{"
                and "step=" not in text
                and "time (ms)" not in text
                and not text.startswith("steps: ")
                and not might_be_bar(text)
                and ("{" not in text or text.rstrip()[-1:] != "}")
                and (len(text) > MAX_GENERIC_CHARS or not has_keyword(text.lower()))
            ):
                return []
        elif not text:
            return self._release([]) if self._held else []
        out: list[Item] = []
        self._line_bar_key = None
        held, self._held = self._held, []
        self._dispatch(text, line.rank, out, now, 0)
        if held:
            out[:0] = self._metrics_from(held, self.current_step())
        self._last_was_bar = self._line_bar_key is not None
        return out

    def flush(self) -> list[Item]:
        """Dict metrics still held back (end of stream)."""
        return self._release([])

    @property
    def progress(self) -> Progress | None:
        """The progress that stands for the whole run: the reporting helper's when a script uses it, else the
        stream expected to last longest (total / rate: the training bar, not the eval or download bar)."""
        if self._primary is None:
            return None
        stream = self._streams.get(self._primary)
        return stream.last if stream else None

    def current_step(self) -> int | None:
        p = self.progress
        return p.current if p is not None else None

    # ---- dispatch ---------------------------------------------------------------------------------------------
    def _dispatch(self, text: str, rank: int | None, out: list[Item], now: float | None, depth: int) -> None:
        if "@traindeck {" in text:
            rep = parse_report(text)
            if rep is not None:
                self._on_report(rep, rank, out, now)
                return
        c = text[0]
        if c == "{" or (c == " " and text.lstrip()[:1] == "{"):
            s = text.strip()
            if s[-1:] == "}":
                obj = parse_dict_text(s)
                if obj is not None:
                    values, step = numeric_items(obj)
                    if values:
                        source = "trainer" if is_trainer_dict(values) else "dict"
                        if step is None and self._last_was_bar and depth == 0:
                            self._held.append((values, rank, source))
                        else:
                            out.extend(self._metrics_from([(values, rank, source)], step))
                    return
        if might_be_bar(text):
            bar = parse_bar(text)
            if bar is not None:
                self._on_bar(bar, rank, out, now)
                rest = text[bar.end:]
                if depth == 0 and rest.strip():
                    # Something printed while the bar was on screen got glued to it ("...it/s]11/21/2026 ...").
                    self._dispatch(rest.lstrip(), rank, out, now, 1)
                return
        if might_be_deepspeed(text):
            ds = parse_deepspeed(text)
            if ds is not None:
                r = ds.rank if ds.rank is not None else rank
                if ds.progress and ds.step is not None:
                    self._ds_step = ds.step
                    self._on_progress(("deepspeed",), ds.step, None, None, None, "step", r, "deepspeed", "", now,
                                      out)
                step = ds.step if ds.step is not None else self._ds_step
                for name, value in ds.metrics.items():
                    self._metric(name, value, step, r, "deepspeed", out)
                return
        has_brace = "{" in text and text.rstrip()[-1:] == "}"
        if not has_brace and (len(text) > MAX_GENERIC_CHARS or not has_keyword(text.lower())):
            return  # ordinary text: no keyword a metric line needs, no dict
        msg, accel_rank = split_message(text)
        if accel_rank is not None and rank is None:
            rank = accel_rank
        if not msg:
            return
        if has_brace and "{" in msg:
            s = msg.rstrip()
            i = s.find("{")
            if s[-1:] == "}" and i <= _MAX_LABEL_BEFORE_DICT and _DICT_LABEL.match(s[:i]):
                obj = parse_dict_text(s[i:])
                if obj is not None:
                    values, step = numeric_items(obj)
                    if values:
                        if step is None:
                            m = _LABEL_STEP.search(s[:i])
                            step = int(m.group(1)) if m else self.current_step()
                        out.extend(self._metrics_from([(values, rank, "dict")], step))
                    return
        gen = parse_generic(msg)
        if gen is not None:
            if gen.has_step and gen.step is not None:
                self._on_progress(("generic", gen.unit), gen.step, gen.total, None, None, gen.unit, rank,
                                  "generic", "", now, out)
            step = gen.step if gen.has_step else self.current_step()
            for name, value in gen.metrics.items():
                self._metric(name, value, step, rank, "generic", out)

    # ---- handlers ---------------------------------------------------------------------------------------------
    def _on_report(self, rep: Report, rank: int | None, out: list[Item], now: float | None) -> None:
        r = rep.rank if rep.rank is not None else rank
        if rep.kind == "progress" and rep.current is not None:
            self._on_progress(("report",), rep.current, rep.total, None, None, rep.unit, r, "report", "",
                              rep.t if rep.t is not None else now, out)
        elif rep.kind == "metrics":
            step = rep.step if rep.step is not None else self.current_step()
            for name, value in rep.values.items():
                self._metric(name, value, step, r, "report", out)

    def _on_bar(self, bar: TqdmBar, rank: int | None, out: list[Item], now: float | None) -> None:
        label = bar.label
        # One stream per bar even when its description counts ("Epoch 3 loss 0.52" -> "Epoch # loss #").
        key = ("tqdm", rank, _DIGITS.sub("#", label) if label else label, bar.total)
        self._on_progress(key, bar.current, bar.total, bar.rate, bar.eta_s, bar.unit, rank, "tqdm", label,
                          now, out)
        self._line_bar_key = key
        values = bar.postfix
        if label and has_keyword(label.lower()):
            described = parse_generic(label)  # set_description(f"epoch {e} loss {loss:.4f}")
            if described is not None:
                values = {**described.metrics, **values}
        if values:
            stream = self._streams.get(key)
            if stream is not None:
                # Every redraw repeats the postfix: report a value when it changes (at the count it changed at).
                seen = stream.postfix_seen
                for name, value in values.items():
                    if seen.get(name) != value:
                        seen[name] = value
                        self._metric(name, value, bar.current, rank, "tqdm", out)

    def _on_progress(
        self,
        key: tuple[object, ...],
        current: int,
        total: int | None,
        rate: float | None,
        eta: float | None,
        unit: str,
        rank: int | None,
        source: str,
        label: str,
        now: float | None,
        out: list[Item],
    ) -> None:
        stream = self._streams.get(key)
        if stream is None:
            if len(self._streams) >= self._max_streams:
                self._evict()
            stream = self._streams[key] = _Stream()
        t = self._clock() if now is None else now
        est = stream.estimator.update(current, t)
        if rate is None:
            rate = est
            eta = RateEstimator.eta(current, total, rate)
        elif eta is None:
            eta = RateEstimator.eta(current, total, rate)
        self._seq += 1
        stream.seq = self._seq
        last = stream.last
        p = Progress(current, total, rate, eta, unit, rank, source, label)
        stream.last = p
        self._choose_primary(key)
        if last is not None and last.current == current and last.total == total and last.rate == rate:
            return  # the same state drawn again (tqdm refreshes after every tqdm.write)
        out.append(p)

    def _choose_primary(self, updated: tuple[object, ...]) -> None:
        best, best_score = None, None
        for key, stream in self._streams.items():
            p = stream.last
            if p is None:
                continue
            span = p.total / p.rate if p.total and p.rate else 0.0
            score = (p.source == "report", span, p.total is not None, stream.seq)
            if best_score is None or score > best_score:
                best, best_score = key, score
        self._primary = best

    def _evict(self) -> None:
        victims = sorted((s.seq, k) for k, s in self._streams.items() if k != self._primary)
        for _, key in victims[: max(1, len(victims) // 4)]:
            del self._streams[key]

    def _metric(self, name: str, value: float, step: int | None, rank: int | None, source: str,
                out: list[Item]) -> None:
        m = Metric(name, value, step, rank, source)
        latest = self.latest_metrics
        if name in latest or len(latest) < MAX_METRIC_NAMES:  # bounded, whatever a script prints
            latest[name] = m
        out.append(m)

    def _metrics_from(self, held: list[tuple[dict[str, float], int | None, str]], step: int | None) -> list[Item]:
        out: list[Item] = []
        for values, rank, source in held:
            for name, value in values.items():
                self._metric(name, value, step, rank, source, out)
        return out

    def _release(self, out: list[Item]) -> list[Item]:
        if not self._held:
            return out
        held, self._held = self._held, []
        return self._metrics_from(held, self.current_step()) + out

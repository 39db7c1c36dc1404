"""Loss lines that scripts print themselves: a modest heuristic that prefers missing a metric to inventing one.

Recognised: `step 10 loss 0.532`, `Step 10/100 | loss: 0.532 | lr: 1e-4`, `iter 100: loss 4.2345, time 123.45ms,
mfu 12.34%` (nanoGPT), `step 100: train loss 4.23, val loss 4.35`, `Epoch [1/10], Step [100/600], Loss: 0.2134`,
`epoch 0: train_loss: 0.9654 perplexity: 2.63` (accelerate examples), `Final loss: 0.23`, `global_step=100 loss=0.5`.

A line yields metrics only when
  * some key is metric-like (loss, acc, ppl, lr, grad_norm, mfu, reward, time, ...), and
  * it has a step/iter/epoch anchor, or else a loss-like key (loss, acc, ppl, f1, ...; not loss_scale & co.),
  * and almost all of it is key/value pairs: at most 3 other words with an anchor, 1 without.
Keys are lower-cased, "train loss" becomes "train_loss"; "ms"/"s" units go into the name (time_ms); "%" is
dropped. Keys that are not metric-like are only kept with an explicit "=" or ":" separator. A number followed by
",ddd" (thousands separator), a version, a date or a path is never a value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan|[-+]?inf"
_PAIR = re.compile(  # on the lower-cased line; greedy key (no backtracking), qualifiers joined afterwards
    rf"(?<![\w./\-])(?P<key>[a-z][\w./\-]*)(?P<sep>\s*[=:]\s*|\s+)\[?"
    rf"(?P<val>{_NUMBER})(?P<unit>%|ms\b|s\b)?(?:/(?P<total>\d+))?\]?(?!,\d{{3}}(?!\d))(?=$|[\s,;:|)\]])"
)
# "train loss 4.2" -> train_loss: a qualifier word right before the key.
_QUALIFIER = re.compile(
    r"(?:^|[\s,;:|(\[])(train|training|val|valid|validation|eval|evaluation|test|avg|average|mean|running|smoothed"
    r"|total|batch) $"
)
MAX_GENERIC_CHARS = 512  # longer lines are config dumps, tensors, JSON blobs: never read as loss lines


def has_keyword(low: str) -> bool:
    """Pre-test on the lower-cased line: a metric line this module accepts names one of these. Chained `in`
    tests cost ~0.5 us on a typical line; an alternation regex costs 3-4 times more."""
    return (
        "loss" in low or "step" in low or "iter" in low or "epoch" in low or "ppl" in low
        or "accuracy" in low or "acc:" in low or "acc=" in low or "acc " in low  # not "accelerate"
        or "perplex" in low or "f1" in low or "bleu" in low or "rouge" in low or "reward" in low or "score" in low
    )


_WORD = re.compile(r"[a-z]{2,}")
_STEP_KEYS = frozenset({"step", "steps", "iter", "iteration", "iters", "global_step", "update", "updates"})
_EPOCH_KEYS = frozenset({"epoch", "ep"})
_VOCAB = re.compile(
    r"loss|acc|ppl|perplex|^lr$|learning_rate|grad|norm|f1|bleu|rouge|reward|mfu|throughput|tok|sample|"
    r"score|err|auc|mae|mse|^kl|entropy|time|speed|/s$|_per_sec|wps|ups|mem"
)
_LOSSY = re.compile(r"loss|acc|ppl|perplex|f1|bleu|rouge|reward|score|err|auc|mae|mse")
_DENY = re.compile(r"scale|weight|type|fn|factor|coef|alpha|beta|clip|window|thresh|patience|warmup|decay|num|max_|min_|size")


@dataclass
class GenericLine:
    metrics: dict[str, float] = field(default_factory=dict)
    step: int | None = None
    total: int | None = None
    unit: str = "step"
    has_step: bool = False


def parse_generic(msg: str) -> GenericLine | None:
    """Metrics (and the step, when the line names one) from a free-text line; None when it is not such a line."""
    if len(msg) > MAX_GENERIC_CHARS:
        return None
    msg = msg.lower()
    if not has_keyword(msg):
        return None
    out = GenericLine()
    anchor = vocab = lossy = False
    spans: list[tuple[int, int]] = []
    for m in _PAIR.finditer(msg):
        key = m.group("key")
        start = m.start()
        if start > 2 and msg[start - 1] == " ":
            q = _QUALIFIER.search(msg, max(0, start - 13), start)
            if q is not None:
                key = q.group(1) + "_" + key
                start = q.start(1)
        try:
            value = float(m.group("val"))
        except ValueError:
            continue
        unit = m.group("unit") or ""
        explicit = m.group("sep").strip() != ""
        if key in _STEP_KEYS:
            anchor = True
            spans.append((start, m.end()))
            if not out.has_step and math.isfinite(value) and value == int(value) and value >= 0 and not unit:
                out.has_step = True
                out.step = int(value)
                out.unit = "iter" if key.startswith("iter") else "step"
                if m.group("total"):
                    out.total = int(m.group("total"))
            continue
        if key in _EPOCH_KEYS:
            anchor = True
            spans.append((start, m.end()))
            if not unit:
                out.metrics["epoch"] = value
            continue
        name = key + "_" + unit if unit in ("ms", "s") else key
        if _VOCAB.search(key):
            vocab = True
            if _LOSSY.search(key) and not _DENY.search(key):
                lossy = True
            out.metrics[name] = value
            spans.append((start, m.end()))
        elif explicit and m.group("total") is None:
            out.metrics[name] = value
            spans.append((start, m.end()))
    if not vocab or not (anchor or lossy):
        return None
    residual, last = [], 0
    for a, b in spans:
        residual.append(msg[last:a])
        last = b
    residual.append(msg[last:])
    words = len(_WORD.findall(" ".join(residual)))
    if words > (3 if anchor else 1):
        return None
    return out

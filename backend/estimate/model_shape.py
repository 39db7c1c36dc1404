"""What the estimator needs to know about a model: parameter counts and the shape activations depend on.

Either from a bare parameter count (the shape is then derived and every assumption is said), or from a Hugging Face
model config, counted by building the model on PyTorch's meta device (no weights, no network) in a child process,
so that neither the CLI's start nor the GUI ever imports torch or transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traindeck.backend.estimate.quantity import format_count

# A bare parameter count gets a GPT-3-family shape: 12 * L * h^2 parameters with L = h / 128 layers (GPT-3 6.7B,
# 13B and 175B all have h / L = 128), head size 128, and a 32,000-token vocabulary (Llama 1/2, Mistral) whose
# embedding is the largest single layer, as in DeepSpeed's own examples.
DEFAULT_VOCAB = 32_000
HIDDEN_PER_LAYER = 128
HEAD_DIM = 128
COUNT_TIMEOUT_S = 300


class ModelConfigError(ValueError):
    """A model config that cannot be found or counted; the message is one line meant for the user."""


@dataclass(frozen=True)
class ModelShape:
    total_params: int
    largest_layer_params: int  # the largest single module's own parameters (DeepSpeed's "largest layer")
    hidden_size: int
    num_layers: int
    num_heads: int
    vocab_size: int
    max_positions: int | None = None
    tied_embeddings: bool | None = None
    source: str = "params"  # "params", a config.json path, or a model id in the local Hugging Face cache
    model_class: str | None = None
    assumptions: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_params": self.total_params,
            "largest_layer_params": self.largest_layer_params,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "vocab_size": self.vocab_size,
            "max_positions": self.max_positions,
            "tied_embeddings": self.tied_embeddings,
            "source": self.source,
            "model_class": self.model_class,
            "assumptions": list(self.assumptions),
        }


def _round_to(x: float, step: int) -> int:
    return max(step, int(round(x / step)) * step)


def shape_from_params(
    total_params: int,
    largest_layer_params: int | None = None,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    vocab_size: int | None = None,
) -> ModelShape:
    """A shape for a bare parameter count; what is not given is derived (see DEFAULT_VOCAB) and said in assumptions."""
    said: list[str] = []
    if hidden_size is None:
        # 12 * (h / 128) * h^2 = total  ->  h = (total * 128 / 12) ** (1/3), to a multiple of 128.
        hidden_size = _round_to((total_params * HIDDEN_PER_LAYER / 12) ** (1 / 3), HIDDEN_PER_LAYER)
        said.append(f"hidden size {hidden_size} derived from the parameter count (GPT-3-like shape, 12*L*h^2 params)")
    if num_layers is None:
        num_layers = max(1, round(total_params / (12 * hidden_size * hidden_size)))
        said.append(f"{num_layers} layers derived from the parameter count and hidden size")
    if num_heads is None:
        num_heads = max(1, hidden_size // HEAD_DIM)
        said.append(f"{num_heads} attention heads assumed (head size {HEAD_DIM})")
    if vocab_size is None:
        vocab_size = DEFAULT_VOCAB
        said.append(f"vocabulary {DEFAULT_VOCAB} assumed")
    if largest_layer_params is None:
        largest_layer_params = min(total_params, vocab_size * hidden_size)
        said.append(
            f"largest layer not given: assumed the embedding, {vocab_size} x {hidden_size} = "
            f"{format_count(largest_layer_params)} params; pass --largest-layer for your model"
        )
    return ModelShape(
        total_params=total_params,
        largest_layer_params=largest_layer_params,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        vocab_size=vocab_size,
        source="params",
        assumptions=tuple(said),
    )


def with_overrides(shape: ModelShape, **overrides: int | None) -> ModelShape:
    """The shape with the user's explicit values (None = keep) replacing counted or derived ones."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return shape
    kept = tuple(a for a in shape.assumptions if not any(_mentions(a, k) for k in given))
    return replace(shape, assumptions=kept, **given)  # type: ignore[arg-type]


def _mentions(assumption: str, key: str) -> bool:
    words = {
        "largest_layer_params": "largest layer",
        "hidden_size": "hidden size",
        "num_layers": "layers derived",
        "num_heads": "attention heads",
        "vocab_size": "vocabulary",
    }
    return words.get(key, key) in assumption


def _worker_env() -> dict[str, str]:
    from traindeck.backend.launch.environ import unfrozen_environ

    env = unfrozen_environ(os.environ)  # a frozen app's bundle libraries must not reach another Python
    # Never the network: a model id must already be in the local Hugging Face cache.
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def count_model_config(config: str | os.PathLike[str], timeout_s: float = COUNT_TIMEOUT_S) -> ModelShape:
    """Count a Hugging Face model's parameters from its config alone (a config.json, its folder, or a cached id).

    Runs `python -m traindeck.backend.estimate.count_worker` so torch and transformers load in a child process,
    with HF_HUB_OFFLINE=1: a model id must already be in the local cache. Raises ModelConfigError with a one-line
    reason (not found, not in the cache, torch missing, a model type transformers does not know).
    """
    result = count_model_configs([config], timeout_s)[0]
    if isinstance(result, ModelConfigError):
        raise result
    return result


def _resolve_target(config: str | os.PathLike[str]) -> str:
    """A config path made absolute (a folder -> its config.json), or the text unchanged when it is a model id."""
    text = os.fspath(config)
    if not text.strip():
        raise ModelConfigError("--model-config: empty path or model id")
    path = Path(text).expanduser()
    looks_like_path = path.exists() or text.endswith(".json") or text.startswith((".", "/", "~"))
    if not looks_like_path:
        return text
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ModelConfigError(f"model config not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{path}: not a readable JSON model config ({exc})") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: not a model config (expected a JSON object)")
    return str(path.resolve())


def count_model_configs(
    configs: Sequence[str | os.PathLike[str]], timeout_s: float = COUNT_TIMEOUT_S
) -> list[ModelShape | ModelConfigError]:
    """`count_model_config` for several configs in one child process (torch is imported once)."""
    results: list[ModelShape | ModelConfigError | None] = []
    targets: list[str] = []
    for config in configs:
        try:
            targets.append(_resolve_target(config))
            results.append(None)
        except ModelConfigError as exc:
            results.append(exc)
    if targets:
        replies = _run_worker(targets, timeout_s)
        it = iter(zip(targets, replies, strict=True))
        for i, slot in enumerate(results):
            if slot is None:
                target, data = next(it)
                results[i] = _shape_from_reply(target, data)
    return [r for r in results if r is not None]


def _worker_command() -> list[str]:
    """`python -m ...count_worker`; a frozen app (whose executable is no Python) runs the shipped file with
    python3 from PATH, as it would train."""
    from traindeck.backend.launch.environ import is_frozen, resolve_python

    if is_frozen():
        return [resolve_python(None), str(Path(__file__).with_name("count_worker.py"))]
    return [sys.executable, "-m", "traindeck.backend.estimate.count_worker"]


def _run_worker(targets: list[str], timeout_s: float) -> list[dict[str, Any]]:
    shown = targets[0] if len(targets) == 1 else f"{len(targets)} model configs"
    try:
        result = subprocess.run(
            [*_worker_command(), *targets],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_worker_env(),
        )
    except subprocess.TimeoutExpired:
        raise ModelConfigError(f"counting the parameters of {shown} took over {timeout_s:.0f} s") from None
    replies = []
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            try:
                replies.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    if len(replies) != len(targets):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelConfigError(f"counting the parameters of {shown} failed: {last}")
    return replies


def _shape_from_reply(target: str, data: dict[str, Any]) -> ModelShape | ModelConfigError:
    if "error" in data:
        return ModelConfigError(str(data["error"]))
    return ModelShape(
        total_params=int(data["total_params"]),
        largest_layer_params=int(data["largest_layer_params"]),
        hidden_size=int(data["hidden_size"]),
        num_layers=int(data["num_layers"]),
        num_heads=int(data["num_heads"]),
        vocab_size=int(data["vocab_size"]),
        max_positions=data.get("max_positions"),
        tied_embeddings=data.get("tied_embeddings"),
        source=target,
        model_class=data.get("model_class"),
        assumptions=tuple(data.get("assumptions", ())),
    )

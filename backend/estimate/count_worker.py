"""Child process: count a Hugging Face model's parameters from its config, on the meta device (no weights).

`python -m traindeck.backend.estimate.count_worker TARGET [TARGET ...]` prints one JSON line per target (a
config.json path or a model id in the local Hugging Face cache): the counts and the shape, or {"error": "..."}. torch and transformers are imported here only, inside main().

Counting is by Parameter identity: `model.parameters()` yields each Parameter object once, so an output embedding
tied to the input embedding (the same Parameter) counts once. Two popular shortcuts get this wrong:
- accelerate's `init_empty_weights()` builds the model with separate meta Parameters for the tied pair, so its
  count includes the output embedding twice (GPT-2 small: 163.0M instead of 124.4M);
- DeepSpeed's `model_to_params` de-duplicates by `data_ptr()`, which is 0 for every meta tensor, so on the meta
  device it keeps a single tensor (GPT-2 small: 768).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _first_int(cfg: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def count(target: str) -> dict[str, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        return {
            "error": f"counting parameters from a model config needs torch and transformers ({exc.name} is "
            "missing): install the train extra, pip install 'traindeck[train]', or pass --params N"
        }
    import os

    from transformers import AutoConfig

    try:
        if os.path.isfile(target):
            with open(target, encoding="utf-8") as f:
                data = json.load(f)
            model_type = data.pop("model_type", None) if isinstance(data, dict) else None
            if not model_type:
                return {"error": f"{target}: no model_type in this config, so transformers cannot tell the model"}
            config = AutoConfig.for_model(model_type, **data)
        else:
            config = AutoConfig.from_pretrained(target, local_files_only=True, trust_remote_code=False)
    except OSError:
        return {
            "error": f"model {target!r} has no config.json in the local Hugging Face cache "
            "(traindeck never downloads; give a config.json path, or fetch the model first)"
        }
    except (ValueError, KeyError, TypeError) as exc:
        return {"error": f"{target}: {(str(exc).splitlines() or [type(exc).__name__])[0]}"}

    model_class = None
    for name in getattr(config, "architectures", None) or []:
        candidate = getattr(transformers, name, None)
        if candidate is not None:
            model_class = candidate
            break
    builders: list[Any] = []
    if model_class is not None:
        builders.append(model_class)  # a PreTrainedModel subclass is built from its config alone
    builders += [transformers.AutoModelForCausalLM.from_config, transformers.AutoModel.from_config]
    model = None
    errors: list[Exception] = []
    with torch.device("meta"):  # parameters get shapes but no storage: a 70B model costs no memory
        for build in builders:
            try:
                model = build(config)
                break
            except Exception as exc:  # noqa: BLE001 - try the next way of building; report the first failure
                errors.append(exc)
    if model is None:
        first = (str(errors[0]).splitlines() or [type(errors[0]).__name__])[0]
        return {"error": f"{target}: transformers cannot build this model type: {first}"}

    unique = {id(p): p.numel() for p in model.parameters()}
    total = sum(unique.values())
    largest = 0
    for module in model.modules():
        largest = max(largest, sum(p.numel() for p in module.parameters(recurse=False)))
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = None
    if inp is not None and out is not None:
        tied = getattr(inp, "weight", None) is getattr(out, "weight", object())

    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = _first_int(text, "hidden_size", "n_embd", "d_model", "dim")
    layers = _first_int(text, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _first_int(text, "num_attention_heads", "n_head", "num_heads", "n_heads")
    vocab = _first_int(text, "vocab_size")
    positions = _first_int(text, "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")
    said = []
    if hidden is None or layers is None or heads is None or vocab is None:
        said.append("the config lacks some of hidden size / layers / heads / vocabulary; activations are rough")
    return {
        "total_params": total,
        "largest_layer_params": largest,
        "hidden_size": hidden or 1,
        "num_layers": layers or 1,
        "num_heads": heads or 1,
        "vocab_size": vocab or 0,
        "max_positions": positions,
        "tied_embeddings": tied,
        "model_class": type(model).__name__,
        "assumptions": said,
    }


def main(argv: list[str] | None = None) -> int:
    """One JSON line per target, in order; exit 2 when any target failed."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(json.dumps({"error": "usage: count_worker CONFIG_JSON_OR_MODEL_ID [...]"}))
        return 2
    failed = False
    for target in args:
        try:
            result = count(target)
        except Exception as exc:  # noqa: BLE001 - the parent shows one line, never a traceback
            result = {"error": f"{target}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"}
        failed = failed or "error" in result
        print(json.dumps(result), flush=True)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Who fills the DeepSpeed config's "auto" values, and which ones: the HF Trainer, accelerate, or nobody.

"auto" is not a DeepSpeed value: it is a placeholder that transformers' Trainer and accelerate replace before
DeepSpeed sees the config. Each consumer fills a fixed list of keys; an "auto" elsewhere is not filled, and then:
  - accelerate (also under the HF Trainer, which prepares the model through accelerate) stops every process:
    `DeepSpeedPlugin.deepspeed_config_process` walks the whole config after `Accelerator._prepare_deepspeed` has
    gathered its values and `fill_match` raises "`<key>` not found in kwargs" on the first "auto" left;
  - a plain DeepSpeed script (deepspeed.initialize on the file) gives the text to DeepSpeed as it is.

The table below is read from the installed tools' code (transformers 5.23, accelerate 1.15):
  transformers/integrations/deepspeed.py
    HfTrainerDeepSpeedConfig.trainer_config_process   (fill_match / fill_only calls, from TrainingArguments)
    HfTrainerDeepSpeedConfig.trainer_config_finalize  (hidden-size keys, scheduler steps)
  accelerate/utils/dataclasses.py
    DeepSpeedPlugin.__post_init__                     (plugin_to_config_mapping: the plugin's own values)
    DeepSpeedPlugin.set_mixed_precision               (fp16/bf16 "enabled" from mixed_precision)
  accelerate/accelerator.py
    Accelerator._prepare_deepspeed                    (config_kwargs: DataLoader batch size, model hidden size,
                                                       DummyOptim / DummyScheduler values)
tests/test_config_auto_fill_tools.py (the `train` extra) feeds a config full of "auto" through those very
functions and fails when this table and the installed tools disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

# hf_trainer: a script using transformers' Trainer (or one built on it: TRL's SFTTrainer, ...), whatever launches it;
# accelerate: a script of its own using Accelerator.prepare (with DummyOptim / DummyScheduler when the config
#   defines the optimizer / scheduler, as accelerate requires);
# integration: one of the two, not known which (an accelerate launch config uses the file, or only its "auto"
#   values say so);
# plain: deepspeed.initialize on the file: nobody fills "auto".
Consumer = Literal["hf_trainer", "accelerate", "integration", "plain"]
Path = tuple[str, ...]


@dataclass(frozen=True)
class Fill:
    """One key some consumer fills, and from what (None: that consumer does not fill it)."""

    path: Path
    hf_trainer: str | None  # what HfTrainerDeepSpeedConfig puts there
    accelerate: str | None  # what accelerate puts there (DeepSpeedPlugin / Accelerator._prepare_deepspeed)


ZERO = "zero_optimization"

FILLS: tuple[Fill, ...] = (
    # trainer_config_process: fill_match(key, args.<value>) / _prepare_deepspeed: config_kwargs (a prepared
    # DataLoader's batch_size; its absence raises "...when not passing any dataloader...")
    Fill(("train_micro_batch_size_per_gpu",), "per_device_train_batch_size", "the prepared DataLoader's batch_size"),
    Fill(("train_batch_size",), "world size x per_device_train_batch_size x gradient_accumulation_steps",
         "micro batch x gradient_accumulation_steps x processes"),
    # _prepare_deepspeed: fill_match("gradient_accumulation_steps", self.gradient_accumulation_steps)
    Fill(("gradient_accumulation_steps",), "gradient_accumulation_steps", "Accelerator(gradient_accumulation_steps)"),
    # _prepare_deepspeed: config_kwargs = {"gradient_clipping": 1.0, ...}
    Fill(("gradient_clipping",), "max_grad_norm", "1.0"),
    # set_mixed_precision: kwargs {"fp16.enabled": ..., "bf16.enabled": ...} (only these spellings: find_config_node
    # never looks at the old "bfloat16" section)
    Fill(("fp16", "enabled"), "fp16 / fp16_full_eval", "mixed_precision"),
    Fill(("bf16", "enabled"), "bf16 / bf16_full_eval", "mixed_precision"),
    # trainer_config_process optimizer keys; _prepare_deepspeed fills only lr and weight_decay from DummyOptim
    Fill(("optimizer", "params", "lr"), "learning_rate", "DummyOptim(lr=...)"),
    Fill(("optimizer", "params", "weight_decay"), "weight_decay", "DummyOptim(weight_decay=...)"),
    Fill(("optimizer", "params", "betas"), "adam_beta1, adam_beta2", None),
    Fill(("optimizer", "params", "eps"), "adam_epsilon", None),
    # trainer_config_process (fill_only warmup_min_lr 0) / trainer_config_finalize (steps);
    # _prepare_deepspeed with a DummyScheduler (total_num_steps only when the DummyScheduler was given it)
    Fill(("scheduler", "params", "warmup_min_lr"), "0", "0"),
    Fill(("scheduler", "params", "warmup_max_lr"), "learning_rate", "the optimizer's lr"),
    Fill(("scheduler", "params", "warmup_num_steps"), "warmup_steps / warmup_ratio", "DummyScheduler(warmup_num_steps)"),
    Fill(("scheduler", "params", "total_num_steps"), "the number of training steps",
         "DummyScheduler(total_num_steps) when given"),
    # trainer_config_finalize: hidden_size-based (the stage3_* pair at stage 3 only); _prepare_deepspeed fills all
    # three at any stage, from model.config.hidden_size (a model without it stops: "Can't find `model.config`")
    Fill((ZERO, "reduce_bucket_size"), "hidden_size x hidden_size", "hidden_size x hidden_size"),
    Fill((ZERO, "stage3_prefetch_bucket_size"), "0.9 x hidden_size x hidden_size", "0.9 x hidden_size x hidden_size"),
    Fill((ZERO, "stage3_param_persistence_threshold"), "10 x hidden_size", "10 x hidden_size"),
    # DeepSpeedPlugin.__post_init__ plugin_to_config_mapping (the plugin's values, from accelerate launch's
    # environment or its defaults); _prepare_deepspeed also passes stage3_gather_16bit_weights_on_model_save False
    Fill((ZERO, "stage"), None, "the plugin's zero_stage (2 unless set)"),
    Fill((ZERO, "offload_optimizer", "device"), None, "the plugin's offload_optimizer_device ('none')"),
    Fill((ZERO, "offload_param", "device"), None, "the plugin's offload_param_device ('none')"),
    Fill((ZERO, "offload_optimizer", "nvme_path"), None, "'none'"),
    Fill((ZERO, "offload_param", "nvme_path"), None, "'none'"),
    Fill((ZERO, "stage3_gather_16bit_weights_on_model_save"), None, "the plugin's zero3_save_16bit_model (false)"),
)
BY_PATH: dict[Path, Fill] = {f.path: f for f in FILLS}


def fills(consumer: str, path: Path) -> bool:
    """Whether `consumer` replaces an "auto" at `path`. The HF Trainer prepares the model through accelerate, so it
    fills what either of them fills; "integration" (one of the two, not known which) counts as filled when at least
    one of them fills it (the keys only the Trainer fills are named in the file's note)."""
    fill = BY_PATH.get(path)
    if fill is None or consumer == "plain":
        return False
    if consumer == "accelerate":
        return fill.accelerate is not None
    return True


def auto_paths(data: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every key whose value is the text "auto", depth first in file order (lists are not walked: "auto" inside
    a list is never filled by anyone and DeepSpeed has no list of numbers that could take it)."""
    if not isinstance(data, dict):
        return
    # A stack of (the mapping's remaining items, its path) rather than nested generators: a section of many
    # small mappings costs no generator each.
    stack = [(iter(data.items()), prefix)]
    while stack:
        items, base = stack[-1]
        for key, value in items:
            if isinstance(value, dict):
                stack.append((iter(value.items()), base + (str(key),)))
                break
            if value == "auto":
                yield base + (str(key),)
        else:
            stack.pop()


def dotted(path: Path) -> str:
    return ".".join(path)


# ------------------------------------------------------------------------------------------ the script

# transformers' Trainer family (Trainer, Seq2SeqTrainer, TRL's SFTTrainer/DPOTrainer/..., all subclasses of
# transformers.Trainer) and TrainingArguments; accelerate's own API; DeepSpeed's own entry point.
_TRAINER = re.compile(r"\b(?:\w*Trainer\s*\(|TrainingArguments\b)")
_LIGHTNING = re.compile(r"^\s*(?:import|from)\s+(?:lightning|pytorch_lightning)\b", re.MULTILINE)
_ACCELERATE = re.compile(r"\bAccelerator\s*\(")
_DEEPSPEED = re.compile(r"\bdeepspeed\.initialize\s*\(")


def consumer_of_script(text: str) -> Consumer | None:
    """Who fills "auto" for a training script, from its source: a transformers Trainer (or TrainingArguments) ->
    the HF Trainer; else Accelerator(...) -> accelerate; else deepspeed.initialize(...) -> nobody; else unknown."""
    if _TRAINER.search(text) and not _LIGHTNING.search(text):  # Lightning's Trainer fills no "auto"
        return "hf_trainer"
    if _ACCELERATE.search(text):
        return "accelerate"
    if _DEEPSPEED.search(text):
        return "plain"
    return None


_SCRIPT_WORDS = {"hf_trainer": "uses a transformers Trainer", "accelerate": "uses Accelerator",
                 "plain": "calls deepspeed.initialize"}


def script_consumer(script: str | None) -> tuple[Consumer | None, str]:
    """(who fills "auto", why we think so) for a training script file; (None, "") when it cannot be read or does
    not say (a module name, a shell wrapper...). Only the first 2 MB are read: a training script is far smaller."""
    if not script or not script.endswith(".py"):
        return None, ""
    try:
        with open(script, encoding="utf-8", errors="replace") as handle:
            text = handle.read(2 << 20)
    except OSError:
        return None, ""
    consumer = consumer_of_script(text)
    if consumer is None:
        return None, ""
    name = script.replace("\\", "/").rsplit("/", 1)[-1]
    return consumer, f"{name} {_SCRIPT_WORDS[consumer]}"

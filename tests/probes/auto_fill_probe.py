"""Feeds DeepSpeed configs full of "auto" through the installed transformers and accelerate (the `train` extra)
and prints, as JSON, which keys each one filled. Run by tests/test_config_auto_fill_tools.py in a subprocess:
the test process never imports the training libraries.

  hf_trainer: HfTrainerDeepSpeedConfig.trainer_config_process + trainer_config_finalize with real
              TrainingArguments and a tiny Llama model (hidden_size 16), as Trainer does before accelerate.
  accelerate: Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=...)).prepare(model, DummyOptim,
              DataLoader, DummyScheduler) in one CPU process; deepspeed.initialize is replaced by a catch that
              records the config accelerate hands to DeepSpeed (everything before it is accelerate's own code).
  refused:    each given key alone left "auto" beside the filled ones: accelerate's error text, or null.
argv[1]: JSON {"hf_trainer": config, "accelerate": config, "refused": {dotted key: config}}.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PROBE_PORT", "29613"), RANK="0",
                  WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", ACCELERATE_USE_DEEPSPEED="true")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, GradientState  # noqa: E402
from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments  # noqa: E402
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig  # noqa: E402


def autos(data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        if value == "auto":
            out.append(prefix + key)
        elif isinstance(value, dict):
            out += autos(value, prefix + key + ".")
    return out


def model() -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, vocab_size=32))


def hf_trainer(config: dict) -> list[str]:
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, use_cpu=True, report_to=[])
        hf = HfTrainerDeepSpeedConfig(copy.deepcopy(config))
        hf.trainer_config_process(args)
        hf.trainer_config_finalize(args, model(), 100)
        left = set(autos(hf.config))
    return sorted(set(autos(config)) - left)


class Handed(Exception):
    pass


def accelerate(config: dict) -> dict:
    """The config accelerate hands to deepspeed.initialize, or {"error": text}."""
    handed: dict = {}

    def catch(**kwargs: object) -> None:
        handed.update(kwargs["config_params"])  # type: ignore[arg-type]
        raise Handed

    deepspeed.initialize = catch
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    try:
        acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=copy.deepcopy(config)), mixed_precision="bf16")
        m = model()
        optimizer = DummyOptim(m.parameters(), lr=1e-3, weight_decay=0.1)
        acc.prepare(m, optimizer, torch.utils.data.DataLoader(list(range(8)), batch_size=4),
                    DummyScheduler(optimizer, total_num_steps=100, warmup_num_steps=10))
    except Handed:
        return handed
    except ValueError as exc:
        return {"error": str(exc)}
    return {"error": "deepspeed.initialize was not reached"}


def main() -> None:
    job = json.loads(sys.argv[1])
    handed = accelerate(job["accelerate"])
    reply = {
        "hf_trainer": hf_trainer(job["hf_trainer"]),
        "accelerate": sorted(set(autos(job["accelerate"])) - set(autos(handed))) if "error" not in handed else [],
        "accelerate_error": handed.get("error"),
        "refused": {key: accelerate(config).get("error") for key, config in job["refused"].items()},
    }
    print("PROBE " + json.dumps(reply))


if __name__ == "__main__":
    main()

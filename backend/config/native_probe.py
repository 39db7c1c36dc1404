"""Runs inside the training interpreter (not the dashboard's): asks DeepSpeed / accelerate themselves about a config.

Standalone on purpose: `native.py` runs this file's text with `python -c` in whatever interpreter has the `train`
extra, so it imports nothing from traindeck and nothing heavy until a check needs it. It reads one JSON request on
stdin ({"kind", "data", "world_size", "file", and "text" when the caller could not read the file: the tool reads
it then, as it reads a config file}) and writes one line `MARK + JSON reply` on stdout:
  {"status": "ok", "findings": [{"path": [...], "message": "..."}]}
  {"status": "missing", "package": "deepspeed"}          the package is not installed there
  {"status": "import-error", "package": ..., "error": ...}
  {"status": "probe-error", "error": ...}               a bug here, never a traceback to the caller
Everything the libraries print goes to stderr.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import sys
import tempfile

MARK = "@@traindeck-native@@"
ZERO = "zero_optimization"
BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


class Findings:
    def __init__(self):
        self.items = []

    def add(self, path, message):
        item = {"path": [p if isinstance(p, (str, int)) else str(p) for p in path], "message": str(message).strip()}
        if item not in self.items:
            self.items.append(item)

    def said(self, message):
        """Whether this text was reported already (DeepSpeedConfig repeats a section's complaint)."""
        text = str(message).strip()
        return any(item["message"] == text or item["message"].endswith(": " + text) for item in self.items)

    def validation(self, exc, base):
        """One finding per pydantic error, at the key it names."""
        for error in exc.errors():
            loc = list(base) + [p for p in error.get("loc", ())]
            text = error.get("msg", str(exc))
            if error.get("type") != "extra_forbidden" and error.get("loc") and "input" in error:
                text += " (got {!r})".format(error["input"])
            self.add(loc, text)


def _int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


# ------------------------------------------------------------------------------------------ DeepSpeed


def check_deepspeed(request):
    if importlib.util.find_spec("deepspeed") is None:
        return {"status": "missing", "package": "deepspeed"}
    try:
        import deepspeed  # noqa: F401
        import deepspeed.runtime.config as ds_config
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except Exception as exc:  # a broken install (CUDA mismatch, missing dependency...)
        return {"status": "import-error", "package": "deepspeed", "error": f"{type(exc).__name__}: {exc}"}
    found = Findings()
    data = request["data"]
    if "text" in request:  # DeepSpeedConfig(path) reads the file with hjson, refusing duplicate keys
        import hjson
        try:
            data = hjson.loads(request["text"], object_pairs_hook=getattr(ds_config, "dict_raise_error_on_duplicate_keys", None))
        except Exception as exc:
            found.add((), f"cannot read the file: {type(exc).__name__}: {exc}")
            return {"status": "ok", "findings": found.items}
        if not isinstance(data, dict):
            found.add((), f"the file holds {type(data).__name__}, not a mapping of keys")
            return {"status": "ok", "findings": found.items}
    checked = set()  # pydantic model names already checked section by section

    def model(name, path, build):
        checked.add(name)
        try:
            build()
        except Exception as exc:
            report(found, exc, path)

    zero = data.get(ZERO)
    if isinstance(zero, dict):
        model("DeepSpeedZeroConfig", (ZERO,), lambda: DeepSpeedZeroConfig(**zero))
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    if isinstance(data.get("fp16"), dict):
        model("DeepSpeedFP16Config", ("fp16",), lambda: DeepSpeedFP16Config(**data["fp16"]))
    bf16_key = "bf16" if "bf16" in data or "bfloat16" not in data else "bfloat16"
    if isinstance(data.get(bf16_key), dict):
        model("DeepSpeedBF16Config", (bf16_key,), lambda: DeepSpeedBF16Config(**data[bf16_key]))
    from deepspeed.monitor.config import DeepSpeedMonitorConfig
    monitors = {k: data[k] for k in ("tensorboard", "wandb", "csv_monitor", "comet") if isinstance(data.get(k), dict)}
    if monitors:
        model("DeepSpeedMonitorConfig", (), lambda: DeepSpeedMonitorConfig(**monitors))
    if isinstance(data.get("comms_logger"), dict):
        from deepspeed.comm.config import CommsLoggerConfig
        model("CommsLoggerConfig", ("comms_logger",), lambda: CommsLoggerConfig(**data["comms_logger"]))
    if isinstance(data.get("hybrid_engine"), dict):
        model("HybridEngineConfig", ("hybrid_engine",), lambda: ds_config.HybridEngineConfig(**data["hybrid_engine"]))
    if isinstance(data.get("compile"), dict):
        from deepspeed.compile.config import CompileConfig
        model("CompileConfig", ("compile",), lambda: CompileConfig(**data["compile"]))
    timers = data.get("timers")
    if isinstance(timers, dict) and isinstance(timers.get("throughput"), dict):
        from deepspeed.utils.config import DeepSpeedThroughputTimerConfig
        model("DeepSpeedThroughputTimerConfig", ("timers", "throughput"),
              lambda: DeepSpeedThroughputTimerConfig(**timers["throughput"]))
    check_optimizer(data, found)
    check_scheduler(data, found)
    check_whole(data, request.get("world_size"), found, checked, ds_config)
    return {"status": "ok", "findings": found.items}


# Where DeepSpeedConfig's own messages belong, by how they start (runtime/config.py).
WHOLE_MESSAGES = (
    ("Check batch related parameters", ("train_batch_size",)),
    ("Train batch size", ("train_batch_size",)),
    ("Micro batch size", ("train_micro_batch_size_per_gpu",)),
    ("Gradient accumulation steps", ("gradient_accumulation_steps",)),
    ("Either train_batch_size", ()),
    ("bfloat16 and fp16 modes", ("bf16", "enabled")),
    ("Invalid communication_data_type", ("communication_data_type",)),
    ("Invalid gradient_allreduce_op", ("gradient_allreduce_op",)),
    ("gradient_allreduce_op", ("gradient_allreduce_op",)),
    ("Checkpoint config contains invalid tag_validation", ("checkpoint", "tag_validation")),
    ("Fp16_master_weights_and_grads", ("fp16", "fp16_master_weights_and_grads")),
    ("Bf16_master_weights_and_grads", ("bf16", "bf16_master_weights_and_grads")),
    ("bf16_optimizer_states", ("bf16", "bf16_optimizer_states")),
    ("data_types.keep_in_fp32_modules", ("data_types", "keep_in_fp32_modules")),
    ("GDS currently only supported", ("aio", "use_gds")),
)
MODEL_PATHS = {
    "DeepSpeedZeroConfig": (ZERO,), "DeepSpeedFP16Config": ("fp16",), "DeepSpeedBF16Config": ("bf16",),
    "DeepSpeedMonitorConfig": (), "CommsLoggerConfig": ("comms_logger",), "HybridEngineConfig": ("hybrid_engine",),
    "CompileConfig": ("compile",), "DeepSpeedThroughputTimerConfig": ("timers", "throughput"),
    "TPTrainingConfig": ("tensor_parallel",),
}


def report(found, exc, path):
    if hasattr(exc, "errors") and hasattr(exc, "title"):  # a pydantic ValidationError (DeepSpeed's models)
        found.validation(exc, path)
    else:
        found.add(path, exc if str(exc) else type(exc).__name__)


def check_whole(data, world_size, found, checked, ds_config):
    """DeepSpeedConfig(dict) itself, with the world size it would get from torch.distributed patched in.

    It stops at its first complaint; after each one the key concerned is left out and it is asked again, so one
    run reports what it would refuse one restart after another."""
    param_dict = {k: v for k, v in data.items() if not (v == "auto" and k in BATCH + ("gradient_clipping",))}
    if not any(k in param_dict for k in BATCH[:2]) and any(data.get(k) == "auto" for k in BATCH):
        param_dict["train_micro_batch_size_per_gpu"] = 1  # what accelerate / the HF Trainer would fill in
    size = world_size
    if size is None:
        t, m, g = (_int(param_dict.get(k)) for k in BATCH)
        size = t // (m * g) if t and m and g and t % (m * g) == 0 else 1

    class Dist:  # deepspeed.comm as DeepSpeedConfig uses it, without a process group
        @staticmethod
        def get_rank(*args, **kwargs):
            return 0

        @staticmethod
        def get_world_size(*args, **kwargs):
            return size

    saved = ds_config.dist
    ds_config.dist = Dist
    try:
        for _ in range(24):
            try:
                ds_config.DeepSpeedConfig(copy.deepcopy(param_dict))
                return
            except Exception as exc:
                drop = whole_failure(exc, world_size, found, checked, ds_config)
            if not any(_pop(param_dict, path) for path in drop):
                return
    finally:
        ds_config.dist = saved


MODEL_KEYS = {
    "DeepSpeedZeroConfig": (ZERO,), "DeepSpeedFP16Config": ("fp16",), "DeepSpeedBF16Config": ("bf16", "bfloat16"),
    "DeepSpeedMonitorConfig": ("tensorboard", "wandb", "csv_monitor", "comet"), "CommsLoggerConfig": ("comms_logger",),
    "HybridEngineConfig": ("hybrid_engine",), "CompileConfig": ("compile",), "DeepSpeedThroughputTimerConfig": ("timers",),
    "TPTrainingConfig": ("tensor_parallel",),
}


def whole_failure(exc, world_size, found, checked, ds_config):
    """Report one DeepSpeedConfig failure at the key it concerns; the top-level keys to leave out next time."""
    text = str(exc)
    title = getattr(exc, "title", None)
    path: tuple = ()
    if title in MODEL_KEYS:
        if title not in checked:  # already reported section by section otherwise
            report(found, exc, MODEL_PATHS[title])
        return [(k,) for k in MODEL_KEYS[title]]
    for key, message in dict(getattr(ds_config, "_REMOVED_TOP_LEVEL_CONFIG_KEYS", {})).items():
        if text == message:
            path = (key,)
    for key, message in dict(getattr(ds_config, "_REMOVED_ZERO_CONFIG_KEYS", {})).items():
        if text == message:
            path = (ZERO, key)
    if not path:
        for start, where in WHOLE_MESSAGES:
            if text.startswith(start):
                path = where
                break
    batch = text.startswith("Check batch related parameters")
    if not (batch and world_size is None) and not found.said(text):
        # (no world size given: traindeck's own rule says which sizes work)
        found.add(path, text if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {text}")
    if batch:
        return [("train_batch_size",)]
    return [path[:2] if path[0] == ZERO else path[:1]] if path else []


def _pop(data, path):
    """Leave out the key at `path` (a copy of each dict on the way); whether there was one."""
    *parents, last = path
    node = data
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            return False
        node[key] = child = dict(child)
        node = child
    if last not in node:
        return False
    del node[last]
    return True


def check_optimizer(data, found):
    """The optimizer class DeepSpeed would build (engine._configure_basic_optimizer) takes these params?"""
    optimizer = data.get("optimizer")
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("type"), str):
        return
    import torch
    name, params = optimizer["type"], optimizer.get("params") or {}
    if not isinstance(params, dict):
        return
    params = {k: v for k, v in params.items()}
    zero = data[ZERO] if isinstance(data.get(ZERO), dict) else {}
    offload = zero["offload_optimizer"] if isinstance(zero.get("offload_optimizer"), dict) else {}
    on_cpu = offload.get("device") in ("cpu", "nvme")
    lower = name.lower()
    extra: dict = {}
    try:
        cls = optimizer_class(torch, name, lower, params, on_cpu, extra)
    except AttributeError as exc:
        return found.add(("optimizer", "type"), exc)
    except ImportError:
        return None
    if cls is None:
        return None  # built from mup / DeepSpeed's Muon wrapper: nothing simple to ask
    try:
        inspect.signature(cls).bind(None, **params, **extra)
    except TypeError as exc:
        found.add(("optimizer", "params"), f"{cls.__name__}: {exc}")


def optimizer_class(torch, name, lower, params, on_cpu, extra):
    """engine._configure_basic_optimizer / get_optimizer_configuration: the class for a config optimizer name
    (pops DeepSpeed's own params and fills `extra` with the keywords DeepSpeed adds)."""
    if lower in ("adam", "adamw"):
        adam_w_mode = params.pop("adam_w_mode", True)
        adam_w_mode = lower == "adamw" or adam_w_mode
        torch_adam = params.pop("torch_adam", False)
        params.pop("fp32_optimizer_states", None)
        if torch_adam:
            params.pop("foreach", None)
            return torch.optim.AdamW if adam_w_mode else torch.optim.Adam
        from deepspeed.ops import adam
        if on_cpu:
            extra.update(adamw_mode=adam_w_mode, fp32_optimizer_states=True)
            return adam.DeepSpeedCPUAdam
        extra.update(adam_w_mode=adam_w_mode)
        return adam.FusedAdam
    if lower == "adagrad":
        if on_cpu:
            from deepspeed.ops import adagrad
            return adagrad.DeepSpeedCPUAdagrad
        return torch.optim.Adagrad
    if lower == "lamb":
        from deepspeed.ops import lamb
        return lamb.FusedLamb
    if lower == "lion":
        from deepspeed.ops import lion
        return lion.DeepSpeedCPULion if on_cpu else lion.FusedLion
    if lower in ("muadam", "muadamw", "musgd", "muon"):
        return None
    return getattr(torch.optim, name)


def check_scheduler(data, found):
    """Build the scheduler DeepSpeed would build (engine._scheduler_from_config) on a one-parameter optimizer."""
    scheduler = data.get("scheduler")
    if not isinstance(scheduler, dict) or not isinstance(scheduler.get("type"), str):
        return
    params = scheduler.get("params") or {}
    if not isinstance(params, dict) or "auto" in params.values():
        return  # filled in by the HF Trainer / accelerate: nothing to build yet
    import torch
    from deepspeed.runtime import lr_schedules
    name = scheduler["type"]
    if hasattr(lr_schedules, name):
        cls = getattr(lr_schedules, name)
    elif hasattr(torch.optim.lr_scheduler, name):
        cls = getattr(torch.optim.lr_scheduler, name)
    else:
        return found.add(("scheduler", "type"), f"DeepSpeed does not recognize LR scheduler {name}")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    try:
        cls(optimizer, **params)
    except Exception as exc:
        found.add(("scheduler", "params"), f"{name}: {exc}")


# ------------------------------------------------------------------------------------------ accelerate


def check_accelerate(request):
    if importlib.util.find_spec("accelerate") is None:
        return {"status": "missing", "package": "accelerate"}
    try:
        import yaml
        from accelerate.commands.config.config_args import load_config_from_file
    except Exception as exc:
        return {"status": "import-error", "package": "accelerate", "error": f"{type(exc).__name__}: {exc}"}
    found = Findings()
    handle, path = tempfile.mkstemp(suffix=".yaml", prefix="traindeck-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            if "text" in request:  # the file as it is: accelerate reads it with yaml
                f.write(request["text"])
            else:
                yaml.safe_dump(request["data"], f, sort_keys=False)
        try:
            load_config_from_file(path)
        except Exception as exc:
            text = str(exc).replace(path, request.get("file") or "<pasted config>")
            found.add((), text if isinstance(exc, (ValueError, TypeError)) else f"{type(exc).__name__}: {text}")
    finally:
        os.unlink(path)
    return {"status": "ok", "findings": found.items}


CHECKS = {"deepspeed": check_deepspeed, "accelerate": check_accelerate}


def main():
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # libraries' prints and log handlers created from now on go to stderr
    try:
        request = json.loads(sys.stdin.read())
        reply = CHECKS[request["kind"]](request)
    except BaseException as exc:  # noqa: BLE001 - the caller wants one line, never a traceback
        reply = {"status": "probe-error", "error": f"{type(exc).__name__}: {exc}"}
    real_stdout.write(MARK + json.dumps(reply, default=str) + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()

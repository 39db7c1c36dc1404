"""Judge a corpus of real configs with the real tools: what DeepSpeed / accelerate themselves do with each file.

    .venv/bin/python tests/corpus/judge.py CORPUS_DIR [--out tests/corpus/verdicts.tsv] [--python PATH]

CORPUS_DIR holds manifest.tsv (relpath, repo, path, commit, kind, sha256) and the files it names (fetched from
public repositories by fetch_corpus.py; they never enter this repo). The verdict table has one row per file:
relpath, repo, path, commit, kind, route, verdict, and the tool's message (first line, the corpus path replaced by
<file>). Verdicts:
  accepted     the tool goes on with the file
  rejected     the tool refuses the file (traindeck must report an error)
  environment  refused for something about this machine, not the file (FP8 libraries, mpirun absent, no GPU for
               FSDP's sync_module_states, asked last): counted as accepted for traindeck (a file checker must
               not call the file wrong)
  tool-crash   the tool crashes on the file with an error that is its own bug (accelerate 1.15 on any SageMaker
               config: 'SageMakerConfig' object has no attribute 'parallelism_config'): no verdict on the file

Each kind is judged in one subprocess of the training interpreter (--python, default this one), which imports
deepspeed / accelerate / transformers; this process imports none of them.

What is asked, per route (the `route` column):
  deepspeed    a config with no "auto" value: what `deepspeed.initialize(config=PATH)` does with it before it
               needs a GPU: `DeepSpeedConfig(PATH)` (hjson load with duplicate keys refused,
               `_reject_removed_config_keys`, the pydantic section models, batch arithmetic, `_do_error_check`),
               then the engine's lookup of the optimizer and scheduler names (an unknown one stops it; the objects
               are not built). The data-parallel world size is the one the file implies (train_batch_size /
               (micro * accumulation) when all three are whole and divide), else 1: a file is not rejected for
               being written for another number of GPUs.
  hf-trainer   a config with "auto" values is meant for the HF Trainer / accelerate integration: loaded as
               transformers loads it (strict json: the comments hjson would take are refused), filled in by
               `HfTrainerDeepSpeedConfig.trainer_config_process` and `trainer_config_finalize`
               (TrainingArguments taking the values the file states explicitly, so a file is not rejected for
               disagreeing with arguments we made up; a model whose config has hidden_size 4096; 1000 training
               steps), then `DeepSpeedConfig(filled dict)` and the name lookups as above.
  accelerate   `accelerate launch --config_file PATH train.py` up to the point where it would start processes:
               `load_config_from_file` (unknown keys refused, enum values), `_validate_launch_command`, then the
               environment preparation of the launcher it picks (`prepare_deepspeed_cmd_env`,
               `prepare_multi_gpu_env`, `prepare_simple_launcher_cmd_env`); SageMaker and TPU configs stop
               after validation (their launchers need AWS / TPUs). Then what the script's `Accelerator()` builds
               from that environment before it needs a process group: DeepSpeedPlugin() (which reads the
               deepspeed_config_file and refuses accelerate settings the file makes it ignore) or
               FullyShardedDataParallelPlugin(), and their set_mixed_precision. The message says which stage
               refused ("at launch" / "at Accelerator()"). The working directory is the root of a copy of the
               file's repository made of the corpus files from that repository, or the config's own folder when
               the referenced file is found only from there (accelerate resolves the path against the working
               directory, and people launch from either); the referenced path is in the message column.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ["relpath", "repo", "path", "commit", "kind", "route", "verdict", "message"]
BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


# ------------------------------------------------------------------------------ worker (training interpreter)


def _first_line(exc: BaseException, path: str) -> str:
    text = str(exc).strip().replace(path, "<file>") or type(exc).__name__
    line = text.splitlines()[0].strip()
    errors = getattr(exc, "errors", None)
    if callable(errors) and hasattr(exc, "title"):  # pydantic: say which keys and why
        try:
            line += " (" + "; ".join(".".join(map(str, e.get("loc", ()))) + ": " + e.get("msg", "")
                                     for e in errors()[:4]) + ")"
        except Exception:  # noqa: BLE001 - the summary is best effort
            pass
    return f"{type(exc).__name__}: {line}"[:400]


FROM_CONFIG_FOLDER = "launched from the config's folder"
# Failures that say something about this machine, not about the file: the file is judged "environment".
# ("no available devices": FullyShardedDataParallelPlugin asks for the current GPU for sync_module_states, at the
# end of its checks, so everything else in the file was validated by then.)
ENVIRONMENT = ("FP8 is not available on this machine", "mpirun or mpiexec were not found",
               "There are currently no available devices found")
# accelerate crashing on a valid-looking file (its own bug): "tool-crash", no verdict on the file.
TOOL_CRASH = ("'SageMakerConfig' object has no attribute",)


def _rejection(route: str, exc: BaseException, path: str, note: str = "") -> tuple[str, str, str]:
    message = "; ".join(filter(None, [_first_line(exc, path), note]))
    if any(s in message for s in ENVIRONMENT):
        return route, "environment", message
    if any(s in message for s in TOOL_CRASH):
        return route, "tool-crash", message
    return route, "rejected", message


def _has_auto(value) -> bool:
    if isinstance(value, dict):
        return any(_has_auto(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_auto(v) for v in value)
    return value == "auto"


def _whole(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _deepspeed_config(config, param_dict_for_size: dict):
    """DeepSpeedConfig(config) with deepspeed.comm answering the world size the file implies (no process group)."""
    import deepspeed.runtime.config as ds_config

    t, m, g = (_whole(param_dict_for_size.get(k)) for k in BATCH)
    size = t // (m * g) if t and m and g and t % (m * g) == 0 else 1

    class Dist:
        @staticmethod
        def get_rank(*args, **kwargs):
            return 0

        @staticmethod
        def get_world_size(*args, **kwargs):
            return size

    saved = ds_config.dist
    ds_config.dist = Dist
    try:
        built = ds_config.DeepSpeedConfig(config)
    finally:
        ds_config.dist = saved
    _engine_names(built, ds_config)
    return built


def _engine_names(built, ds_config) -> None:
    """What the engine does with the optimizer and scheduler the config names, before it needs a GPU
    (engine._configure_basic_optimizer / _scheduler_from_config): an unknown name stops it."""
    import torch
    from deepspeed.runtime import lr_schedules

    name = built.optimizer_name
    if name is not None and name not in ds_config.DEEPSPEED_OPTIMIZERS:
        getattr(torch.optim, name)  # AttributeError, as in the engine
    if "max_grad_norm" in (built.optimizer_params or {}):
        raise ValueError("'max_grad_norm' is not supported as an optimizer parameter, please switch to using "
                         "the deepspeed parameter 'gradient_clipping'")
    scheduler = built.scheduler_name
    if scheduler is not None and not hasattr(lr_schedules, scheduler):
        assert hasattr(torch.optim.lr_scheduler, scheduler), f"DeepSpeed does not recognize LR scheduler {scheduler}"


def _training_args(config: dict, tmp: str):
    """TrainingArguments taking the values the file states explicitly (the rest: the defaults)."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=tmp, report_to=[], use_cpu=True)

    def explicit(value):
        return value is not None and value != "auto"

    micro, gas = config.get(BATCH[1]), config.get(BATCH[2])
    if explicit(micro) and _whole(micro):
        args.per_device_train_batch_size = _whole(micro)
    if explicit(gas) and _whole(gas):
        args.gradient_accumulation_steps = _whole(gas)
    if explicit(config.get("gradient_clipping")):
        args.max_grad_norm = config["gradient_clipping"]
    params = (config.get("optimizer") or {}).get("params") or {}
    for key, attr in (("lr", "learning_rate"), ("weight_decay", "weight_decay"), ("eps", "adam_epsilon")):
        if explicit(params.get(key)):
            setattr(args, attr, params[key])
    betas = params.get("betas")
    if explicit(betas) and isinstance(betas, list) and len(betas) == 2:
        args.adam_beta1, args.adam_beta2 = betas
    sched = (config.get("scheduler") or {}).get("params") or {}
    if explicit(sched.get("warmup_max_lr")):
        args.learning_rate = sched["warmup_max_lr"]
    for section, attr in (("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")):
        enabled = (config.get(section) or {}).get("enabled")
        if isinstance(enabled, bool):
            setattr(args, attr, enabled)
    return args


def judge_deepspeed(path: str) -> tuple[str, str, str]:
    import hjson

    with open(path, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw)
        strict = True
    except ValueError:
        strict = False
        try:  # which route: a file with comments and "auto" is still meant for the HF Trainer
            data = hjson.loads(raw.decode("utf-8"))
        except Exception:  # noqa: BLE001 - unreadable either way: DeepSpeed says so below
            data = None
    if not isinstance(data, dict) or not _has_auto(data):
        # the plain route: DeepSpeed opens the file itself (hjson, duplicate keys refused)
        try:
            from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys

            with open(path) as f:
                loaded = hjson.load(f, object_pairs_hook=dict_raise_error_on_duplicate_keys)
            _deepspeed_config(path, loaded if isinstance(loaded, dict) else {})
        except BaseException as exc:  # noqa: BLE001 - any failure is the tool's verdict
            return _rejection("deepspeed", exc, path)
        return "deepspeed", "accepted", "" if strict else "not strict JSON, but DeepSpeed's hjson reads it"
    import types

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    try:
        with tempfile.TemporaryDirectory() as tmp:
            hf = HfTrainerDeepSpeedConfig(json.loads(raw))
            args = _training_args(data, tmp)
            hf.trainer_config_process(args)
            model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=4096))
            hf.trainer_config_finalize(args, model, 1000)
            filled = hf.config
            _deepspeed_config(filled, filled)
    except BaseException as exc:  # noqa: BLE001
        return _rejection("hf-trainer", exc, path)
    return "hf-trainer", "accepted", ""


def judge_accelerate(path: str) -> tuple[str, str, str]:
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import ComputeEnvironment
    from accelerate.utils import launch as acc_launch

    note = ""
    stage = "launch"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        ds = (data or {}).get("deepspeed_config") if isinstance(data, dict) else None
        ref = ds.get("deepspeed_config_file") if isinstance(ds, dict) else None
        if ref:
            note = f"references {ref}"
        load_config_from_file(path)
        args = launch_command_parser().parse_args(["--config_file", path, "train.py"])
        args, defaults, mp_from_config_flag = _validate_launch_command(args)
        if defaults is not None and defaults.compute_environment == ComputeEnvironment.AMAZON_SAGEMAKER:
            return "accelerate", "accepted", "; ".join(filter(None, [note, "SageMaker: validated, launcher not run"]))
        env: dict[str, str] = {}
        if args.use_deepspeed and not args.cpu:  # as launch_command does
            fields = list(defaults.deepspeed_config.keys()) if defaults else []
            if mp_from_config_flag:
                fields.append("mixed_precision")
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            _, env = acc_launch.prepare_deepspeed_cmd_env(args)
        elif (args.use_fsdp or args.use_megatron_lm or args.multi_gpu) and not args.cpu:
            env = acc_launch.prepare_multi_gpu_env(args)
        elif args.tpu and not args.cpu:
            return "accelerate", "accepted", "; ".join(filter(None, [note, "TPU: validated, launcher not run"]))
        else:
            _, env = acc_launch.prepare_simple_launcher_cmd_env(args)
        stage = "Accelerator()"
        if ref and isinstance(ref, str) and not os.path.exists(ref):
            if os.path.exists(os.path.join(os.path.dirname(path), ref)):
                os.chdir(os.path.dirname(path))  # launched from the YAML's folder, as its README says
                note += f" ({FROM_CONFIG_FOLDER})"
        _accelerator_plugins(env)
    except BaseException as exc:  # noqa: BLE001
        return _rejection("accelerate", exc, path, "; ".join(filter(None, [f"at {stage}", note])))
    return "accelerate", "accepted", note


def _accelerator_plugins(env: dict[str, str]) -> None:
    """What `Accelerator()` builds from the launcher's environment in the script, before any process group:
    DeepSpeedPlugin() (reads the deepspeed_config_file, refuses accelerate settings it would ignore) or
    FullyShardedDataParallelPlugin(), then set_mixed_precision as AcceleratorState does."""
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if isinstance(v, str)})
    try:
        mixed_precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
            DeepSpeedPlugin().set_mixed_precision(mixed_precision)
        elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
            plugin = FullyShardedDataParallelPlugin()
            if mixed_precision != "no":
                plugin.set_mixed_precision(mixed_precision)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def worker(kind: str) -> None:
    """Read absolute paths (one a line) on stdin; print one JSON verdict per line, after a marker."""
    import logging

    logging.disable(logging.WARNING)
    judge = judge_deepspeed if kind == "deepspeed" else judge_accelerate
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the libraries' prints stay out of the answer
    out = []
    start = os.getcwd()
    for line in sys.stdin.read().splitlines():
        path, _, cwd = line.partition("\t")
        for key in [k for k in os.environ if k.startswith(("ACCELERATE_", "FSDP_"))]:
            os.environ.pop(key)  # left by the previous file's launcher preparation
        os.chdir(cwd or start)
        route, verdict, message = judge(path)
        out.append({"path": path, "route": route, "verdict": verdict, "message": message})
    real_stdout.write("@@verdicts@@" + json.dumps(out) + "\n")


# ------------------------------------------------------------------------------ driver


def read_manifest(corpus: Path) -> list[dict[str, str]]:
    with open(corpus / "manifest.tsv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def repo_trees(corpus: Path, rows: list[dict[str, str]], into: Path) -> dict[str, Path]:
    """A copy of each repository made of its corpus files at their paths in it (the newest version of each):
    where a config's relative paths point. Returns the copy of each file, by relpath."""
    placed: dict[str, Path] = {}
    for r in rows:  # the manifest lists newest versions first; an older one of the same path goes beside
        root = into / r["repo"].replace("/", "__")
        target = root / r["path"]
        if target.exists():
            target = target.with_name(f"{target.stem}@{r['commit'][:8]}{target.suffix}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((corpus / r["relpath"]).read_bytes())
        placed[r["relpath"]] = target
    return placed


def repo_root(placed: Path, repo_path: str) -> Path:
    """The root of the repository copy holding `placed` (the file at `repo_path` inside it)."""
    return Path(str(placed)[: -len(repo_path)]) if str(placed).endswith(repo_path) else placed.parent.parents[
        len(Path(repo_path).parts) - 2]


def judge_corpus(corpus: Path, python: str = sys.executable) -> list[dict[str, str]]:
    rows = read_manifest(corpus)
    verdicts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        placed = repo_trees(corpus, rows, Path(tmp))
        for kind in ("deepspeed", "accelerate"):
            lines = [f"{placed[r['relpath']]}\t{repo_root(placed[r['relpath']], r['path'])}"
                     for r in rows if r["kind"] == kind]
            if not lines:
                continue
            env = dict(os.environ, ACCELERATE_CONFIG_FILE="", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                       CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR="cpu", TORCHDYNAMO_DISABLE="1")
            done = subprocess.run([python, str(Path(__file__).resolve()), "--worker", kind],
                                  input="\n".join(lines), capture_output=True, text=True, cwd=tmp, env=env,
                                  timeout=1200)
            answer = [ln for ln in done.stdout.splitlines() if ln.startswith("@@verdicts@@")]
            if not answer:
                raise SystemExit(f"judge: the {kind} worker gave no answer (exit {done.returncode}):\n"
                                 + done.stderr[-3000:])
            for item in json.loads(answer[0][len("@@verdicts@@"):]):
                item["message"] = item["message"].replace(tmp, "<tmp>")
                verdicts[item["path"]] = item
        table = []
        for r in rows:
            v = verdicts[str(placed[r["relpath"]])]
            table.append({**{k: r[k] for k in ("relpath", "repo", "path", "commit", "kind")},
                          "route": v["route"], "verdict": v["verdict"],
                          "message": " ".join(v["message"].split())})
    return table


def write_table(table: list[dict[str, str]], out: Path) -> None:
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(table)
    os.replace(tmp, out)


def read_table(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("corpus", nargs="?")
    p.add_argument("--out", default=str(HERE / "verdicts.tsv"))
    p.add_argument("--python", default=sys.executable, help="the interpreter with the train extra")
    p.add_argument("--worker", choices=["deepspeed", "accelerate"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    if not args.corpus:
        p.error("CORPUS_DIR is required")
    table = judge_corpus(Path(args.corpus), args.python)
    write_table(table, Path(args.out))
    rejected = sum(r["verdict"] == "rejected" for r in table)
    print(f"judge: {len(table)} files, {rejected} rejected -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`traindeck estimate` and `traindeck advise`: memory per strategy, and the fastest strategy that fits.

    traindeck estimate (--params N | --model-config PATH) [--largest-layer N] [--gpus-per-node N] [--nodes N]
                       [--gpu-mem GiB] [--host-mem GiB] [--micro-batch N] [--seq-len N] ... [--json]
    traindeck advise   (same inputs) [--json]

Exit codes: 0 done; 1 `advise` found nothing that fits; 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from traindeck.backend.cli import UserError

ORDER = 40

PRECISIONS = ("bf16", "fp16", "fp32")
OPTIMIZERS = ("adamw", "adam", "sgd", "lion", "adamw8bit", "adafactor")
DEFAULT_SEQ_LEN = 2048


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's own errors as one line (no usage block), like every other bad input of the CLI."""

    def error(message: str) -> NoReturn:
        print(f"traindeck: {parser.prog.split()[-1]}: {message} (see {parser.prog} --help)", file=sys.stderr)
        sys.exit(2)

    parser.error = error  # type: ignore[method-assign]


def _add_inputs(p: argparse.ArgumentParser) -> None:
    model = p.add_argument_group("model (one of)")
    which = model.add_mutually_exclusive_group(required=True)
    which.add_argument("--params", metavar="N", help="parameter count: 1.5B, 350M, 125K, 7e9, 1500000000")
    which.add_argument(
        "--model-config",
        metavar="PATH",
        help="a Hugging Face config.json (or its folder), or a model id whose config is in the local HF cache; "
        "parameters are counted on the meta device, never downloaded",
    )
    model.add_argument(
        "--largest-layer",
        metavar="N",
        help="parameters of the largest single layer (ZeRO-3 gathers it whole); with --params the default is the "
        "embedding, vocab x hidden",
    )
    model.add_argument("--hidden-size", type=_positive_int, metavar="N", help="hidden size (default: from the config or derived)")
    model.add_argument("--layers", type=_positive_int, metavar="N", help="transformer layers")
    model.add_argument("--heads", type=_positive_int, metavar="N", help="attention heads")
    model.add_argument("--vocab-size", type=_positive_int, metavar="N", help="vocabulary size")

    hw = p.add_argument_group("machine (detected where not given)")
    hw.add_argument("--gpus-per-node", type=_positive_int, metavar="N", help="GPUs per node (default: detected, else 1)")
    hw.add_argument("--nodes", type=_positive_int, default=1, metavar="N", help="nodes (default 1)")
    hw.add_argument("--gpu-mem", metavar="GiB", help="memory per GPU in GiB (default: detected through NVML)")
    hw.add_argument("--host-mem", metavar="GiB", help="host RAM per node in GiB (default: detected)")
    hw.add_argument("--nvme-path", metavar="DIR", help="where NVMe offload would write (its free space is checked)")
    hw.add_argument("--disk-free", metavar="GiB", help="free NVMe space per node in GiB, instead of --nvme-path")
    hw.add_argument("--no-detect", action="store_true", help="detect nothing: use only the values given")

    run = p.add_argument_group("training")
    run.add_argument("--precision", choices=PRECISIONS, default="bf16", help="weights' precision (default bf16)")
    run.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="optimizer (default adamw; Adam(W) is exact)")
    run.add_argument("--micro-batch", type=_positive_int, default=1, metavar="N", help="micro batch per GPU (default 1)")
    run.add_argument(
        "--seq-len", type=_positive_int, metavar="N", help=f"sequence length (default {DEFAULT_SEQ_LEN}, or the model's maximum if smaller)"
    )
    run.add_argument(
        "--activation-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="activation (gradient) checkpointing (default off)",
    )
    run.add_argument(
        "--attention",
        choices=("sdpa", "eager"),
        default="sdpa",
        help="sdpa/flash stores no attention matrices (default); eager stores them (5*a*s^2*b bytes per layer)",
    )
    run.add_argument("--no-zero-init", action="store_true", help="ZeRO-3 without zero.Init: every rank loads the full model first")
    run.add_argument(
        "--buffer-factor", type=_positive_float, default=1.5, metavar="F", help="DeepSpeed's additional_buffer_factor for host figures (1.5)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def register(sub: argparse._SubParsersAction) -> None:
    est = sub.add_parser(
        "estimate",
        help="memory per GPU and per node for every DeepSpeed/FSDP strategy",
        description="Model-state memory (DeepSpeed's arithmetic), activations and a verdict for DDP, ZeRO-1/2/3, "
        "offload, NVMe and FSDP, on this machine or the one you describe.",
    )
    _add_inputs(est)
    est.set_defaults(handler=_run_estimate)
    _one_line_errors(est)
    adv = sub.add_parser(
        "advise",
        help="the fastest strategy that fits, with a ready preset",
        description="Recommend the fastest strategy that fits (no ZeRO, ZeRO-1, ZeRO-2, optimizer offload, ZeRO-3, "
        "parameter offload, NVMe) and the built-in preset that runs it.",
    )
    _add_inputs(adv)
    adv.set_defaults(handler=_run_advise)
    _one_line_errors(adv)


def _inputs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(shape, machine, workload) from the options; every problem becomes a UserError."""
    from traindeck.backend.estimate import (
        ModelConfigError,
        QuantityError,
        Workload,
        count_model_config,
        describe_machine,
        parse_count,
        parse_size,
        shape_from_params,
        with_overrides,
    )

    try:
        largest = parse_count(args.largest_layer, "--largest-layer") if args.largest_layer is not None else None
        overrides = dict(
            hidden_size=args.hidden_size, num_layers=args.layers, num_heads=args.heads, vocab_size=args.vocab_size
        )
        if args.params is not None:
            total = parse_count(args.params, "--params")
            if largest is not None and largest > total:
                raise UserError(f"--largest-layer ({largest}) is larger than --params ({total})")
            shape = shape_from_params(total, largest, **overrides)
        else:
            shape = with_overrides(count_model_config(args.model_config), largest_layer_params=largest, **overrides)
        gpu_mem = parse_size(args.gpu_mem, "--gpu-mem") if args.gpu_mem is not None else None
        host_mem = parse_size(args.host_mem, "--host-mem") if args.host_mem is not None else None
        disk = parse_size(args.disk_free, "--disk-free") if args.disk_free is not None else None
    except (QuantityError, ModelConfigError) as exc:
        raise UserError(str(exc)) from None

    machine = describe_machine(
        gpus_per_node=args.gpus_per_node,
        num_nodes=args.nodes,
        gpu_mem_bytes=gpu_mem,
        host_mem_bytes=host_mem,
        nvme_path=args.nvme_path,
        disk_free_bytes=disk,
        detect=not args.no_detect,
    )
    seq_len = args.seq_len
    notes = list(shape.assumptions)
    if seq_len is None:
        seq_len = DEFAULT_SEQ_LEN
        if shape.max_positions and shape.max_positions < seq_len:
            seq_len = shape.max_positions
        notes.append(f"sequence length {seq_len} assumed (give --seq-len)")
    workload = Workload(
        precision=args.precision,
        optimizer=args.optimizer,
        micro_batch=args.micro_batch,
        seq_len=seq_len,
        activation_checkpointing=args.activation_checkpointing,
        attention=args.attention,
        zero_init=not args.no_zero_init,
        additional_buffer_factor=args.buffer_factor,
    )
    from dataclasses import replace

    return replace(shape, assumptions=tuple(notes)), machine, workload


def _header(shape: Any, machine: Any, workload: Any) -> list[str]:
    from traindeck.backend.estimate import format_count, format_gib

    gpu = f"{format_gib(machine.gpu_mem_bytes)} GiB per GPU" if machine.gpu_mem_bytes else "GPU memory unknown"
    host = f"host RAM {format_gib(machine.host_mem_bytes)} GiB per node" if machine.host_mem_bytes else "host RAM unknown"
    disk = f", NVMe free {format_gib(machine.disk_free_bytes)} GiB" if machine.disk_free_bytes else ""
    tied = {True: ", tied embeddings", False: ", untied embeddings", None: ""}[shape.tied_embeddings]
    source = "" if shape.source == "params" else f" ({shape.model_class or 'model'} from {shape.source})"
    lines = [
        f"Model:    {format_count(shape.total_params)} params, largest layer {format_count(shape.largest_layer_params)}"
        f"{tied}; hidden {shape.hidden_size}, {shape.num_layers} layers, {shape.num_heads} heads, vocab {shape.vocab_size}"
        f"{source}",
        f"Machine:  {machine.num_nodes} node(s) x {machine.gpus_per_node} GPU(s), {gpu}, {host}{disk}",
        f"Training: {workload.precision}, {workload.optimizer}, micro batch {workload.micro_batch}, sequence "
        f"{workload.seq_len}, activation checkpointing {'on' if workload.activation_checkpointing else 'off'}, "
        f"{workload.attention} attention, zero_init {'on' if workload.zero_init else 'off'}",
    ]
    lines += [f"Assumed:  {a}" for a in shape.assumptions]
    lines += [f"Note:     {n}" for n in machine.notes if "detected" not in n or "no NVIDIA" in n]
    return lines


def _table(rows: list[Any]) -> list[str]:
    from traindeck.backend.estimate import format_gib

    head = f"{'strategy':<48} {'GPU states':>10} {'activ.':>7} {'GPU total':>9} {'host/node':>9} {'NVMe/node':>9}  verdict"
    out = [head, "-" * len(head)]
    for r in rows:
        disk = format_gib(r.disk_bytes_per_node) if r.disk_bytes_per_node else "-"
        out.append(
            f"{r.label:<48} {format_gib(r.gpu_bytes_per_device):>10} {format_gib(r.activation_bytes_per_device):>7} "
            f"{format_gib(r.gpu_total_bytes_per_device):>9} {format_gib(r.cpu_bytes_per_node):>9} {disk:>9}  {r.verdict}"
        )
    out.append(
        "GiB. GPU states and host/node: model states, DeepSpeed's arithmetic (host incl. its 1.5 buffer factor); "
        "GPU total adds activations, the allocator's reserve, the CUDA context and DeepSpeed's ZeRO-1/2 step buffers."
    )
    return out


def _run_estimate(args: argparse.Namespace) -> int:
    from traindeck.backend.estimate import estimate_rows

    shape, machine, workload = _inputs(args)
    rows = estimate_rows(shape, machine, workload)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
        return 0
    print("\n".join(_header(shape, machine, workload)))
    print()
    print("\n".join(_table(rows)))
    if machine.gpu_mem_bytes is None:
        print("GPU memory unknown: verdicts are 'unknown'; give --gpu-mem GiB.")
    return 0


def _run_advise(args: argparse.Namespace) -> int:
    from traindeck.backend.estimate import advise, estimate_rows, format_gib

    shape, machine, workload = _inputs(args)
    rows = estimate_rows(shape, machine, workload)
    try:
        advice = advise(rows, workload, nvme_path=args.nvme_path)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps(advice.to_dict(), indent=2))
        return 0 if advice.row is not None else 1
    print("\n".join(_header(shape, machine, workload)))
    print()
    row = advice.row
    if row is None:
        print(f"Nothing fits: {advice.reason}")
    else:
        print(f"Recommended: {row.label}  ->  preset {advice.preset}")
        print(f"  Why: {advice.reason}")
        print(
            f"  GPU per device: {format_gib(row.gpu_total_bytes_per_device)} GiB (model states "
            f"{format_gib(row.gpu_bytes_per_device)}, activations {format_gib(row.activation_bytes_per_device)}, "
            f"overhead {format_gib(row.overhead_bytes_per_device)}); host RAM per node: {format_gib(row.cpu_bytes_per_node)} GiB"
            + (f"; NVMe per node: {format_gib(row.disk_bytes_per_node)} GiB" if row.disk_bytes_per_node else "")
        )
        for key, value in advice.settings.items():
            print(f"  Set: {key} = {json.dumps(value)}")
        if advice.alternative_preset:
            print(f"  FSDP alternative: preset {advice.alternative_preset}")
        for note in row.notes:
            print(f"  Note: {note}")
    if advice.rejected:
        print("Passed over (faster, but):")
        for rej in advice.rejected:
            print(f"  {rej.label}: {rej.why}")
    return 0 if row is not None else 1

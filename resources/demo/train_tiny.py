"""A tiny training job for trying traindeck on any machine: a small MLP fitted to synthetic data on the CPU.

Runs the same way under plain python, `accelerate launch` and the DeepSpeed launcher:

    python train_tiny.py
    accelerate launch --config_file cfg.yaml train_tiny.py
    deepspeed --num_gpus 2 train_tiny.py --deepspeed_config ds_config.json

It prints what real training scripts print (a tqdm bar redrawn with carriage returns, Hugging Face Trainer style
`{'loss': ...}` lines, DeepSpeed's own step lines when DeepSpeed is used) so the dashboard has something to parse,
and reports exact metrics through `traindeck_report` when that helper is importable. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps to run")
    p.add_argument("--batch-size", type=int, default=None,
                   help="samples per step and process (default: the DeepSpeed config's "
                        "train_micro_batch_size_per_gpu under DeepSpeed, else 32)")
    p.add_argument("--hidden", type=int, default=256, help="width of the hidden layers")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--step-time", type=float, default=0.1,
                   help="extra seconds per step, so the demo lasts long enough to watch (0 for tests)")
    p.add_argument("--log-every", type=int, default=10, help="print a loss line every N steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-tqdm", action="store_true", help="print a plain carriage-return bar instead of tqdm")
    # Set by the DeepSpeed launcher / expected by DeepSpeed scripts; HF Trainer scripts call it --deepspeed.
    p.add_argument("--deepspeed_config", "--deepspeed", dest="deepspeed_config", default=None)
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return p.parse_args(argv)


def _reporter():
    """The `traindeck_report` helper when importable (traindeck puts it on PYTHONPATH), else None: the script
    stays standalone."""
    try:
        import traindeck_report  # type: ignore[import-not-found]
    except ImportError:
        return None
    return traindeck_report


def _progress_bar(total: int, enabled: bool, plain: bool):
    if not enabled:
        return None
    if not plain:
        try:
            from tqdm import tqdm

            # tqdm writes to stderr and redraws the line with "\r": exactly what unmodified scripts do.
            return tqdm(total=total, desc="train", unit="step", mininterval=0.2, dynamic_ncols=False, ncols=100)
        except ImportError:
            pass
    return _PlainBar(total)


class _PlainBar:
    """A minimal tqdm look-alike (same line format) for environments without tqdm."""

    def __init__(self, total: int) -> None:
        self.total, self.n, self.t0 = total, 0, time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.n / elapsed
        left = (self.total - self.n) / rate if rate else 0.0
        pct = 100 * self.n // max(self.total, 1)
        sys.stderr.write(f"\rtrain: {pct:3d}%| {self.n}/{self.total} [{_mmss(elapsed)}<{_mmss(left)}, {rate:.2f}step/s]")
        sys.stderr.flush()

    def write(self, text: str) -> None:
        sys.stderr.write("\r" + " " * 80 + "\r")
        print(text, flush=True)

    def close(self) -> None:
        sys.stderr.write("\n")


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


def _read_json(path: str) -> dict:
    """The DeepSpeed config the launcher handed over (a file; {} when it cannot be read: DeepSpeed says why)."""
    import json

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _weights_dtype(model):
    """The dtype of the model's floating-point weights as prepared (fp32 unless DeepSpeed cast them)."""
    import torch

    for param in model.parameters():
        if param.is_floating_point():
            return param.dtype
    return torch.float32


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from torch import nn

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, min(4, (os.cpu_count() or 1) // max(1, int(os.environ.get("WORLD_SIZE", 1))))))

    model = nn.Sequential(
        nn.Linear(32, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden), nn.GELU(), nn.Linear(args.hidden, 1)
    )
    # Synthetic regression target: a fixed random non-linear function of the input, learnable by the MLP.
    gen = torch.Generator().manual_seed(1234)
    w_true = torch.randn(32, 1, generator=gen)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(args.batch_size, 32)
        return x, torch.tanh(x @ w_true) + 0.05 * torch.randn(args.batch_size, 1)

    mode = "python"
    engine = None
    accelerator = None
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.deepspeed_config:
        import deepspeed

        mode = "deepspeed"
        deepspeed.init_distributed()
        # A config without an optimizer section (the accelerate presets': their scripts make the optimizer) gets
        # the script's own, DeepSpeed's CPU Adam where the optimizer is offloaded (ZeRO-Offload requires it).
        client_optimizer = None
        config = _read_json(args.deepspeed_config)
        if "optimizer" not in config:
            offload = (config.get("zero_optimization") or {}).get("offload_optimizer") or {}
            if offload.get("device") in ("cpu", "nvme"):
                from deepspeed.ops.adam import DeepSpeedCPUAdam

                client_optimizer = DeepSpeedCPUAdam(model.parameters(), lr=args.lr)
            else:
                client_optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=client_optimizer,
                                               model_parameters=None if client_optimizer else model.parameters(),
                                               config=args.deepspeed_config)
        rank, world = engine.global_rank, engine.world_size
        optimizer = None
        if args.batch_size is None:  # the batch DeepSpeed counts (its samples/s, traindeck's throughput) is trained
            args.batch_size = engine.train_micro_batch_size_per_gpu()
    elif any(k.startswith("ACCELERATE_") for k in os.environ):
        from accelerate import Accelerator

        mode = "accelerate"
        accelerator = Accelerator()
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        model, optimizer = accelerator.prepare(model, optimizer)
        rank, world = accelerator.process_index, accelerator.num_processes
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    if args.batch_size is None:
        args.batch_size = 32
    # DeepSpeed (launched directly or through accelerate) casts the weights to the config's bf16/fp16; the inputs
    # follow them, and the loss is taken in fp32 against the fp32 targets.
    dtype = _weights_dtype(engine if engine is not None else model)
    main_process = rank == 0
    report = _reporter()  # prints on rank 0 only
    if main_process:
        print(f"train_tiny: mode={mode} world_size={world} steps={args.steps} batch_size={args.batch_size} "
              f"params={sum(p.numel() for p in model.parameters())} dtype={str(dtype).removeprefix('torch.')}",
              flush=True)

    bar = _progress_bar(args.steps, main_process, args.no_tqdm)
    loss_fn = nn.MSELoss()
    t_start = time.monotonic()
    for step in range(1, args.steps + 1):
        x, y = batch()
        if engine is not None:
            x, y = x.to(engine.device, dtype), y.to(engine.device)
            loss = loss_fn(engine(x).float(), y)
            engine.backward(loss)
            engine.step()
            lr = engine.get_lr()[0] if engine.get_lr() else args.lr
        else:
            assert optimizer is not None
            if accelerator is not None:
                x, y = x.to(accelerator.device, dtype), y.to(accelerator.device)
            loss = loss_fn(model(x).float(), y)
            optimizer.zero_grad()
            if accelerator is not None:
                accelerator.backward(loss)
            else:
                loss.backward()
            optimizer.step()
            lr = args.lr
        if args.step_time > 0:
            time.sleep(args.step_time)
        if bar is not None:
            bar.update(1)
        if report is not None:
            report.progress(step, total=args.steps)
        if main_process and (step % args.log_every == 0 or step == args.steps):
            value = float(loss.detach())
            epoch = step / args.steps
            line = f"{{'loss': {value:.4f}, 'learning_rate': {lr:.3g}, 'epoch': {epoch:.2f}, 'step': {step}}}"
            if bar is not None:
                bar.write(line)
            else:
                print(line, flush=True)
            if report is not None:
                report.metrics(step=step, loss=value, learning_rate=lr)
            if not math.isfinite(value):
                print("train_tiny: loss is not finite, stopping", flush=True)
                return 1
    if bar is not None:
        bar.close()
    if main_process:
        print(f"train_tiny: done in {time.monotonic() - t_start:.1f}s", flush=True)
    if engine is not None or accelerator is not None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A training job of a chosen size for traindeck's GPU acceptance check (tests/gpu/gpu_check.py launches it).

Run by the DeepSpeed launcher with a ZeRO config, one rank per GPU: a stack of square linear layers without bias
(--layers x --hidden^2 parameters) made directly on the rank's GPU in bf16, a few steps on random input, and one
JSON line per milestone so the check can set CUDA's allocator figures beside traindeck's estimate and recordings:

    {"probe": "ready", "params": N, "allocated_bytes": ...}        after deepspeed.initialize
    {"probe": "step", "step": 1, "loss": ..., "allocated_bytes": ...}
    {"probe": "done", "max_allocated_bytes": ..., "max_reserved_bytes": ..., "total_bytes": ...}

--oom asks for more GPU memory than the card has after the first step, so the rank dies of a real CUDA OOM with
the allocator's own message. --hold keeps the rank alive (memory held) after its last step, so the 1 Hz sampler
records the final figures; --steps 0 trains until the run is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024, help="width of each square layer")
    p.add_argument("--layers", type=int, default=4, help="number of layers")
    p.add_argument("--micro-batch", type=int, default=2, help="rows of random input per step")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (0: until stopped)")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait after each step")
    p.add_argument("--hold", type=float, default=0.0, help="seconds to keep the memory after the last step")
    p.add_argument("--oom", action="store_true", help="ask for 1.2x the card's memory after the first step")
    # Set by the DeepSpeed launcher (the run's config through traindeck's {ds_config}).
    p.add_argument("--deepspeed_config", "--deepspeed", dest="deepspeed_config", default=None)
    p.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return p.parse_args(argv)


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import deepspeed
    import torch

    deepspeed.init_distributed()
    device = torch.device("cuda", args.local_rank)
    torch.cuda.set_device(device)
    # Made on the GPU in bf16: a 1e9-parameter model is ready in a second instead of minutes of CPU init.
    layers = [torch.nn.Linear(args.hidden, args.hidden, bias=False, device=device, dtype=torch.bfloat16)
              for _ in range(args.layers)]
    model = torch.nn.Sequential(*layers)
    params = sum(p.numel() for p in model.parameters())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.deepspeed_config)
    torch.cuda.synchronize()
    say(probe="ready", params=params, hidden=args.hidden, layers=args.layers,
        allocated_bytes=torch.cuda.memory_allocated(), reserved_bytes=torch.cuda.memory_reserved())
    dtype = next(engine.module.parameters()).dtype
    step = 0
    while args.steps == 0 or step < args.steps:
        step += 1
        x = torch.randn(args.micro_batch, args.hidden, device=engine.device, dtype=dtype)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        say(probe="step", step=step, loss=round(loss.item(), 6), allocated_bytes=torch.cuda.memory_allocated())
        if args.oom and step == 1:
            _free, total = torch.cuda.mem_get_info()
            hog = torch.empty(int(total * 1.2), dtype=torch.uint8, device=engine.device)  # raises OutOfMemoryError
            del hog
        if args.sleep:
            time.sleep(args.sleep)
    torch.cuda.synchronize()
    _free, total = torch.cuda.mem_get_info()
    say(probe="done", params=params, steps=step, max_allocated_bytes=torch.cuda.max_memory_allocated(),
        max_reserved_bytes=torch.cuda.max_memory_reserved(), allocated_bytes=torch.cuda.memory_allocated(),
        total_bytes=total)
    if args.hold:
        time.sleep(args.hold)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

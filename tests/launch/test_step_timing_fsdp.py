"""Step timing of FSDP runs: torch's native FSDP2 (`fully_shard`) and FSDP1 (`FullyShardedDataParallel`) on 2 CPU
ranks under torchrun, gloo.

The script (fsdp_step_loop.py) is an unmodified loop that times its own optimizer steps and, on its own clock, every
call into torch.distributed's all-gather and reduce-scatter entry points (FSDP gathers each unit's parameters in
forward and again in backward, and reduce-scatters its gradients in backward: on the CPU all of them synchronous,
through `all_gather_single`/`reduce_scatter_single` in this torch): the referee for the communication phase.

accelerate's FSDP cannot run here: accelerate makes a run FSDP only on an accelerator (its AcceleratorState turns
MULTI_GPU/NPU/XPU/... into FSDP, never MULTI_CPU, and `accelerate launch --cpu` skips the FSDP launcher), so on a
host without a GPU an FSDP config trains unsharded (distributed_type NO, or MULTI_CPU with DDP under
ACCELERATE_USE_CPU). Its ranks go through the same hooks: accelerate's FSDP2 is `fully_shard`, its FSDP1
`FullyShardedDataParallel`, both tested here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.runhelp import SCRIPTS, events, launch, steps_by_rank, succeeded_clean, traindeck_cli
from support.steptimes import assert_steps_agree

pytestmark = [pytest.mark.slow, pytest.mark.train]
torch = pytest.importorskip("torch", reason="needs the train extra")

LOOP = SCRIPTS / "fsdp_step_loop.py"
STEPS = 12
TOLERANCE = 0.05


# (FSDP flag, mode and model class the script prints, what the hooks and the verdict call it, its advice's setting)
KINDS = {
    "fsdp2": ("2", "mode=fsdp2 rank=1 model=FSDPSequential", "FSDP2 (fully_shard)", "reshard_after_forward=False"),
    "fsdp1": ("1", "mode=fsdp1 rank=1 model=FullyShardedDataParallel", "FSDP1", "SHARD_GRAD_OP"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fsdp_under_torchrun_charges_its_collectives_to_communication(tmp_path: Path, kind: str) -> None:
    flag, started, name, setting = KINDS[kind]
    # A small batch on a wide model: the parameters gathered and the gradients reduced outweigh the compute.
    run = succeeded_clean(launch(LOOP, "--fsdp", flag, "--steps", str(STEPS), "--batch-size", "16", "--times", str(tmp_path / "times{rank}.json"),
                                 "--collectives", str(tmp_path / "comms{rank}.json"), launcher="torchrun", nproc=2,
                                 name=kind))
    log = Path(run.run_dir, "output.log").read_text(errors="replace")
    assert started in log, log[-3000:]
    steps = steps_by_rank(run)
    assert sorted(steps) == [0, 1], sorted(steps)
    for rank, mine in steps.items():
        assert sorted(mine) == list(range(1, STEPS + 1)), (rank, sorted(mine))
        own = json.loads((tmp_path / f"times{rank}.json").read_text())["step_ms"]
        comms = json.loads((tmp_path / f"comms{rank}.json").read_text())
        # FSDP1 on the CPU gathers into a list of tensors (all_gather); FSDP2 into one (all_gather_single).
        assert any(name.startswith("all_gather") for name in comms["calls"]), comms
        assert any(name.startswith("reduce_scatter") for name in comms["calls"]), comms
        for number in range(2, STEPS + 1):
            record = mine[number]
            for phase in ("forward", "backward", "communication", "optimizer"):
                assert record.phase(phase) > 0, (rank, number, phase, record.phases_ms)
            total = sum(record.phases_ms.values())
            assert abs(total - record.step_ms) <= TOLERANCE * record.step_ms, (rank, number, total, record)
        assert_steps_agree([(mine[n].step_ms, own[str(n)]) for n in range(3, STEPS + 1)], context=rank)
        # The script's own clock around FSDP's all-gathers and reduce-scatters (outside traindeck's wrappers) and
        # traindeck's communication phase hold the same time: the calls issue and wait on the collectives, and
        # FSDP's copies into and out of the flat buffers stay in forward and backward.
        ours = sum(mine[n].phase("communication") for n in range(2, STEPS + 1))
        theirs = sum(comms["ms"][str(n)] for n in range(2, STEPS + 1))
        print(f"rank {rank} steps 2-{STEPS}: communication {ours:.1f} ms, the script's clock {theirs:.1f} ms")
        assert 0.95 * theirs <= ours <= 1.05 * theirs, (rank, ours, theirs)

    # What the ranks' hooks said: an FSDP model, its collectives timed.
    said = [text for kind, text in events(run.id) if kind == "step_timing"]
    assert any(f"{name} model: its all-gathers, reduce-scatters and their waits" in t for t in said), said
    assert not any("could not attach" in t for t in said), said

    # The verdict through the real CLI: communication-bound with its numbers, FSDP's advice, nothing of ZeRO's.
    anatomy = json.loads(traindeck_cli("steps", run.id, "--json"))
    print("\n" + traindeck_cli("steps", run.id))
    slowest = anatomy["ranks"][str(anatomy["slowest_rank"])]
    communication = slowest["communication_ms"]
    assert communication > slowest["forward_ms"] + slowest["backward_ms"], slowest
    assert anatomy["bound"] == "communication", anatomy["summary"]
    assert anatomy["summary"].startswith("communication-bound: "), anatomy["summary"]
    assert f"({communication:.0f} ms of {slowest['step_ms']:.0f} ms" in anatomy["summary"], anatomy["summary"]
    assert f"{name} gathers each unit's parameters" in anatomy["summary"], anatomy["summary"]
    assert any(setting in line for line in anatomy["advice"]), anatomy["advice"]
    words = " ".join((anatomy["summary"], *anatomy["advice"]))
    assert not any(w in words for w in ("ZeRO", "CPU Adam", "offload", "overlap_comm")), words

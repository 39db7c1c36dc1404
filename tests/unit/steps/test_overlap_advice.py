"""The advice on communication that could overlap backward (ZeRO-1/2's `overlap_comm`) and on reduction buckets small
enough to split a step into many collectives, from built anatomies and the facts of real DeepSpeed configs (the
corpus of configs fetched from public repositories: TRAINDECK_CORPUS, else ../shared/corpus; skipped without one)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support import real_corpus

from traindeck.backend.runs.control.step_view import run_facts
from traindeck.backend.runs.record.run_store import RunRecord
from traindeck.backend.steps import PHASES, RunFacts, StepRecord, analyse

GIB = 1 << 30


CORPUS = real_corpus()
pytestmark = pytest.mark.skipif(CORPUS is None, reason="no corpus of real configs (set TRAINDECK_CORPUS)")

# Real configs, as their repositories hold them.
LLAMA_FACTORY_Z2 = "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_config.json"  # overlap_comm false, 5e8
LLAMA_FACTORY_Z3_FP8 = "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_fp8_config.json"  # reduce 12845056
DSE_Z1 = "microsoft__DeepSpeedExamples__training__autotuning__hf__dsconfigs__ds_config_z1.json"  # stage 1 alone
DSE_FP16_Z2 = "microsoft__DeepSpeedExamples__training__autotuning__hf__dsconfigs__ds_config_fp16_z2.json"
DSE_Z3 = "microsoft__DeepSpeedExamples__training__autotuning__hf__dsconfigs__ds_config_z3.json"  # stage 3 alone
AXOLOTL_Z1 = "axolotl-ai-cloud__axolotl__deepspeed_configs__zero1.json"  # overlap_comm true
TRANSFORMERS_Z2_BF16 = "huggingface__transformers__tests__deepspeed__ds_config_zero2_bf16.json"  # true, 2e8


def config(name: str, **zero: Any) -> dict[str, Any]:
    assert CORPUS is not None
    data = json.loads((CORPUS / "deepspeed" / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    data["zero_optimization"] = {**data["zero_optimization"], **zero}
    return data


def steps(gpu: bool = True, ranks: int = 2, **ms: float) -> list[StepRecord]:
    """Ten steps of each rank with these phase times; with a GPU's memory figures (a CUDA rank) or none (the CPU)."""
    phases = {p: float(ms.get(p, 0.0)) for p in PHASES}
    memory = dict(gpu_allocated=2 * GIB, gpu_reserved=2 * GIB, gpu_peak_allocated=4 * GIB,
                  gpu_peak_reserved=4 * GIB) if gpu else {}
    return [StepRecord(rank=r, step=n, t=1000.0 + n, step_ms=sum(phases.values()), phases_ms=phases, **memory)
            for r in range(ranks) for n in range(1, 11)]


# Forward 10, backward 18.5 and communication 26 ms of a 59 ms step: communication is 44% of it.
BUSY = dict(forward=10, backward=18.5, communication=26, optimizer=3, other=1.5)


def advice(records: list[StepRecord], ds_config: dict[str, Any], params: int | None = None) -> list[str]:
    return list(analyse(records, facts=RunFacts(ds_config=ds_config, cpu_cores=16, ranks_on_host=2,
                                                model_params=params)).advice)


def overlap(lines: list[str]) -> list[str]:
    return [a for a in lines if a.startswith(("overlap_comm is off", "overlap_comm is false"))]


def test_zero2_with_overlap_comm_false_is_told_to_overlap_and_what_it_costs() -> None:
    said = overlap(advice(steps(**BUSY), config(LLAMA_FACTORY_Z2)))
    assert said == ["overlap_comm is false in zero_optimization and communication takes 44% of each step on rank 0 "
                    "(26 ms of 59 ms): \"overlap_comm\": true reduces the gradient buckets while backward runs, "
                    "hiding up to 18 ms a step; it costs GPU memory: a second reduction bucket of reduce_bucket_size "
                    "(5e8 elements) (DeepSpeed's config reference; stage_1_and_2.py double-buffers the bucket)"]


def test_overlap_comm_absent_is_off_for_zero1_and_2_and_on_for_zero3() -> None:
    # DeepSpeed's default depends on the stage: runtime/zero/config.py makes an absent overlap_comm `stage == 3`.
    stage1 = overlap(advice(steps(**BUSY), config(DSE_Z1)))
    assert len(stage1) == 1 and stage1[0].startswith(
        "overlap_comm is off (DeepSpeed's default for ZeRO stages 1 and 2) and communication takes 44%")
    assert "(5e8 elements: 1.86 GiB in fp32)" in stage1[0]  # no fp16/bf16 block: fp32 gradients
    stage2 = overlap(advice(steps(**BUSY), config(DSE_FP16_Z2, reduce_bucket_size=2e8)))
    assert len(stage2) == 1 and "(2e8 elements: 381 MiB in fp16/bf16)" in stage2[0]
    # ZeRO-3 overlaps by default: nothing to turn on, and its communication figure is an upper bound.
    stage3 = advice(steps(**BUSY), config(DSE_Z3))
    assert overlap(stage3) == [] and any(a.startswith("overlap_comm is on: ") for a in stage3), stage3


def test_overlap_comm_true_keeps_the_upper_bound_advice_and_nothing_to_turn_on() -> None:
    for name in (AXOLOTL_Z1, TRANSFORMERS_Z2_BF16):
        said = advice(steps(**BUSY), config(name))
        assert overlap(said) == [], (name, said)
        assert any(a.startswith("overlap_comm is on: communication overlaps backward, so the communication figure "
                                "is an upper bound") for a in said), (name, said)
        turned_off = advice(steps(**BUSY), config(name, overlap_comm=False))  # the same config with it off
        assert len(overlap(turned_off)) == 1 and not any(a.startswith("overlap_comm is on") for a in turned_off)


def test_no_overlap_advice_where_it_cannot_help() -> None:
    z2 = config(LLAMA_FACTORY_Z2)
    assert len(overlap(advice(steps(**BUSY), z2))) == 1  # where it can
    # Communication a sixth of the step: under a fifth, not worth the memory.
    assert overlap(advice(steps(forward=20, backward=40, communication=15, optimizer=10, other=5), z2)) == []
    # The CPU: DeepSpeed's CPU accelerator has no streams to overlap on.
    assert overlap(advice(steps(gpu=False, **BUSY), z2)) == []
    # No backward timed (a hook that could not attach): nothing measured to overlap with.
    assert overlap(advice(steps(forward=28.5, communication=26, optimizer=3, other=1.5), z2)) == []
    # ZeRO off (stage 0) and "auto" (the HF Trainer fills it): nothing said.
    assert overlap(advice(steps(**BUSY), config(LLAMA_FACTORY_Z2, stage=0))) == []
    assert overlap(advice(steps(**BUSY), config(LLAMA_FACTORY_Z2, overlap_comm="auto"))) == []


def test_a_small_reduce_bucket_is_many_reductions() -> None:
    small = config(DSE_FP16_Z2, reduce_bucket_size=1e7)
    said = [a for a in advice(steps(**BUSY), small, params=1_300_000_000) if a.startswith("reduce_bucket_size")]
    assert said == ["reduce_bucket_size is 1e7 elements: about 130 reductions a step for the model's 1,300,000,000 "
                    "parameters, each a collective with its own latency (the smallest DeepSpeed's autotuner tries "
                    "for ZeRO stages 1 and 2 is 5e7; the default is 5e8): larger buckets issue fewer, for the "
                    "memory of the bucket"]
    unknown = [a for a in advice(steps(**BUSY), small) if a.startswith("reduce_bucket_size")]
    assert len(unknown) == 1 and unknown[0].startswith("reduce_bucket_size is 1e7 elements, each a collective")
    # Said on the CPU too: each gloo collective has its latency as well.
    assert any(a.startswith("reduce_bucket_size is 1e7") for a in advice(steps(gpu=False, **BUSY), small))
    # Not said: a model whose gradients fit one bucket, the autotuner's smallest bucket, little communication.
    assert not any(a.startswith("reduce_bucket_size") for a in advice(steps(**BUSY), small, params=9_000_000))
    assert not any(a.startswith("reduce_bucket_size")
                   for a in advice(steps(**BUSY), config(DSE_FP16_Z2, reduce_bucket_size=5e7)))
    assert not any(a.startswith("reduce_bucket_size") for a in advice(
        steps(forward=20, backward=40, communication=15, optimizer=10, other=5), small))


def test_zero3_buckets_of_hidden_size_squared_and_allgather_buckets_are_not_small() -> None:
    # LLaMA-Factory's fp8 ZeRO-3 config: reduce_bucket_size 3584**2, as DeepSpeed's autotuner sets it for ZeRO-3.
    said = advice(steps(**BUSY), config(LLAMA_FACTORY_Z3_FP8), params=7_000_000_000)
    assert not any(a.startswith("reduce_bucket_size") for a in said), said
    tiny = advice(steps(**BUSY), config(LLAMA_FACTORY_Z3_FP8, reduce_bucket_size=5e5))
    assert any(a.startswith("reduce_bucket_size is 5e5 elements") and "hidden_size squared" in a for a in tiny)
    # ZeRO-1/2 gather the updated parameters in one all_gather_into_tensor per group: allgather_bucket_size is unused.
    gathered = advice(steps(**BUSY), config(LLAMA_FACTORY_Z2, allgather_bucket_size=1e5))
    assert not any("allgather_bucket_size" in a for a in gathered), gathered


def test_the_facts_of_a_run_directory_reach_the_advice(tmp_path: Path) -> None:
    # The run's DeepSpeed JSON and the pre-launch estimate's parameter count, as traindeck keeps them in the run
    # directory, make the RunFacts the Step view and `traindeck steps` advise from.
    (tmp_path / "ds_config.json").write_text(json.dumps(config(DSE_FP16_Z2, reduce_bucket_size=1e7)))
    (tmp_path / "estimate.json").write_text(json.dumps({"params": 1_300_000_000, "gpu_total_bytes_per_device": 8 * GIB}))
    record = RunRecord(id="20260101-120000-7c7c", run_dir=str(tmp_path), created_at=time.time(), name="overlap",
                       state="succeeded", processes=[{"pid": 1, "role": "rank", "rank": r} for r in (0, 1)])
    records = steps(**BUSY)
    facts = run_facts(record, records)
    assert facts.model_params == 1_300_000_000 and facts.ds_config is not None
    said = analyse(records, facts=facts).advice
    assert any(a.startswith("overlap_comm is off (DeepSpeed's default for ZeRO stages 1 and 2)") for a in said), said
    assert any(a.startswith("reduce_bucket_size is 1e7 elements: about 130 reductions") for a in said), said
    (tmp_path / "estimate.json").write_text(json.dumps({"params": "many"}))
    assert run_facts(record, records).model_params is None

"""A trial's candidates: which stage/offload/micro-batch combinations are tried, how each reaches the run's
DeepSpeed config and the script's arguments, and which the estimator skips or tries last."""

from __future__ import annotations

import pytest

from traindeck.backend.estimate import FreeMemory
from traindeck.backend.presets import load_preset
from traindeck.backend.trials import (
    Candidate,
    TrialError,
    TrialOptions,
    candidate_deepspeed,
    expand,
    fitting,
    plan_trial,
    planning,
)
from traindeck.backend.trials.candidates import (
    global_batch,
    next_on_ladder,
    parse_micro_batches,
    parse_offloads,
    parse_stages,
    script_args,
    trained_batch,
)

GIB = 2**30


def test_pairs_deepspeed_refuses_are_left_out_with_a_note_and_the_rest_come_in_order() -> None:
    found, notes = expand((0, 2, 3), parse_offloads("none,cpu,cpu+params,nvme:/mnt/nv"), (1, 2), False)
    labels = [c.label for c in found]
    assert labels == ["zero0-none-mb1", "zero0-none-mb2", "zero2-none-mb1", "zero2-none-mb2", "zero2-cpu-mb1",
                      "zero2-cpu-mb2", "zero3-none-mb1", "zero3-none-mb2", "zero3-cpu-mb1", "zero3-cpu-mb2",
                      "zero3-cpu+params-mb1", "zero3-cpu+params-mb2", "zero3-nvme-mb1", "zero3-nvme-mb2"]
    assert [c.nvme_path for c in found if c.offload == "nvme"] == ["/mnt/nv", "/mnt/nv"]
    assert "ZeRO-0 with offload cpu: left out (off-loading needs ZeRO stage 1 or more)" in notes
    assert "ZeRO-2 with offload cpu+params: left out (parameters are off-loaded only by ZeRO stage 3)" in notes
    assert "ZeRO-2 with offload nvme: left out (NVMe off-load (ZeRO-Infinity) needs ZeRO stage 3)" in notes


def test_checkpointing_doubles_each_candidate_and_a_missing_ladder_starts_at_one() -> None:
    found, _ = expand((2,), (("none", ""),), (), True)
    assert [(c.micro_batch, c.checkpointing) for c in found] == [(1, False), (1, True)]
    ladder = [found[0]]
    while (nxt := next_on_ladder(ladder[-1])) is not None:
        ladder.append(nxt)
    assert [c.micro_batch for c in ladder] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize(("parse", "text", "said"), [
    (parse_stages, "2,4", "--stages 2,4: a ZeRO stage is 0, 1, 2 or 3, not '4'"),
    (parse_offloads, "cpu,gpu", "--offload cpu,gpu: each is none, cpu, cpu+params or nvme:PATH, not 'gpu'"),
    (parse_offloads, "nvme", "--offload nvme: each is none, cpu, cpu+params or nvme:PATH, not 'nvme'"),
    (parse_micro_batches, "1,0", "--micro-batch 1,0: each is a whole number of 1 or more, not '0'"),
    (parse_micro_batches, "2,2", "--micro-batch: a value is given twice"),
])
def test_bad_axes_are_said_in_one_line(parse, text, said) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError) as caught:
        parse(text)
    assert str(caught.value) == said


def test_a_candidate_sets_stage_offload_and_micro_batch_in_the_base_config_and_leaves_the_rest() -> None:
    base = load_preset("cpu-demo").deepspeed
    assert base is not None and base["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    ds = candidate_deepspeed(base, Candidate(3, "cpu+params", 8), 2, keep_global_batch=False)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert ds["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert ds["train_micro_batch_size_per_gpu"] == 8 and ds["gradient_accumulation_steps"] == 1
    assert ds["optimizer"] == base["optimizer"] and ds["zero_optimization"]["reduce_bucket_size"] == 50000000
    plain = candidate_deepspeed(base, Candidate(2, "none", 2), 2, keep_global_batch=False)
    assert "offload_optimizer" not in plain["zero_optimization"] and "offload_param" not in plain["zero_optimization"]
    assert base["zero_optimization"]["offload_optimizer"]["device"] == "cpu"  # the base is not changed
    nvme = candidate_deepspeed(base, Candidate(3, "nvme", 1, nvme_path="/mnt/nv"), 2, keep_global_batch=False)
    assert nvme["zero_optimization"]["offload_param"]["nvme_path"] == "/mnt/nv"


def test_keeping_the_global_batch_sets_the_accumulation_and_train_batch_size_to_match() -> None:
    base = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "train_batch_size": 16}
    assert global_batch(base, 2) == 16
    for micro, accumulation in ((1, 8), (2, 4), (8, 1), (16, 1)):
        ds = candidate_deepspeed(base, Candidate(2, "none", micro), 2, keep_global_batch=True)
        assert ds["gradient_accumulation_steps"] == accumulation
        assert ds["train_batch_size"] == micro * accumulation * 2  # DeepSpeed checks this product
    free = candidate_deepspeed(base, Candidate(2, "none", 1), 2, keep_global_batch=False)
    assert free["gradient_accumulation_steps"] == 2 and free["train_batch_size"] == 4


def test_an_hf_trainer_script_gets_its_batch_argument_and_checkpointing_is_added_when_asked() -> None:
    args = ["--model", "gpt2", "--per_device_train_batch_size", "8", "--deepspeed", "{ds_config}"]
    assert script_args(args, Candidate(2, "none", 4, True), "--gradient_checkpointing") == [
        "--model", "gpt2", "--per_device_train_batch_size", "4", "--deepspeed", "{ds_config}",
        "--gradient_checkpointing"]
    assert script_args(["--per_device_train_batch_size=8"], Candidate(2, "none", 2), "--gc") == [
        "--per_device_train_batch_size=2"]
    assert script_args(["--steps", "5"], Candidate(2, "none", 2), None) == ["--steps", "5"]  # not an HF script
    auto = candidate_deepspeed({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"},
                               Candidate(2, "none", 4), 2, False)
    assert auto["train_micro_batch_size_per_gpu"] == "auto"  # the Trainer fills it from its argument ...
    args = script_args(["--gradient_accumulation_steps", "3"], Candidate(2, "none", 4), None, micro_auto=True)
    assert args == ["--gradient_accumulation_steps", "3", "--per_device_train_batch_size", "4"]  # ... given here
    assert trained_batch(auto, Candidate(2, "none", 4), args, 2) == 4 * 3 * 2
    assert trained_batch({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
                         Candidate(2, "none", 4), [], 2) == 16


def test_with_a_model_size_the_estimate_skips_what_does_not_fit_and_tries_tight_ones_last(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    free = FreeMemory(gpu_free_bytes=(40 * GIB, 40 * GIB), gpu_total_bytes=(40 * GIB, 40 * GIB),
                      host_available_bytes=200 * GIB, host_total_bytes=256 * GIB)
    monkeypatch.setattr(fitting, "_FREE", [free])
    options = TrialOptions(script="train.py", stages="0,2,3", offload="none,cpu,cpu+params", micro_batch="1",
                           model_size="7B", nproc=2)
    spec = plan_trial(options, load_preset("zero3"))
    tried = [(Candidate.from_dict(c).label, e) for c, e in zip(spec.candidates, spec.estimates, strict=True)]
    verdicts = [e for _, e in tried]
    assert "does not fit" not in verdicts and verdicts == sorted(verdicts, key=lambda v: v == "tight")
    skipped = [(Candidate.from_dict(s["candidate"]).label, s["state"], s["reason"]) for s in spec.skipped]
    assert ("zero0-none-mb1", "skipped") in [(label, state) for label, state, _ in skipped]
    for _label, _state, reason in skipped:
        assert reason.startswith("the estimate does not fit: GPU: about ") and "GiB free" in reason
    assert len(tried) + len(skipped) == 6  # ZeRO-0 and ZeRO-2 pairs refused by DeepSpeed are left out
    without = plan_trial(TrialOptions(script="train.py", stages="0,2,3", offload="none,cpu,cpu+params",
                                      micro_batch="1", nproc=2), load_preset("zero3"))
    assert len(without.candidates) == 6 and without.skipped == [] and set(without.estimates) == {None}


def test_options_that_make_no_trial_are_refused() -> None:
    base = load_preset("cpu-demo")
    with pytest.raises(TrialError, match="no candidate is left to try"):
        plan_trial(TrialOptions(script="t.py", stages="0", offload="cpu"), base)
    with pytest.raises(TrialError, match="--headroom"):
        plan_trial(TrialOptions(script="t.py", headroom=1.5), base)
    with pytest.raises(TrialError, match="does not use DeepSpeed"):
        planning.base_preset(load_preset("ddp"), None)


def test_a_candidate_below_stage_3_drops_zero3_settings_so_its_preset_checks_clean() -> None:
    from traindeck.backend.presets import validate_preset
    from traindeck.backend.trials.candidates import candidate_preset

    base = load_preset("zero3")
    two = candidate_preset(base, Candidate(2, "none", 4), 2, False, "two")
    assert validate_preset(two) == []
    assert not any(k.startswith("stage3_") for k in (two.deepspeed or {})["zero_optimization"])
    assert (two.accelerate or {})["deepspeed_config"]["zero3_init_flag"] is False
    three = candidate_preset(base, Candidate(3, "cpu", 4), 2, False, "three")
    assert (three.deepspeed or {})["zero_optimization"]["stage3_max_live_parameters"] == 1000000000
    assert (three.accelerate or {})["deepspeed_config"]["zero3_init_flag"] is True
    assert (base.accelerate or {})["deepspeed_config"]["zero3_init_flag"] is True  # the base is not changed

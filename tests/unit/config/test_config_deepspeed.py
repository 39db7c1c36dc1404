"""The DeepSpeed JSON: schema (every key described), value checks and the cross-field rules, on real files.

Table-driven over tests/fixtures/configs/deepspeed/: each file -> the exact set of (severity, path, words in the
message) `check_files` reports for it, for a given world size and HF-Trainer setting. Good files must give nothing.
"""

from __future__ import annotations

import inspect
import json

import pytest
from support import TESTS

from traindeck.backend.config import deepspeed_rules, deepspeed_schema
from traindeck.backend.config.deepspeed_schema import DeepSpeedConfig, OffloadOptimizer, ZeroOptimization
from traindeck.backend.config.messages import Message
from traindeck.backend.config.schema import Section, fields_of
from traindeck.backend.config.source import load_file
from traindeck.backend.config.validate import _RULES, RuleContext, check_files, check_values

DS = TESTS / "fixtures" / "configs" / "deepspeed"
GOOD = sorted((DS / "good").glob("*.json"))
SECTIONS = [c for c in vars(deepspeed_schema).values()
            if inspect.isclass(c) and issubclass(c, Section) and c is not Section]

# file -> (world size, hf_trainer, expected findings as (severity, path, words))
CASES: dict[str, tuple[int | None, bool | None, set[tuple[str, str, str]]]] = {
    # ---- good files: nothing to say when the world size is known
    "good/zero0_fp32.json": (1, False, set()),
    "good/zero1_bf16.json": (4, False, set()),
    "good/zero2_fp16.json": (2, False, set()),
    "good/zero2_offload_cpu.json": (8, False, set()),
    "good/zero3.json": (2, False, set()),
    "good/zero3_offload_cpu.json": (8, False, set()),
    "good/zero3_nvme.json": (1, False, set()),
    # ---- "auto": said once (a note: who fills them); a key only where that consumer cannot fill it
    "good/hf_zero3_auto.json": (8, True, {("note", "", "'auto' values: 16; filled by the HF Trainer at start-up")}),
    "good/hf_zero3_auto.json@plain": (8, False, {
        ("note", "", "'auto' values: 16; nobody fills them: this config is used by a plain DeepSpeed script"),
        ("warning", "fp16.enabled", "DeepSpeed drops it and fp16 is off"),
        ("warning", "bf16.enabled", "DeepSpeed drops it and bf16 is off"),
        ("error", "optimizer.params.lr", 'passes the text "auto" to the optimizer as lr'),
        ("error", "optimizer.params.betas", "as betas"),
        ("error", "optimizer.params.eps", "as eps"),
        ("error", "optimizer.params.weight_decay", "as weight_decay"),
        ("error", "scheduler.params.warmup_min_lr", "learning-rate scheduler as warmup_min_lr"),
        ("error", "scheduler.params.warmup_max_lr", "as warmup_max_lr"),
        ("error", "scheduler.params.warmup_num_steps", "as warmup_num_steps"),
        ("error", "gradient_accumulation_steps", "batch-size arithmetic stops at start-up with a TypeError"),
        ("error", "train_batch_size", "batch-size arithmetic stops at start-up with a TypeError"),
        ("error", "train_micro_batch_size_per_gpu", "batch-size arithmetic stops at start-up with a TypeError"),
        ("error", "gradient_clipping", "stops with a TypeError when it compares it with 0"),
    }),
    # Nobody said who runs it: optimizer betas/eps "auto" only the HF Trainer fills, so it is for the Trainer.
    "good/hf_zero3_auto.json@unknown": (8, None, {
        ("note", "", "'auto' values: 16; filled by the HF Trainer at start-up (only the HF Trainer fills "
                     "optimizer.params.betas, optimizer.params.eps); a script of your own on accelerate "
                     "(Accelerator.prepare) would stop on optimizer.params.betas, optimizer.params.eps"),
    }),
    # ---- batch size arithmetic
    "pitfall/batch_mismatch.json": (2, False, {
        ("error", "train_batch_size", "train_batch_size 32 != train_micro_batch_size_per_gpu 4 x "
                                      "gradient_accumulation_steps 2 x 2 processes = 16: DeepSpeed stops at start-up "
                                      "on every rank"),
    }),
    "pitfall/batch_mismatch.json@4": (4, False, set()),
    "pitfall/batch_mismatch.json@unknown": (None, False, {
        ("warning", "train_batch_size", "holds only with 4 processes (GPUs)"),
    }),
    "pitfall/batch_indivisible.json@unknown": (None, False, {
        ("error", "train_batch_size", "train_batch_size 30 is not train_micro_batch_size_per_gpu 4 x "
                                      "gradient_accumulation_steps 2 x any number of processes"),
    }),
    "pitfall/batch_derived_zero.json": (2, False, {
        ("error", "train_batch_size", "DeepSpeed derives gradient_accumulation_steps = 4 // 4 // 2 = 0 and stops"),
    }),
    "pitfall/batch_derived_zero.json@1": (1, False, set()),
    "pitfall/batch_missing.json": (2, False, {
        ("error", "gradient_accumulation_steps", "neither train_batch_size nor train_micro_batch_size_per_gpu"),
    }),
    "pitfall/batch_missing.json@hf": (2, True, {
        ("warning", "gradient_accumulation_steps", '"auto" when the HF Trainer / accelerate fills it in'),
    }),
    # ---- ZeRO and offload
    "pitfall/offload_param_stage2.json": (2, False, {
        ("warning", "zero_optimization.offload_param.device", "offload_param works only at ZeRO stage 3: at stage 2 "
                                                              "DeepSpeed ignores it without a word"),
    }),
    "pitfall/offload_optimizer_stage0.json": (2, False, {
        ("error", "zero_optimization.offload_optimizer.device", "offload_optimizer needs ZeRO stage 1, 2 or 3"),
    }),
    "pitfall/nvme_optimizer_stage2.json": (2, False, {
        ("warning", "zero_optimization.offload_optimizer.device", "at ZeRO stage 2 'nvme' works like 'cpu'"),
    }),
    "pitfall/partial_offload_stage2.json": (2, False, {
        ("error", "zero_optimization.offload_optimizer.ratio", "Partial offloading only supported for ZeRO Stage 3."),
    }),
    "pitfall/nvme_without_path.json": (1, False, {
        ("error", "zero_optimization.offload_param.device", "offload_param to 'nvme' needs nvme_path"),
    }),
    "pitfall/nvme_without_aio.json": (1, False, {
        ("warning", "zero_optimization.offload_param.device",
         "DeepSpeed uses its defaults (block_size 1048576, queue_depth 8, intra_op_parallelism 1, single_submit false, "
         "overlap_events true, use_gds false)"),
    }),
    "pitfall/stage3_keys_at_stage2.json": (2, False, {
        ("warning", "zero_optimization.stage3_max_live_parameters", "used only at ZeRO stage 3: DeepSpeed ignores it at "
                                                                     "stage 2"),
        ("warning", "zero_optimization.sub_group_size", "used only at ZeRO stage 3"),
        # stage3_prefetch_bucket_size 5e7 and stage3_gather_16bit_weights_on_model_save false are DeepSpeed's
        # defaults: nothing is lost, nothing said
    }),
    "pitfall/stage12_keys_at_stage3.json": (2, False, {
        ("warning", "zero_optimization.round_robin_gradients", "used only at ZeRO stages 1 and 2: DeepSpeed ignores it "
                                                               "at stage 3"),
        ("warning", "zero_optimization.allgather_bucket_size", "used only at ZeRO stages 1 and 2"),
    }),
    "pitfall/zero_keys_at_stage0.json": (2, False, {
        ("warning", "zero_optimization.reduce_bucket_size", "ZeRO is off (stage 0)"),
    }),
    "pitfall/zero_start_up_refusals.json": (2, False, {
        ("error", "gradient_predivide_factor", "does not work at ZeRO stage 3 with reduce_scatter"),
        ("error", "prescale_gradients", "pre-scale gradients is not yet supported with ZeRO-3"),
        ("error", "gradient_allreduce_op", "'sum' does not work with ZeRO stage 3"),
    }),
    "pitfall/zero_quantized_no_reduce_scatter.json": (2, False, {
        ("error", "zero_optimization.zero_quantized_gradients", "needs reduce_scatter"),
    }),
    "pitfall/compute_grad_norm_off.json": (2, False, {
        ("error", "zero_optimization.compute_grad_norm", 'needs "gradient_clipping": 0'),
        ("error", "zero_optimization.compute_grad_norm", "does not work with offload_optimizer"),
        ("warning", "zero_optimization.contiguous_gradients", "DeepSpeed turns it back on"),
        ("error", "zero_optimization.legacy_stage1", "The deprecated version of ZeRO Stage 1 is not supported"),
    }),
    # ---- precision
    "pitfall/fp16_and_bf16.json": (2, False, {
        ("error", "bf16.enabled", "bfloat16 and fp16 modes cannot be simultaneously enabled"),
    }),
    "pitfall/static_loss_scale.json": (2, False, {
        ("warning", "fp16.loss_scale", "loss_scale 128 is a fixed (static) loss scale"),
    }),
    "pitfall/precision_needs_zero.json": (2, False, {
        ("error", "bf16.bf16_optimizer_states", "needs ZeRO stage 1, 2 or 3"),
        ("error", "bf16.bf16_optimizer_states", 'needs "bf16_master_weights_and_grads": true'),
        ("error", "data_types.param_dtype", "param_dtype 'fp16' disagrees with the precision in effect (bf16)"),
        ("error", "data_types.grad_accum_dtype", "cannot accumulate bf16 gradients in fp32"),
    }),
    # ---- optimizer, scheduler, clipping
    "pitfall/optimizer_names.json": (2, False, {
        ("error", "optimizer.type", "torch.optim class spelled exactly; did you mean 'SGD'?"),
        ("error", "optimizer.params.max_grad_norm", "use the top-level \"gradient_clipping\""),
        ("error", "scheduler.type", "did you mean 'WarmupLR'?"),
    }),
    "pitfall/untested_optimizer.json": (2, False, {
        ("error", "optimizer.type", "\"zero_allow_untested_optimizer\": true"),
    }),
    "pitfall/script_optimizer_with_offload.json": (2, False, {
        ("warning", "zero_optimization.offload_optimizer.device", "unless it is deepspeed.ops.adam.DeepSpeedCPUAdam"),
    }),
    "pitfall/script_optimizer_with_offload.json@hf": (2, True, set()),
    "pitfall/script_optimizer_with_offload.json@unknown": (2, None, {
        ("warning", "zero_optimization.offload_optimizer.device", "in a plain DeepSpeed script (accelerate and the HF "
                                                                  "Trainer convert the optimizer for you)"),
    }),
    "pitfall/gradient_clipping_negative.json": (2, False, {
        ("warning", "gradient_clipping", "silently turns clipping off"),
    }),
    "pitfall/any_case_typo.json": (2, False, {
        ("error", "communication_data_type", "'fp61' is not allowed: expected one of 'fp32', 'fp16', 'bf16' (any "
                                             "case); DeepSpeed stops at start-up; did you mean 'fp16'?"),
        ("error", "checkpoint.tag_validation", "'Warning' is not allowed"),
        # "Mean" is fine: DeepSpeed lower-cases gradient_allreduce_op
    }),
    # ---- typos in values and keys
    "pitfall/typos_in_values.json": (2, False, {
        ("error", "bf16.enabled", "expected true or false, got 'true'"),
        ("error", "zero_optimization.stage", "4 is not allowed: expected one of 0, 1, 2, 3 (nearest valid: 3)"),
        ("error", "zero_optimization.offload_optimizer.device", "'cpuu' is not allowed: expected one of 'none', 'cpu', "
                                                                "'nvme'; did you mean 'cpu'?"),
        ("error", "zero_optimization.reduce_bucket_size", "-1 is out of range"),
    }),
    "pitfall/typos_in_keys.json": (2, False, {
        ("warning", "gradient_acumulation_steps", "unknown key 'gradient_acumulation_steps' (DeepSpeed ignores it); did "
                                                  "you mean 'gradient_accumulation_steps'?"),
        ("error", "bf16.check_overflow", "DeepSpeed refuses unknown keys in bf16); did you mean 'check_grad_overflow'?"),
        ("error", "zero_optimization.offload_optimzer", "unknown key 'offload_optimzer' (DeepSpeed refuses unknown keys "
                                                        "in zero_optimization); did you mean 'offload_optimizer'?"),
        ("error", "zero_optimization.overlap_com", "did you mean 'overlap_comm'?"),
        ("warning", "activation_checkpointing.partitioned_activations", "did you mean 'partition_activations'?"),
    }),
    # ---- deprecated and removed keys
    "pitfall/deprecated.json": (2, False, {
        ("warning", "bfloat16", "'bfloat16' is deprecated: use 'bf16' (same meaning)"),
        ("warning", "zero_optimization.cpu_offload", 'replaced by "offload_optimizer": {"device": "cpu"}'),
        ("warning", "zero_optimization.cpu_offload_param", 'replaced by "offload_param": {"device": "cpu"}'),
        ("warning", "zero_optimization.cpu_offload_use_pin_memory", "deprecated and has no effect any more"),
        ("warning", "zero_optimization.stage3_gather_fp16_weights_on_model_save",
         "use 'stage3_gather_16bit_weights_on_model_save' (same meaning)"),
        ("warning", "aio.thread_count", "use 'intra_op_parallelism'"),
    }),
    "pitfall/deprecated_clash.json": (2, False, {
        ("warning", "bfloat16", "which is also set: 'bf16' wins"),
        ("error", "zero_optimization.cpu_offload", "DeepSpeed refuses the two together"),
    }),
    "pitfall/removed_keys.json": (2, False, {
        ("error", "amp", "'amp' is no longer supported: NVIDIA Apex AMP was removed from DeepSpeed"),
        ("error", "sparse_gradients", "no longer supported"),
        ("error", "zero_optimization.mics_shard_size", "MiCS ZeRO-3 sharding was removed"),
    }),
    # ---- malformed JSON (exact positions below)
    # DeepSpeed reads a config file with hjson, which takes these two (strict JSON readers do not): warnings for a
    # file nobody but DeepSpeed reads (test_config_hjson.py has the HF Trainer / accelerate side).
    "malformed/trailing_comma.json": (2, False, {("warning", "", "trailing comma")}),
    "malformed/missing_comma.json": (2, False, {("warning", "", "missing comma")}),
    "malformed/python_true.json": (2, False, {("error", "", "'True' is Python; JSON writes true")}),
    "malformed/duplicate_key.json": (2, False, {("error", "zero_optimization", "appears twice; DeepSpeed refuses "
                                                                               "duplicate keys")}),
}


def check(name: str) -> list[Message]:
    world_size, hf_trainer, _ = CASES[name]
    return check_files([DS / name.split("@")[0]], world_size=world_size, hf_trainer=hf_trainer)


def match(messages: list[Message], expected: set[tuple[str, str, str]]) -> None:
    """Each expected finding matches its own message, and no message is left over."""
    left = [(m.severity, m.path, m.message) for m in messages]
    for severity, path, words in sorted(expected):
        hit = next((m for m in left if m[0] == severity and m[1] == path and words in m[2]), None)
        assert hit is not None, f"missing {severity} at {path!r} with {words!r}; got {left}"
        left.remove(hit)
    assert not left, f"unexpected: {left}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_findings(name: str) -> None:
    match(check(name), CASES[name][2])


def test_every_fixture_file_has_a_case() -> None:
    files = {p.relative_to(DS).as_posix() for p in DS.rglob("*.json")}
    assert files == {name.split("@")[0] for name in CASES}


@pytest.mark.parametrize(
    ("name", "line", "column"),
    [
        ("malformed/trailing_comma.json", 4, 15),
        ("malformed/missing_comma.json", 3, 3),
        ("malformed/python_true.json", 3, 23),
        ("malformed/duplicate_key.json", 4, 3),
        ("pitfall/typos_in_keys.json", 7, 5),  # zero_optimization.offload_optimzer
        ("pitfall/typos_in_values.json", 6, 27),  # the "cpuu" offload device
        ("pitfall/batch_mismatch.json", 2, 3),
    ],
)
def test_messages_point_at_the_exact_line_and_column(name: str, line: int, column: int) -> None:
    messages = check(name)
    assert (line, column) in {(m.line, m.column) for m in messages}
    assert all(m.file == str(DS / name) for m in messages)


def test_malformed_files_give_one_message_and_no_traceback() -> None:
    doc = load_file(DS / "malformed/python_true.json")  # hjson refuses it too (its quoteless string eats the '}')
    assert doc.data is None and len(doc.syntax) == 1
    for name in ("malformed/trailing_comma.json", "malformed/missing_comma.json"):
        doc = load_file(DS / name)  # strict JSON by default (the repair, the dashboard's paste)
        assert doc.data is None and len(doc.syntax) == 1
        doc = load_file(DS / name, as_deepspeed_reads=True)  # config check: read as DeepSpeed reads it
        assert doc.data is not None and not doc.syntax and len(doc.lenient) == 1


# ------------------------------------------------------------------------------------------ rules one by one

# Each registered rule -> the fixtures it must fire on. It must fire on none of the good files.
RULE_FIXTURES: dict[str, list[str]] = {
    "offload_param_below_stage3": ["pitfall/offload_param_stage2.json"],
    "offload_optimizer_needs_zero": ["pitfall/offload_optimizer_stage0.json", "pitfall/nvme_optimizer_stage2.json"],
    "partial_offload_needs_stage3": ["pitfall/partial_offload_stage2.json"],
    "nvme_offload_settings": ["pitfall/nvme_without_path.json", "pitfall/nvme_without_aio.json"],
    "stage_specific_keys": ["pitfall/stage3_keys_at_stage2.json", "pitfall/stage12_keys_at_stage3.json",
                            "pitfall/zero_keys_at_stage0.json"],
    "zero_start_up_refusals": ["pitfall/zero_start_up_refusals.json", "pitfall/zero_quantized_no_reduce_scatter.json",
                               "pitfall/compute_grad_norm_off.json"],
    "precision": ["pitfall/fp16_and_bf16.json", "pitfall/static_loss_scale.json", "pitfall/precision_needs_zero.json"],
    "optimizer_rules": ["pitfall/optimizer_names.json", "pitfall/untested_optimizer.json",
                        "pitfall/script_optimizer_with_offload.json"],
    "scheduler_type": ["pitfall/optimizer_names.json"],
    "gradient_clipping": ["pitfall/gradient_clipping_negative.json"],
    "choices_ignoring_case": ["pitfall/any_case_typo.json"],
    "batch_size": ["pitfall/batch_mismatch.json", "pitfall/batch_derived_zero.json", "pitfall/batch_missing.json"],
    "auto_values": ["good/hf_zero3_auto.json@plain"],
}


def _run(fn, name: str) -> list:
    world_size, hf_trainer, _ = CASES[name]
    data = json.loads((DS / name.split("@")[0]).read_text())
    return list(fn(RuleContext(kind="deepspeed", data=data, deepspeed=data, world_size=world_size,
                               hf_trainer=hf_trainer)))


def test_every_rule_has_fixtures() -> None:
    load_file(DS / "good" / "zero3.json")  # rules register on first use
    check_files([DS / "good" / "zero3.json"])
    assert {fn.__name__ for fn in _RULES["deepspeed"]} == set(RULE_FIXTURES)


@pytest.mark.parametrize("rule_name", sorted(RULE_FIXTURES))
def test_rule_fires_on_its_pitfalls_and_not_on_good_files(rule_name: str) -> None:
    fn = getattr(deepspeed_rules, rule_name)
    for name in RULE_FIXTURES[rule_name]:
        assert _run(fn, name), f"{rule_name} says nothing about {name}"
    for good in GOOD:
        name = good.relative_to(DS).as_posix()
        problems = [f for f in _run(fn, name) if f[0] != "note"]  # a note informs (who fills "auto")
        assert problems == [], f"{rule_name} fires on the good file {name}"


def test_rule_paths_exist_in_the_schema() -> None:
    """Every path a rule reports names a key the schema describes (so forms can point at it)."""
    for rule_name, names in RULE_FIXTURES.items():
        for name in names:
            for _, path, _ in _run(getattr(deepspeed_rules, rule_name), name):
                section: type[Section] | None = DeepSpeedConfig
                for key in path:
                    if section is None:  # inside a free-form mapping (optimizer params)
                        break
                    specs = fields_of(section)
                    assert key in specs or key in section.DEPRECATED, (rule_name, path)
                    section = specs[key].section if key in specs else None


# ------------------------------------------------------------------------------------------ the schema itself


def test_every_field_of_every_section_has_a_one_line_description() -> None:
    assert len(SECTIONS) >= 20
    for section in SECTIONS:
        for key, spec in fields_of(section).items():
            assert spec.help and "\n" not in spec.help and len(spec.help) < 200, (section.__name__, key)
            assert not spec.help.endswith(".") or spec.help.endswith("..."), (section.__name__, key)


def test_unknown_key_policy_per_section() -> None:
    refused = {"ZeroOptimization", "OffloadParam", "OffloadOptimizer", "LeafModule", "FP16", "BF16", "TensorBoard",
               "Wandb", "CsvMonitor", "Comet", "CommsLogger", "TimersThroughput", "HybridEngine"}
    assert {s.__name__ for s in deepspeed_schema.PYDANTIC_SECTIONS} == refused
    for section in SECTIONS:
        assert section.UNKNOWN == ("error" if section.__name__ in refused else "warning"), section.__name__
        assert section.UNKNOWN_WHY.startswith("DeepSpeed refuses" if section.UNKNOWN == "error" else "DeepSpeed ignores")


def test_stage_metadata() -> None:
    zero = fields_of(ZeroOptimization)
    assert zero["offload_param"].stages == (3,)
    assert zero["offload_optimizer"].stages == (1, 2, 3)
    assert all(spec.stages == (3,) for key, spec in zero.items() if key.startswith("stage3_"))
    assert zero["round_robin_gradients"].stages == (1, 2)
    assert fields_of(OffloadOptimizer)["ratio"].stages == (3,)
    assert zero["reduce_bucket_size"].auto and zero["stage3_prefetch_bucket_size"].auto
    assert not zero["allgather_bucket_size"].auto


def test_auto_is_accepted_only_where_a_launcher_fills_it() -> None:
    assert check_values({"gradient_clipping": "auto", "train_batch_size": "auto"}, DeepSpeedConfig) == []
    (finding,) = check_values({"zero_optimization": {"allgather_bucket_size": "auto"}}, DeepSpeedConfig)
    assert finding[0] == "error" and '"auto" is not accepted here' in finding[2]


def test_unknown_keys_are_kept_by_loading() -> None:
    doc = load_file(DS / "pitfall" / "typos_in_keys.json")
    assert doc.data["zero_optimization"]["offload_optimzer"] == {"device": "cpu"}
    assert doc.data["gradient_acumulation_steps"] == 4


def test_deprecated_old_key_with_its_own_form_is_checked_against_it() -> None:
    """cpu_offload is a flag replaced by a section: its value is checked as a flag (framework extension)."""
    findings = check_values({"zero_optimization": {"cpu_offload": "yes"}}, DeepSpeedConfig)
    assert ("error", ("zero_optimization", "cpu_offload"), "expected true or false, got 'yes'") in findings
    assert check_values({"zero_optimization": {"cpu_offload": True}}, DeepSpeedConfig) == [
        ("warning", ("zero_optimization", "cpu_offload"),
         "'cpu_offload' is deprecated: replaced by \"offload_optimizer\": {\"device\": \"cpu\"} (true offloaded the "
         "optimizer state and step to the CPU)")]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("Adam", "deepspeed"), ("ADAMW", "deepspeed"), ("lamb", "deepspeed"), ("Muon", "deepspeed"),
     ("SGD", "torch"), ("RMSprop", "torch"), ("sgd", None), ("rmsprop", None),
     ("OneBitAdam", None)],  # the 1-bit optimizers are gone from DeepSpeed 0.19
)
def test_optimizer_names_as_deepspeed_matches_them(name: str, kind: str | None) -> None:
    assert deepspeed_rules.optimizer_kind(name) == kind


def test_comment_keys_are_notes_where_deepspeed_ignores_them_and_never_get_a_spelling_guess() -> None:
    found = check_values({"_comment": "ZeRO-2 for 8 GPUs", "//": "x", "comment_zero": "y", "train_batch_size": 8,
                          "zero_optimization": {"stage": 2, "_comment": "z"}}, DeepSpeedConfig)
    by_path = {".".join(map(str, path)): (severity, text) for severity, path, text in found}
    assert by_path["_comment"][0] == "note" and "comment" in by_path["_comment"][1]
    assert by_path["//"][0] == "note" and by_path["comment_zero"][0] == "note"
    # zero_optimization is a pydantic model with extra="forbid": DeepSpeed stops, so it stays an error
    assert by_path["zero_optimization._comment"][0] == "error"
    assert not any("did you mean" in text for _, text in by_path.values())
    # a real misspelling still gets its guess
    (typo,) = check_values({"train_batch_sise": 8}, DeepSpeedConfig)
    assert "did you mean 'train_batch_size'" in typo[2]

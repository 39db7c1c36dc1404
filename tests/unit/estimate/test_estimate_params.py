"""Counting parameters from a model config (meta device, child process) against the real model's numel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import FIXTURES

from traindeck.backend.estimate import ModelConfigError, count_model_config, count_model_configs

pytestmark = pytest.mark.train
MODELS = FIXTURES / "models"
NAMES = ["gpt2-small", "llama-tiny-tied", "llama-tiny-untied", "llama-2-7b-like"]


@pytest.fixture(scope="module")
def counted():
    pytest.importorskip("transformers")
    results = count_model_configs([MODELS / name for name in NAMES])  # one child process for all four
    assert all(not isinstance(r, Exception) for r in results), results
    return dict(zip(NAMES, results, strict=True))


@pytest.fixture(scope="module")
def real_models():
    """The small fixtures built for real on the CPU (weights allocated), so data_ptr() is meaningful."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    models = {}
    for name in NAMES[:3]:
        data = json.loads((MODELS / name / "config.json").read_text())
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
        with torch.device("cpu"):
            models[name] = transformers.AutoModelForCausalLM.from_config(config)
    return models


@pytest.mark.parametrize("name", NAMES[:3])
def test_counts_equal_the_real_models(counted, real_models, name):
    from deepspeed.runtime.zero.stage3 import model_to_params

    model = real_models[name]
    # On real tensors DeepSpeed's own counter (dedupe by data_ptr, largest module's direct params) is the reference.
    total, largest = model_to_params(model)
    assert counted[name].total_params == total == sum(p.numel() for p in model.parameters())
    assert counted[name].largest_layer_params == largest


def test_gpt2_small_by_hand(counted):
    # wte 50257 x 768 + wpe 1024 x 768 + 12 x (ln 2x768 + attn 768x2304 + 2304 + 768x768 + 768 + ln 2x768
    #   + mlp 768x3072 + 3072 + 3072x768 + 768) + ln_f 2 x 768; lm_head tied to wte.
    per_block = 2 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768 + 2 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768
    expected = 50257 * 768 + 1024 * 768 + 12 * per_block + 2 * 768
    shape = counted["gpt2-small"]
    assert shape.total_params == expected == 124_439_808
    assert shape.largest_layer_params == 50257 * 768  # the embedding
    assert shape.tied_embeddings is True
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.vocab_size) == (768, 12, 12, 50257)
    assert shape.max_positions == 1024 and shape.model_class == "GPT2LMHeadModel"


def test_tied_and_untied_differ_by_one_embedding(counted):
    tied, untied = counted["llama-tiny-tied"], counted["llama-tiny-untied"]
    assert tied.tied_embeddings is True and untied.tied_embeddings is False
    assert untied.total_params - tied.total_params == 32000 * 512
    # 4 layers x (q 512x512 + k,v 2 x 512x256 (4 kv heads of 64) + o 512x512 + mlp 3 x 512x1376 + 2 norms x 512)
    # + final norm 512 + embeddings.
    layer = 512 * 512 + 2 * 512 * 256 + 512 * 512 + 3 * 512 * 1376 + 2 * 512
    assert tied.total_params == 4 * layer + 512 + 32000 * 512


def test_llama_7b_like_by_hand(counted):
    shape = counted["llama-2-7b-like"]
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert shape.total_params == 2 * 32000 * 4096 + 32 * layer + 4096 == 6_738_415_616
    assert shape.largest_layer_params == 32000 * 4096
    assert shape.tied_embeddings is False


def test_why_not_accelerate_or_deepspeed_counters():
    """The two shortcuts the worker avoids, shown on GPT-2 small (tied embeddings) on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    config = transformers.GPT2Config()
    with accelerate.init_empty_weights():
        empty = transformers.GPT2LMHeadModel(config)
    with torch.device("meta"):
        meta = transformers.GPT2LMHeadModel(config)
    by_identity = sum({id(p): p.numel() for p in meta.parameters()}.values())
    by_data_ptr = sum(dict((p.data_ptr(), p.numel()) for p in meta.parameters()).values())
    assert by_identity == 124_439_808
    if sum(p.numel() for p in empty.parameters()) != by_identity:  # fixed in some accelerate versions
        assert sum(p.numel() for p in empty.parameters()) == 124_439_808 + 50257 * 768
    assert by_data_ptr < 1_000_000  # every meta tensor has data_ptr 0: all but one collapse


def test_model_id_from_the_local_cache_offline(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--traindeck-test--llama-tiny" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((MODELS / "llama-tiny-untied" / "config.json").read_text())
    refs = snapshot.parent.parent / "refs"
    refs.mkdir()
    (refs / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    results = count_model_configs(["traindeck-test/llama-tiny", "traindeck-test/not-downloaded"])
    assert not isinstance(results[0], Exception) and results[0].total_params == 44_372_480
    assert results[0].source == "traindeck-test/llama-tiny"
    assert isinstance(results[1], ModelConfigError)
    assert "local Hugging Face cache" in str(results[1]) and "never downloads" in str(results[1])


def test_bad_configs_give_one_line(tmp_path: Path):
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "no-type.json").write_text('{"hidden_size": 8}')
    (tmp_path / "odd-type.json").write_text('{"model_type": "no-such-model"}')
    for target, fragment in [
        (tmp_path / "missing.json", "not found"),
        (tmp_path / "broken.json", "not a readable JSON"),
    ]:
        with pytest.raises(ModelConfigError, match=fragment):
            count_model_config(target)
    results = count_model_configs([tmp_path / "no-type.json", tmp_path / "odd-type.json"])
    assert "no model_type" in str(results[0])
    assert "no-such-model" in str(results[1])
    assert all("\n" not in str(r) for r in results)

"""Which names and values are secrets, and what command.json / the run record get: tables of real-world names."""

from __future__ import annotations

import pytest

from traindeck.backend.core.masking import is_secret_name, looks_like_secret_value, mask_argv, masked_env

HF = "hf_" + "a1B2" * 9
OPENAI = "sk-proj-" + "Zx9" * 10
GITHUB = "ghp_" + "Q7" * 18
AWS = "AKIA" + "ABCDEFGH12345678"
SHA = "0123456789abcdef0123456789abcdef01234567"  # 40 hex: a wandb key's shape, and a git commit id's


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("GITHUB_TOKEN", True), ("WANDB_API_KEY", True),
    ("KAGGLE_KEY", True), ("AZURE_STORAGE_KEY", True), ("DB_PASSWORD", True), ("MY_PASSWD", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("CLIENT_SECRET_FILE", True), ("GITHUB_AUTH", True), ("SSH_PRIVATE", True),
    ("GOOGLE_APPLICATION_CREDENTIALS", True), ("openai_api_key", True),
    ("TOKENIZERS_PARALLELISM", False), ("PATH", False), ("MASTER_PORT", False), ("WANDB_PROJECT", False),
    ("CUDA_VISIBLE_DEVICES", False), ("AUTHOR", False), ("PWD", False), ("KEYBOARD", False),
])
def test_environment_variable_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize("option, secret", [
    ("hub_token", True), ("token", True), ("use_auth_token", True), ("api_key", True), ("api-key", True),
    ("wandb_key", True), ("hf_token", True), ("password", True), ("client_secret", True), ("apiKey", True),
    ("tokenizer_name", False), ("tokenizer", False), ("max_tokens", False), ("pad_token", False),
    ("eos_token", False), ("max_new_tokens", False), ("text_key", False), ("label_key", False),
    ("push_to_hub_token_file", False), ("calculate_per_token_loss", False), ("tokenizer_name_or_path", False),
])
def test_option_names(option: str, secret: bool) -> None:
    assert is_secret_name(option, option=True) is secret


@pytest.mark.parametrize("value, secret", [
    (HF, True), (OPENAI, True), (GITHUB, True), (AWS, True), ("see " + HF + " here", True),
    (SHA, False), ("meta-llama/Llama-3.2-1B", False), ("hf_short", False), ("sk-1", False),
])
def test_value_shapes(value: str, secret: bool) -> None:
    assert looks_like_secret_value(value) is secret


@pytest.mark.parametrize("argv, shown", [
    (["--tokenizer_name", "gpt2", "--tokenizer", "t5-small", "--max_tokens", "512", "--pad_token", "<pad>"],
     ["--tokenizer_name", "gpt2", "--tokenizer", "t5-small", "--max_tokens", "512", "--pad_token", "<pad>"]),
    (["--hub_token", "abc", "--api_key=xyz", "--lr", "1e-4"], ["--hub_token", "***", "--api_key=***", "--lr", "1e-4"]),
    (["--use_auth_token", "--lr", "2e-5"], ["--use_auth_token", "--lr", "2e-5"]),  # a flag: the next option stays
    (["--wandb_key", SHA, "--revision", SHA], ["--wandb_key", "***", "--revision", SHA]),
    (["--model", HF], ["--model", "***"]),  # a token where no name says so: its shape does
    (["trainer.hub_token=abc", "data.text_key=body"], ["trainer.hub_token=***", "data.text_key=body"]),
    (["--report_to", "http://bob:pw@mlflow:5000"], ["--report_to", "http://bob:***@mlflow:5000"]),
])
def test_argv_masking(argv: list[str], shown: list[str]) -> None:
    assert mask_argv(argv) == shown


def test_known_secret_values_are_masked_anywhere() -> None:
    assert mask_argv(["--note=uses my-s3cret-v inside"], ["my-s3cret-v"]) == ["--note=uses *** inside"]


def test_env_masking_keeps_ordinary_values_and_masks_token_shapes() -> None:
    env = {"HF_TOKEN": "x", "TOKENIZERS_PARALLELISM": "false", "MODEL_ID": HF, "GIT_COMMIT": SHA,
           "HTTPS_PROXY": "http://alice:s3cret@proxy:3128"}
    assert masked_env(env) == {"HF_TOKEN": "***", "TOKENIZERS_PARALLELISM": "false", "MODEL_ID": "***",
                               "GIT_COMMIT": SHA, "HTTPS_PROXY": "http://alice:***@proxy:3128"}


def test_a_secret_that_begins_another_never_leaves_the_longer_ones_tail() -> None:
    """Known values are replaced longest first: masking "abcdef12" first would leave "3456zz" of "abcdef123456zz"."""
    shown = mask_argv(["--x", "abcdef123456zz", "--y", "abcdef12"], ["abcdef12", "abcdef123456zz"])
    assert shown == ["--x", "***", "--y", "***"]
    assert not any("3456" in arg for arg in shown)

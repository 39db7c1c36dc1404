"""Free text as traindeck writes it down (a diagnosis, an event, a log line, a bundle's copy of a log): secrets masked,
ordinary training text left exactly as it is."""

from __future__ import annotations

import hashlib
import io
import json
import time

import pytest

from traindeck.backend.core.masking import TextMasker, mask_json, mask_text, secret_values

HF = "hf_" + "Zq7Lm2" * 6
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ0cmFpbmVyIiwiaWF0IjoxNzE2MjM5MDIyfQ"
       ".4Adcj3UFYzPUVaVF43FmMab6RlaQD8A9V8wFzzht-KQ")
SHA1 = "9fceb02d0ae598e95dc970b74767f19372d61af8"  # a git commit id
SHA256 = hashlib.sha256(b"model.safetensors").hexdigest()
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


@pytest.mark.parametrize("text, shown", [
    (f"ValueError: could not log in to the Hub with {HF}", "ValueError: could not log in to the Hub with ***"),
    (f"Authorization: Bearer {JWT}", "Authorization: Bearer ***"),
    (f"headers={{'Authorization': 'Bearer {JWT}'}}", "headers={'Authorization': 'Bearer ***'}"),
    ("authorization: token 7fa3c9e1d2b4", "authorization: token ***"),
    ("Proxy-Authorization: Basic dXNlcjpwYXNzd29yZA==", "Proxy-Authorization: Basic ***"),
    ("curl -H 'Bearer 8d2f0c1a9e7b6d5c'", "curl -H 'Bearer ***'"),
    (f"token {JWT} refused", "token *** refused"),
    ("hub_token=abc123xyz lr=3e-4", "hub_token=*** lr=3e-4"),
    ("{'api_key': 'wb-77c1d0', 'project': 'llm'}", "{'api_key': '***', 'project': 'llm'}"),
    ('{"WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567"}', '{"WANDB_API_KEY": "***"}'),
    ("python train.py --hub_token s3cretv4l --lr 2e-5", "python train.py --hub_token *** --lr 2e-5"),
    ("trainer.hub_token=s3cr3t data.text_key=body", "trainer.hub_token=*** data.text_key=body"),
    ("apiKey: qwerty99 x-api-key: zz9911", "apiKey: *** x-api-key: ***"),
    ("DB_PASSWORD=hunter22 PGPASSWORD=pw12345", "DB_PASSWORD=*** PGPASSWORD=***"),
    ("client_secret=\"e9a1\"", "client_secret=\"***\""),
    ("tracking at https://bob:pw9876@mlflow.internal:5000/", "tracking at https://bob:***@mlflow.internal:5000/"),
    ("aws AKIAABCDEFGH12345678 slack xoxb-1234567890-abc", "aws *** slack ***"),
])
def test_secrets_in_text_are_masked(text: str, shown: str) -> None:
    assert mask_text(text) == shown


@pytest.mark.parametrize("text", [
    f"HEAD is now at {SHA1} fix the loader",
    f"commit {SHA1}",
    f"sha256 of model.safetensors: {SHA256}",
    "max_tokens=512 max_new_tokens=128 pad_token=<pad> eos_token=</s> num_tokens: 4096",
    "{'loss': 0.123, 'grad_norm': 1.7, 'learning_rate': 1.9e-05, 'epoch': 0.42}",
    "step=1200 loss=0.123 tokens_per_sec=10234.5 tokenizer=gpt2 tokenizer_name=meta-llama/Llama-3.2-1B",
    f"data:image/png;base64,{PNG}",
    "the bearer of this certificate; authorization pending",
    "token: 12  key: train  sort key=loss  token=None  api_key=null",
    "Saving model checkpoint to /data/ckpt/checkpoint-500 (path=/data/ckpt, patience=3)",
    "[rank0]: KeyError: 'input_ids'  monkey=business  keyboard=us",
    "12:30:45 INFO http://localhost:6006/ tensorboard",
    "eyJhbGciOi is the start of a header, not a token",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert mask_text(text) == text


def test_known_secret_values_are_masked_wherever_they_appear() -> None:
    env = {"HF_TOKEN": "plain-looking-value-42", "MY_DB_PASSWORD": "correct horse", "PATH": "/usr/bin",
           "SHORT_TOKEN": "abc"}
    values = secret_values(env)
    assert values == ["plain-looking-value-42", "correct horse"]  # longest first; too short to mask safely: left
    text = "login failed for plain-looking-value-42 (correct horse) on /usr/bin abc"
    assert mask_text(text, values) == "login failed for *** (***) on /usr/bin abc"


def test_json_is_masked_in_its_strings_and_keeps_its_keys_and_numbers() -> None:
    data = {"summary": f"failed: bad token {HF}", "rank": 0, "evidence": [f"Authorization: Bearer {JWT}", SHA1],
            "hub_token": 3}
    assert mask_json(data) == {"summary": "failed: bad token ***", "rank": 0,
                               "evidence": ["Authorization: Bearer ***", SHA1], "hub_token": 3}
    assert json.dumps(mask_json({"a": [1.5, None, True]})) == '{"a": [1.5, null, true]}'


def test_a_stream_masks_secrets_cut_by_its_reads_and_keeps_every_other_byte() -> None:
    """Reads of 7 bytes cut every secret in pieces; lines are masked whole all the same, and bytes that are not
    UTF-8, carriage returns (progress bars) and the last line without a line break come through unchanged."""
    lines = [b"step 1 loss 0.5\n", f"Authorization: Bearer {JWT}\n".encode(), b"\xff\xfe raw bytes\r",
             f"ValueError: {HF}\r\n".encode(), f"commit {SHA1}\n".encode(), b"last line hub_token=q1w2e3r4"]
    masker = TextMasker(["plain-looking-value-42"], chunk=7, max_line=400)
    out = b"".join(masker.stream(io.BytesIO(b"".join(lines) + b"\nvalue plain-looking-value-42 end")))
    assert out == (b"step 1 loss 0.5\nAuthorization: Bearer ***\n\xff\xfe raw bytes\rValueError: ***\r\n"
                   + f"commit {SHA1}\n".encode() + b"last line hub_token=***\nvalue *** end")


def test_a_line_without_a_break_is_cut_at_a_blank_so_a_token_in_it_stays_whole() -> None:
    text = (b"x" * 50 + b" ") * 40 + HF.encode() + b" " + (b"y" * 50 + b" ") * 40
    out = b"".join(TextMasker(chunk=100, max_line=120).stream(io.BytesIO(text)))
    assert HF.encode() not in out and out == text.replace(HF.encode(), b"***")


def test_masking_a_large_log_is_bounded_in_time() -> None:
    """8 MB of Trainer and DeepSpeed lines, a third of them with a clue (max_tokens=...), masked in well under the
    time a quadratic scan would take; the secret in the middle is found."""
    line = (b"{'loss': 0.4123, 'grad_norm': 1.25, 'learning_rate': 1.9e-05, 'epoch': 0.42}\n"
            b"[rank0]: step=1200 loss=0.4123 max_tokens=512 tokens_per_sec=10234 commit " + SHA1.encode() + b"\n"
            b" 42%|####2     | 420/1000 [01:23<02:34,  3.21it/s]\r")
    body = line * (4 << 20 // len(line))
    data = body + f"HTTPError: 401 for Bearer {JWT}\n".encode() + body
    started = time.perf_counter()
    out = b"".join(TextMasker().stream(io.BytesIO(data)))
    elapsed = time.perf_counter() - started
    assert out == body + b"HTTPError: 401 for Bearer ***\n" + body
    assert elapsed < 10.0, f"{len(data) / 2**20:.0f} MiB masked in {elapsed:.1f} s"

"""Presets are meant to be shared: keys and values that look like tokens, keys or passwords are found here and a
preset holding one is refused before it reaches disk.
"""

from __future__ import annotations

import re
from typing import Any

from traindeck.backend.preset_model import Preset, PresetError, preset_to_mapping

# ------------------------------------------------------------------------------------------ secrets


_SECRET_WORDS = {"token", "secret", "secrets", "password", "passwd", "pwd", "passphrase", "apikey", "credential",
                 "credentials", "privatekey", "accesskey", "secretkey", "authtoken", "bearer", "cookie"}
_SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "token"),
                 ("client", "secret"), ("session", "key"), ("signing", "key"), ("encryption", "key"),
                 ("auth", "key"), ("license", "key"), ("wandb", "key"), ("hf", "key"), ("openai", "key")}
# Values that are credentials whatever key holds them: Hugging Face, OpenAI-style, GitHub, AWS, Slack tokens.
_SECRET_VALUE = re.compile(r"(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|"
                           r"AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,})")


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def looks_like_secret_key(key: str) -> bool:
    """hub_token, wandb_api_key, HF_TOKEN, password, aws_secret_access_key, apiKey ... but not tokenizer_name,
    max_tokens, calculate_per_token_loss, private_key_path or experiment_key."""
    words = _words(key)
    if not words:
        return False
    # The key names a secret when it ends in one (calculate_per_token_loss and private_key_path do not).
    if words[-1] in _SECRET_WORDS or tuple(words[-2:]) in _SECRET_PAIRS:
        return True
    return words == ["key"]


def find_secrets(data: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """(dotted path, why) for every value that is a secret or sits under a key that names one."""
    from traindeck.backend.config.messages import format_path

    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = path + (str(key),)
            if looks_like_secret_key(str(key)) and value not in (None, "", [], {}) and not isinstance(value, bool) \
                    and not isinstance(value, dict):
                found.append((format_path(here), f"the key '{key}' names a secret"))
            else:
                found += find_secrets(value, here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += find_secrets(item, path + (i,))
    elif isinstance(data, str) and _SECRET_VALUE.search(data):
        found.append((format_path(path), "the value looks like an access token"))
    return found


def _refuse_secrets(preset: Preset) -> None:
    found = find_secrets(preset_to_mapping(preset))
    if found:
        where, why = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PresetError(f"refusing to save preset '{preset.name}': '{where}' looks like a secret ({why}){more}; "
                          "presets are plain files meant to be shared, so keep tokens, keys and passwords in the "
                          "environment (e.g. HF_TOKEN, WANDB_API_KEY) and remove them from the preset")

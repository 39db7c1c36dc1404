"""Presets are meant to be shared: keys and values that look like tokens, keys or passwords are found here and a
preset holding one is refused before it reaches disk.
"""

from __future__ import annotations

from typing import Any

from traindeck.backend.core.masking import is_secret_name, looks_like_secret_value, mask_value
from traindeck.backend.presets.model import Preset, PresetError, preset_to_mapping

# ------------------------------------------------------------------------------------------ secrets


def looks_like_secret_key(key: str) -> bool:
    """hub_token, wandb_api_key, HF_TOKEN, password, aws_secret_access_key, apiKey ... but not tokenizer_name,
    max_tokens, pad_token, calculate_per_token_loss, private_key_path or experiment_key: the same word rules that mask
    environments and command lines (masking.is_secret_name, read as a key=value key), so a preset and a run agree."""
    return is_secret_name(key, option=True)


def find_secrets(data: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """(dotted path, why) for every value that is a secret or sits under a key that names one."""
    from traindeck.backend.config.messages import format_path

    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = path + (str(key),)
            if not path and key == "env" and isinstance(value, dict):
                found += _env_secrets(value)
                continue
            if looks_like_secret_key(str(key)) and value not in (None, "", [], {}) and not isinstance(value, bool) \
                    and not isinstance(value, dict):
                found.append((format_path(here), f"the key '{key}' names a secret"))
            else:
                found += find_secrets(value, here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += find_secrets(item, path + (i,))
    elif isinstance(data, str) and looks_like_secret_value(data):
        found.append((format_path(path), "the value looks like an access token"))
    return found


def _env_secrets(env: dict[Any, Any]) -> list[tuple[str, str]]:
    """A preset's `env`, judged as the run's environment is masked (masking.masked_env): a variable whose name
    names a secret, or a value with a credential-shaped part or a password in a URL."""
    found: list[tuple[str, str]] = []
    for name, value in env.items():
        where = f"env.{name}"
        if is_secret_name(str(name)) and value not in (None, ""):
            found.append((where, f"the variable '{name}' names a secret"))
        elif isinstance(value, str) and looks_like_secret_value(value):
            found.append((where, "the value looks like an access token"))
        elif isinstance(value, str) and mask_value(value) != value:
            found.append((where, "the value holds a password in a URL"))
    return found


def _refuse_secrets(preset: Preset) -> None:
    found = find_secrets(preset_to_mapping(preset))
    if found:
        where, why = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PresetError(f"refusing to save preset '{preset.name}': '{where}' looks like a secret ({why}){more}; "
                          "presets are plain files meant to be shared, so keep tokens, keys and passwords in the "
                          "environment (e.g. HF_TOKEN, WANDB_API_KEY) and remove them from the preset")

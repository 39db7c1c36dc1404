"""Which environment variables and command-line values are secrets, and masking them before anything is written.

Decided on the words of a name, not on substrings: HF_TOKEN, --hub_token, WANDB_API_KEY, --api_key, DB_PASSWORD
and client_secret are secrets; TOKENIZERS_PARALLELISM, --tokenizer_name, --max_tokens, --pad_token and --text_key
are not. Values shaped like a known credential (hf_..., sk-..., ghp_..., AKIA...) are masked wherever they appear;
a bare 40-hex value (a wandb key, but also every git commit id) only under a name that says it is a key.
Pure functions over strings and mappings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MASK = "***"

# Well-known secrets whose names the word rules below may not catch in every spelling.
SECRET_NAMES = frozenset({
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN", "WANDB_API_KEY", "COMET_API_KEY", "NEPTUNE_API_TOKEN",
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
    "AZURE_STORAGE_KEY", "AZURE_CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS", "GITHUB_TOKEN", "GH_TOKEN",
    "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "DATABRICKS_TOKEN", "KAGGLE_KEY", "PGPASSWORD",
})
# A word anywhere in the name makes it a secret (*PASSWORD*, *SECRET*).
_ANYWHERE = ("password", "passwd", "secret", "passphrase")
# The name's last word makes it a secret (SSH_PRIVATE, GITHUB_AUTH, --credentials, SESSION_COOKIE).
_LAST = {"credential", "credentials", "auth", "cookie", "private", "bearer", "apikey", "pat"}
# "<word>_token" names a piece of a tokenizer's vocabulary or a count, not a credential.
_VOCABULARY = {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "special", "additional", "start", "end", "image",
               "vision", "audio", "video", "max", "min", "num", "new", "per", "ignore", "prompt", "context",
               "default", "chat", "tool", "system", "user", "assistant", "decoder", "eot", "fim", "think"}
# On a command line "<word>_key" is often a data column (--text_key, --label_key): a secret only after these.
_KEY_QUALIFIERS = {"api", "access", "secret", "private", "auth", "wandb", "hf", "hub", "openai", "anthropic",
                   "license", "signing", "encryption", "session", "client", "storage", "account", "kaggle",
                   "comet", "neptune", "mlflow", "service", "master", "x"}
# Credentials recognisable by their shape, whatever holds them.
_SECRET_VALUE = re.compile(r"\b(?:hf_[A-Za-z0-9]{30,}|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
                           r"|github_pat_[A-Za-z0-9_]{40,}|AKIA[0-9A-Z]{16}|xox[abposr]-[A-Za-z0-9-]{10,})")
# user:password@ inside URL-like values (proxies, tracking servers): the password is masked, the rest kept.
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)(?P<password>[^@\s]+)(?P<tail>@)")
_NEGATIVE_NUMBER = re.compile(r"^-\d")


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def is_secret_name(name: str, *, option: bool = False) -> bool:
    """True when a variable (or, with `option`, a command-line option / key=value key) of this name holds a secret."""
    if name.upper() in SECRET_NAMES:
        return True
    words = _words(name)
    if not words:
        return False
    if any(part in word for word in words for part in _ANYWHERE):
        return True
    last, before = words[-1], (words[-2] if len(words) > 1 else "")
    if last in _LAST:
        return True
    if last == "token":
        return before not in _VOCABULARY
    if last == "key":
        return not option or not before or before in _KEY_QUALIFIERS
    return False


def looks_like_secret_value(value: str) -> bool:
    """True when `value` contains a credential of a well-known shape (Hugging Face, OpenAI, GitHub, AWS, Slack)."""
    return bool(_SECRET_VALUE.search(value))


def mask_value(value: str) -> str:
    """`value` with credential-shaped parts and URL passwords masked."""
    value = _SECRET_VALUE.sub(MASK, value)
    return _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], value)


def masked_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` safe to write to disk: secret variables become "***", credential-shaped parts and URL
    passwords in any other value too."""
    return {name: MASK if is_secret_name(name) else mask_value(value) for name, value in env.items()}


def mask_argv(argv: Sequence[str], secret_values: Sequence[str] = ()) -> list[str]:
    """argv fit to be written down: values of secret options (`--hub_token X`, `--api-key=X`, `hub_token=X`),
    credential-shaped values and every known secret value (`secret_values`, 6+ characters) become ***."""
    values = sorted({v for v in secret_values if len(v) >= 6}, key=len, reverse=True)
    masked: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-") or _NEGATIVE_NUMBER.match(arg):  # else a flag without a value came first
                masked.append(MASK)
                continue
        name, eq, _value = arg.partition("=")
        if name.startswith("-") and is_secret_name(name.lstrip("-"), option=True):
            if eq:
                masked.append(f"{name}={MASK}")
            else:
                masked.append(arg)
                hide_next = True
            continue
        if eq and not name.startswith("-") and re.fullmatch(r"[\w.+-]+", name) \
                and is_secret_name(name.rsplit(".", 1)[-1], option=True):  # hydra / HfArgumentParser key=value
            masked.append(f"{name}={MASK}")
            continue
        for value in values:
            arg = arg.replace(value, MASK)
        masked.append(mask_value(arg))
    return masked

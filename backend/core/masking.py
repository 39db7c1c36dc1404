"""Which environment variables and command-line values are secrets, and masking them before anything is written.

Decided on the words of a name, not on substrings: HF_TOKEN, --hub_token, WANDB_API_KEY, --api_key, DB_PASSWORD
and client_secret are secrets; TOKENIZERS_PARALLELISM, --tokenizer_name, --max_tokens, --pad_token and --text_key
are not. Values shaped like a known credential (hf_..., sk-..., ghp_..., AKIA...) are masked wherever they appear;
a bare 40-hex value (a wandb key, but also every git commit id) only under a name that says it is a key.

Free text (a traceback, a log line, a diagnosis) is masked by `mask_text`: the credential shapes, JSON Web Tokens
(eyJ... in three dot-separated parts), the credential after `Authorization:` or `Bearer`, the value of a
`name=value` / `name: value` pair whose name is a secret's (hub_token=..., "api_key": "..."), URL passwords, and
every known secret value (the values of the run's secret variables). No pattern reaches across a line break, so
text can be masked piece by piece when it is cut at line breaks (`TextMasker`, for logs of any size).
Pure functions over strings and mappings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO

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


# A JSON Web Token: base64url of a JSON header ("{\"" encodes as eyJ), a payload and a signature, dot-separated.
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*")
# The credential of an HTTP Authorization header, with or without its scheme ("Authorization: Basic dXNl...").
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
                          r"(?:(?:bearer|basic|token|digest|negotiate)[ \t]+)?)(?P<value>[^\s\"',;]+)")
_SCHEMES = {"bearer", "basic", "token", "digest", "negotiate"}
# A bearer token anywhere ("Bearer abc123..."): a value of 8+ characters with a digit in it, so prose ("the bearer
# of bad news") is left alone.
_BEARER = re.compile(r"(?i)(?P<head>\bbearer[ \t]+)(?P<value>(?=[A-Za-z._~+/-]*\d)[A-Za-z0-9._~+/-]{8,}=*)")
# name=value, name: value, "name": "value", --name value: found by the word a secret's name ends in (or holds),
# then the whole name, read back from there, is judged by is_secret_name (_mask_pair).
_PAIR = re.compile(r"(?i)(?P<word>token|key(?:_?id)?|credentials?|auth|cookie|private|bearer|apikey|pat"
                   r"|\w*?(?:passw|secret|passphrase)\w*)"
                   r"(?P<sep>[\"']?[ \t]*[:=][ \t]*[\"']?|[ \t]+)(?P<value>[^\s\"',;&)}\]]+)")
_PLAIN_VALUE = re.compile(r"(?i)[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?|true|false|none|null|nan|\*\*\*|<[^>]*>")
# Pieces of text every masked thing holds (lower case): text holding none of them is left as it is, unread by the
# patterns above. Each word of _PAIR is here by a part of it ("key" for key_id, "credential" for credentials).
_CLUES = ("hf_", "sk-", "gh", "_pat_", "akia", "xox", "eyj", "auth", "bearer", "://", "token", "key", "pass",
          "secret", "cookie", "private", "credential", "pat")
# Clues that make a line worth reading only when one of these follows them (tokens_per_sec, monkey, path are not).
_FOLLOWED = {"token": b"=:\"' \t", "key": b"=:\"' \t_i", "pat": b"=:\"' \t_", "cookie": b"=:\"' \t",
             "private": b"=:\"' \t"}
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _mask_pair(match: re.Match[str]) -> str:
    """A pair's value masked where its whole name (read back from the word found) names a secret. A bare "key"
    (a dict's key, a sort key) is not one; "name value" is a pair only after a dashed option (--hub_token X)."""
    text, start = match.string, match.start()
    begin = start
    while begin > 0 and text[begin - 1] in _NAME_CHARS:
        begin -= 1
    name = text[begin:start] + match["word"]
    bare = name.lstrip("-")
    if not match["sep"].strip(" \t") and bare == name:
        return match[0]
    if _PLAIN_VALUE.fullmatch(match["value"]) or _words(bare) == ["key"] or not is_secret_name(bare, option=True):
        return match[0]
    return match["word"] + match["sep"] + MASK


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of `env`'s secret variables (6+ characters: shorter ones would mask ordinary words), longest
    first, so a value that begins another never leaves the longer one's tail."""
    return sorted({v for k, v in env.items() if is_secret_name(k) and len(v) >= 6}, key=len, reverse=True)


def _mask_shapes(text: str) -> str:
    text = _SECRET_VALUE.sub(MASK, text)
    text = _JWT.sub(MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m[0] if _PLAIN_VALUE.fullmatch(m["value"]) or m["value"].lower() in _SCHEMES
                            else m["head"] + MASK, text)
    text = _BEARER.sub(lambda m: m["head"] + MASK, text)
    text = _PAIR.sub(_mask_pair, text)
    return _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], text)


def _known(text: str, values: Sequence[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def mask_text(text: str, secret_values: Sequence[str] = ()) -> str:
    """`text` with every secret in it masked: known `secret_values` (6+ characters), credential shapes, JSON Web
    Tokens, Authorization / Bearer credentials, values of secret-named pairs and URL passwords. Ordinary text
    (commit ids, hashes, step counts, max_tokens=512, pad_token) is returned unchanged."""
    text = _known(text, sorted((v for v in secret_values if len(v) >= 6), key=len, reverse=True))
    low = text.lower()
    return _mask_shapes(text) if any(clue in low for clue in _CLUES) else text


def mask_json(data: Any, secret_values: Sequence[str] = ()) -> Any:
    """A copy of JSON-like `data` (dicts, lists, strings, numbers) with every string masked by mask_text; keys
    are kept (they are traindeck's field names)."""
    if isinstance(data, str):
        return mask_text(data, secret_values)
    if isinstance(data, Mapping):
        return {key: mask_json(value, secret_values) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [mask_json(value, secret_values) for value in data]
    return data


class TextMasker:
    """mask_text over bytes of any size (a log for a bug report), bounded in time: only the lines that hold a clue
    (a known secret value, or a piece every masked thing holds) are read by the patterns, found by plain
    substring searches, and a stream is cut at line breaks (no secret spans one), so a secret split between two
    reads is masked whole. Bytes that are not UTF-8 pass through unchanged. A line longer than `max_line` is cut
    at its last blank before that length (a lone token never holds one)."""

    def __init__(self, secret_values: Sequence[str] = (), *, chunk: int = 4 << 20, max_line: int = 1 << 20) -> None:
        self.secret_values = sorted({v for v in secret_values if len(v) >= 6}, key=len, reverse=True)
        self._values = [v.encode() for v in self.secret_values]
        self.chunk, self.max_line = chunk, max_line

    def _clue_lines(self, data: bytes) -> dict[int, int]:
        """{start: end} of the lines of `data` that hold a clue."""
        low = data.lower()
        lines: dict[int, int] = {}
        searches = [(data, value, b"") for value in self._values]
        searches += [(low, clue.encode(), _FOLLOWED.get(clue, b"")) for clue in _CLUES]
        for haystack, clue, followed in searches:
            at = haystack.find(clue)
            while at >= 0:
                after = at + len(clue)
                if not followed or after >= len(data) or data[after] in followed:
                    start = max(data.rfind(b"\n", 0, at), data.rfind(b"\r", 0, at)) + 1
                    if start not in lines:
                        ends = [e for e in (data.find(b"\n", after), data.find(b"\r", after)) if e >= 0]
                        lines[start] = min(ends) if ends else len(data)
                    after = lines[start]
                at = haystack.find(clue, after)
        return lines

    def mask(self, data: bytes) -> bytes:
        """`data` with every secret in it masked (it should end at a line break, or at the stream's end)."""
        lines = self._clue_lines(data)
        if not lines:
            return data
        pieces, done = [], 0
        for start in sorted(lines):
            end = lines[start]
            if start < done:
                continue
            line = data[start:end].decode("utf-8", "surrogateescape")
            pieces += [data[done:start], _mask_shapes(_known(line, self.secret_values)).encode(
                "utf-8", "surrogateescape")]
            done = end
        pieces.append(data[done:])
        return b"".join(pieces)

    def stream(self, source: BinaryIO) -> Iterator[bytes]:
        """The masked bytes of `source` from where it stands to its end, a piece at a time."""
        held = b""
        while True:
            data = source.read(self.chunk)
            if not data:
                break
            held += data
            cut = max(held.rfind(b"\n"), held.rfind(b"\r")) + 1
            if cut:
                yield self.mask(held[:cut])
                held = held[cut:]
            while len(held) > self.max_line:  # what is left holds no line break
                cut = max(held.rfind(b" ", 0, self.max_line), held.rfind(b"\t", 0, self.max_line)) + 1
                yield self.mask(held[:cut or self.max_line])
                held = held[cut or self.max_line:]
        if held:
            yield self.mask(held)

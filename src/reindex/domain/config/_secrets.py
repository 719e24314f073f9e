"""Secrets never enter a config (DESIGN invariants 9 and 16): the one secret-name rule, ``*_env`` indirection,
URLs without credentials, and the masks a recorded config is shown with."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from pydantic import ValidationInfo

from reindex.errors import ConfigError

__all__ = [
    "ENV_SUFFIX", "RECORDED", "check_params", "env_name", "find_secret_value", "is_recorded", "is_secret_name",
    "no_credentials", "no_userinfo", "params_from_env", "redact", "scrub", "secret_shape", "without_env_names",
]


# --------------------------------------------------------------------------------------------
# Secrets never enter a config: a config is copied into plans, reports, population records and
# error lines (DESIGN invariants 9 and 16). A secret is named in the config (``api_key_env:
# OPENAI_API_KEY``) and read from the environment when the class that needs it is built.
# --------------------------------------------------------------------------------------------

# A name is a secret's when one of its words (split at ``_ - .`` and camelCase) is one of these:
# api_key, accessToken, client-secret, X-Amz-Signature, sig, Authorization… but not max_tokens or tiktoken.
_SECRET_WORDS = frozenset({
    "key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "pwd", "passphrase",
    "credential", "credentials", "auth", "authorization", "bearer", "cookie", "sig", "signature", "privatekey",
})
ENV_SUFFIX = "_env"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME_RULE = "letters, digits and '_', not starting with a digit"
# Validation context of a config read back from state (a population record): written before secrets were
# refused, it is read as it is (a plan shows its secret-named fields masked, see :func:`redact`).
RECORDED = {"recorded": True}


def is_secret_name(name: str) -> bool:
    """Whether a parameter, header or query-string name names a secret (the one rule, used wherever a
    config is checked or derived from an object)."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name))
    return any(w.lower() in _SECRET_WORDS for w in re.split(r"[^A-Za-z0-9]+", spaced))


# Values shaped like a credential, whatever field holds them (issue 43: a key pasted into a free-form field or a
# source URI was copied into plans and records, the check being by name only).
_SECRET_SHAPES = (
    (re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_-]{16,}"), "an API key (sk-…)"),
    (re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"), "an AWS access key id (AKIA…)"),
    (re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}"), "a GitHub token (ghp_…)"),
    (re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{22,}"), "a GitHub token (github_pat_…)"),
    (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token (xox…-)"),
    (re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"), "a Google API key (AIza…)"),
    (re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"), "a Hugging Face token (hf_…)"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
)
_QUERY_PARAM = re.compile(r"[?&;#]([^=?&;#\s]+)=([^&;#\s]*)")


def secret_shape(value: str) -> str | None:
    """What credential ``value`` looks like it holds (``an API key (sk-…)``, ``a credential in a query string
    (key=…)``), or None: key-shaped values and secret-named query parameters (``?key=``, ``&token=``), in any
    string, URL or not."""
    for pattern, what in _SECRET_SHAPES:
        if pattern.search(value):
            return what
    for m in _QUERY_PARAM.finditer(value):
        name = unquote_plus(m.group(1))
        if m.group(2) and is_secret_name(name):
            return f"a credential in a query string ({name}=…)"
    return None


def find_secret_value(data: Any, path: str = "") -> tuple[str, str] | None:
    """The first string in ``data`` (a parsed config, at any depth; ``<name>_env`` entries, which hold variable
    names, excepted) that looks like a credential: (its path, what it looks like); None when there is none."""
    if isinstance(data, dict):
        for key, item in data.items():
            if str(key).endswith(ENV_SUFFIX):
                continue
            found = find_secret_value(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(data, list):
        for n, item in enumerate(data):
            found = find_secret_value(item, f"{path}[{n}]")
            if found:
                return found
    elif isinstance(data, str):
        what = secret_shape(data)
        if what:
            return path, what
    return None


def is_recorded(info: ValidationInfo | None) -> bool:
    return bool(info is not None and info.context and info.context.get("recorded"))


def check_params(params: dict[str, Any], info: ValidationInfo | None = None) -> dict[str, Any]:
    """Refuse secrets in free-form ``params`` (at any depth): a string under a secret name, a URL holding
    credentials, and a ``<name>_env`` that is not ``<secret name>_env: VARIABLE_NAME``."""
    if not is_recorded(info):
        _walk_params(params, "", secret=False)
    return params


def _walk_params(value: Any, path: str, *, secret: bool) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            name, where = str(key), f"{path}.{key}" if path else str(key)
            if name.endswith(ENV_SUFFIX) and len(name) > len(ENV_SUFFIX):
                base = name[: -len(ENV_SUFFIX)]
                if not (secret or is_secret_name(base)):
                    raise ValueError(f"{where}: only secrets are read from the environment (a name with key, token, "
                                     f"secret, password, credential… in it); give {base} itself in the config")
                if not isinstance(item, str) or not _ENV_NAME.fullmatch(item):
                    raise ValueError(f"{where} must be the name of an environment variable ({_ENV_NAME_RULE}), "
                                     "never the secret itself")
                continue
            _walk_params(item, where, secret=secret or is_secret_name(name))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _walk_params(item, f"{path}[{n}]", secret=secret)
    elif isinstance(value, str):
        if secret:
            key = path.split("[", 1)[0].rsplit(".", 1)[-1]
            raise ValueError(f"{path} holds a secret, and the config is copied into plans, reports and population "
                             f"records: put the secret in an environment variable and name the variable instead "
                             f"({key}{ENV_SUFFIX}: NAME_OF_THE_VARIABLE)")
        if "://" in value:
            try:
                no_credentials(value, "read the secret from the environment (a <name>_env parameter)")
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None


def no_credentials(value: str | None, fix: str, info: ValidationInfo | None = None) -> str | None:
    """Refuse a URL carrying credentials: ``user:password@host`` (with a scheme or without one) or a
    secret-named query-string or fragment parameter (``?api_key=…``, ``&token=…``, ``&sig=…``). A URL is
    written into plans, reports, population records and error lines; keys come from the environment only."""
    value = no_userinfo(value, fix)
    if value is None or is_recorded(info):
        return value
    head = value.split("?", 1)[0].split("#", 1)[0]
    if "://" not in head:
        first = head.split("/", 1)[0]
        if "@" in first and ":" in first.split("@", 1)[0]:
            raise ValueError(f"the URL holds credentials (user:password@…); remove them and {fix}")
    tail = value[len(head):]
    for part in re.split(r"[?#&;]", tail):
        name = unquote_plus(part.split("=", 1)[0])
        if name and is_secret_name(name):
            raise ValueError(f"the URL's query string holds a credential ({name}=…); remove it and {fix}")
    return value


def env_name(value: str | None, info: ValidationInfo | None = None) -> str | None:
    """A field naming an environment variable holds its name, never its value."""
    if value is not None and not is_recorded(info) and not _ENV_NAME.fullmatch(value):
        raise ValueError(f"must be the name of an environment variable ({_ENV_NAME_RULE}), never the secret itself")
    return value


def without_env_names(value: Any) -> Any:
    """``value`` (parameters) without its ``<name>_env`` entries, at any depth: the names of the variables
    secrets are read from are operational, in no id and no digest, so rotating a key (its value or the
    variable's name) changes nothing that is built."""
    if isinstance(value, dict):
        return {k: without_env_names(v) for k, v in value.items() if not str(k).endswith(ENV_SUFFIX)}
    if isinstance(value, list):
        return [without_env_names(v) for v in value]
    return value


def params_from_env(params: dict[str, Any], where: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``params`` as the class they build receives them: every ``<name>_env: VARIABLE`` becomes ``<name>: <the
    variable's value>`` (at any depth). ConfigError when a variable is not set."""
    env = os.environ if environ is None else environ

    def resolve(value: Any, path: str) -> Any:
        if isinstance(value, list):
            return [resolve(v, f"{path}[{n}]") for n, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            name, at = str(key), f"{path}.{key}"
            if name.endswith(ENV_SUFFIX) and isinstance(item, str):
                if item not in env:
                    raise ConfigError(f"{at}: environment variable {item} is not set (the secret is read from the "
                                      "environment only)")
                out[name[: -len(ENV_SUFFIX)]] = env[item]
            else:
                out[key] = resolve(item, at)
        return out

    return resolve(params, where)


def scrub(text: str, params: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """``text`` (an error line from a class built with ``params``) with the value of every variable a
    ``<name>_env`` parameter names replaced by ``(secret)``: a class may quote its key in an error."""
    env = os.environ if environ is None else environ
    names: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if str(key).endswith(ENV_SUFFIX) and isinstance(item, str):
                    names.append(item)
                else:
                    collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(params)
    for secret in sorted({env[n] for n in names if env.get(n)}, key=len, reverse=True):
        text = text.replace(secret, "(secret)")
    return text


def redact(path: str, value: Any) -> Any:
    """``value`` as a plan may show it: ``(secret)`` when the last key of ``path`` names a secret or the value
    is a URL holding credentials (a population record written before secrets were refused)."""
    key = path.rsplit(".", 1)[-1]
    if not key.endswith(ENV_SUFFIX) and is_secret_name(key) and isinstance(value, (str, list, dict)):
        return "(secret)"
    if isinstance(value, (list, dict)) and find_secret_value(value):
        return "(secret)"
    if isinstance(value, str):
        if secret_shape(value):
            return "(secret)"
        try:
            no_credentials(value, "")
        except ValueError:
            return "(secret)"
    return value



def no_userinfo(value: str | None, fix: str) -> str | None:
    """Refuse a URL carrying ``user:password@``: a URL is written into plans, reports, population records
    and error lines, so a credential in it would leak everywhere; keys come from the environment only."""
    if value is None or "://" not in value:
        return value
    netloc = value.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in netloc:
        raise ValueError(f"the URL holds credentials (user:password@…); remove them and {fix}")
    return value

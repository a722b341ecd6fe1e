"""Secrets never reach a record, a log, the database or a model card: one way to mask them.

``redact(text)`` masks Hugging Face tokens (``hf_…``), passwords in URLs, secret-looking URL
query values (``?token=…``, ``sig=…``) and the literal values of secret environment variables
(``HF_TOKEN``, ``*_API_KEY``, …). ``redact_data(obj)`` applies it to every string of nested
data (a recipe, a record) so free-text fields are masked like the command line is.
``publishable(obj)`` does that and also cuts local absolute paths (``/home/me/data/x`` ->
``<local>/x``) from what leaves the machine (a model card, a pushed record or recipe).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

MASK = "***"
_SECRET_NAME = re.compile(r"(token|key|secret|sig|signature|auth|password|passwd|credential)", re.I)
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")
# any scheme, any case (HTTPS://, s3://, postgresql://): credentials look the same in all of them
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_PATH_PARAM = re.compile(r";([^;=/]+)=([^;/]*)")
_USER_COLON = re.compile(r"[\w.%+~-]+:")  # "user:" opening a userinfo
# an absolute local path (/… or ~/…) standing on its own: not inside a URL (after ":" or "/"), nor
# the middle of a word or fraction ("A/B", "1/2"); it ends at white space, quotes or brackets
_LOCAL_PATH = re.compile(r"(?<![\w:/.~-])(?<!<local>)~?/[^\s'\"`<>()\[\]{},;|/][^\s'\"`<>()\[\]{},;|]*")
LOCAL = "<local>"
# a value that is one path, spaces and all: "/Users/Alice Smith/bert" (not "/a and /b", not "/ 5")
_WHOLE_PATH = re.compile(r"~?/[^\s/](?:(?! /)[^\n])*\Z")
# a quoted path anywhere: "… '/Users/Alice Smith/data.npz'", ["/home/a b/bert", x]
_QUOTED_PATHS = (re.compile(r'(")(?P<path>~?/[^\s"/][^\n"]*)(")'), re.compile(r"(')(?P<path>~?/[^\s'/][^\n']*)(')"))
_FILE_URL = re.compile(r"file://[^\s'\"`<>]+")
# a YAML value that is a path to the end of its line, quoted or not: "key: /a b/c", "- '/a b/c'"
_YAML_PATH_VALUE = re.compile(r"""(?m)((?:^|:|-)[ \t]+(['"]?))(?P<path>~?/[^\s'"#/][^\n'"#]*?)(\2[ \t]*(?:#.*)?)$""")
_MIN_SECRET_LEN = 8  # shorter environment values ("1", "true") would mask ordinary words


def _env_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _mask_userinfo(url: str) -> str:
    """``url`` with everything between ``://`` and the host's ``@`` masked. A password may hold a raw
    ``/``, ``?`` or ``#`` (``https://u:pw/12@host``), which ends the host for a URL parser: after a
    ``user:``, the last ``@`` ends the userinfo."""
    scheme, _, rest = url.partition("://")
    host_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    if "@" in rest[:host_end]:
        at = rest.rfind("@", 0, host_end)
    elif _USER_COLON.match(rest) and "@" in rest:
        at = rest.rfind("@")
    else:
        return url
    return f"{scheme}://{MASK}{rest[at:]}"


def _fix_url(match: re.Match) -> str:
    url = _mask_userinfo(match.group(0))
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL after all (e.g. an unbalanced IPv6 bracket)
        return url
    netloc = parts.netloc
    query = urllib.parse.urlencode(
        [
            (k, MASK if _SECRET_NAME.search(k) else v)
            for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    # ;key=value path parameters hold secrets as queries do
    path = _PATH_PARAM.sub(lambda m: f";{m[1]}={MASK}" if _SECRET_NAME.search(m[1]) else m[0], parts.path)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=path, query=query))


def redact(text: str) -> str:
    """``text`` with tokens, URL passwords, secret query values and secret env values masked."""
    for value in _env_secrets():
        text = text.replace(value, MASK)
    text = _HF_TOKEN.sub("hf_" + MASK, text)
    return _URL.sub(_fix_url, text)


def redact_data(obj: Any) -> Any:
    """A copy of nested dicts/lists/tuples with every string (keys included) redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_data(k): redact_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_data(v) for v in obj)
    return obj


def _local_path(match: re.Match, group: int | str = 0) -> str:
    name = match.group(group).rstrip("/").rsplit("/", 1)[-1]
    return f"{LOCAL}/{name}"


def _cut_paths(text: str) -> str:
    if _WHOLE_PATH.match(text):  # a value that is one path, spaces and all ("/Users/Alice Smith/bert")
        return f"{LOCAL}/{text.rstrip('/').rsplit('/', 1)[-1]}"
    text = _FILE_URL.sub(_local_path, text)
    for quoted in _QUOTED_PATHS:
        text = quoted.sub(lambda m: m.group(1) + _local_path(m, "path") + m.group(3), text)
    text = _YAML_PATH_VALUE.sub(lambda m: m.group(1) + _local_path(m, "path") + m.group(4), text)
    return _LOCAL_PATH.sub(_local_path, text)


def publishable(obj: Any) -> Any:
    """``redact_data(obj)`` with local absolute paths cut to ``<local>/NAME``: what a public repo may hold.

    A path tells the world a user name and a folder layout, and means nothing on another machine;
    its last part (the encoder folder, the recipe file) is kept because it still says what was used.
    """
    if isinstance(obj, str):
        return _cut_paths(redact(obj))
    if isinstance(obj, dict):
        return {publishable(k): publishable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(publishable(v) for v in obj)
    return obj

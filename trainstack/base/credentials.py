"""Values that carry a credential, whatever the name they came under: a URL with a user or
password, a token with a known prefix, a JSON Web Token, a private key, or a long random
string. What trainstack copies from a team's files into a stack file ends up in the machines'
metadata and boot log, readable by every account of the stack: such a value is refused there,
and the message says where it was, never what it was.

A heuristic: a long hex string that is no secret (a commit hash, a digest) is refused too,
and the message says to write it into the stack by hand then.
"""

from __future__ import annotations

import itertools
import re

# scheme://USER[:PASSWORD]@host: anything between "//" and an "@" before the path.
_URL_USER_INFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}://[^/?#\s@]*@")
# Tokens by their issuers' published prefixes, each with enough characters after it to be one.
_KNOWN_TOKENS = (
    ("a GitHub token", r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("a GitLab token", r"glpat-[A-Za-z0-9_-]{20,}"),
    ("an AWS access key", r"(?:AKIA|ASIA)[A-Z0-9]{16}"),
    ("a Google OAuth access token", r"ya29\.[A-Za-z0-9_-]{20,}"),
    ("a Google API key", r"AIza[A-Za-z0-9_-]{35}"),
    ("a Slack token", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("an API secret key (sk-...)", r"sk-[A-Za-z0-9_-]{20,}"),
    ("a Hugging Face token", r"hf_[A-Za-z0-9]{30,}"),
    ("an npm token", r"npm_[A-Za-z0-9]{36}"),
    ("a JSON Web Token", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
)
_KNOWN = [(what, re.compile(rf"(?<![A-Za-z0-9]){pattern}")) for what, pattern in _KNOWN_TOKENS]
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
# Runs of base64 (standard and URL-safe) characters long enough to be a key or a token, and
# of hex digits (a key, a token or a digest; "--key=" before one is not part of it).
_RUN = re.compile(r"[A-Za-z0-9+/_-]{24,}")
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")
# Random letters and digits change between upper case, lower case and digit about every 1.6
# characters; words and identifiers (ResNet50_BatchNorm_Run3) stay in one far longer.
_RANDOM_MEAN_RUN = 2.1


def _mean_class_run(text: str) -> float:
    def kind(character: str) -> int:
        return 0 if character.isupper() else 1 if character.islower() else 2

    runs = 1 + sum(kind(a) != kind(b) for a, b in itertools.pairwise(text))
    return len(text) / runs


def _looks_random(run: str) -> str | None:
    letters = re.sub(r"[^A-Za-z0-9]", "", run)
    mixed = all(re.search(kind, letters) for kind in ("[A-Z]", "[a-z]", "[0-9]"))
    if len(letters) >= 24 and mixed and _mean_class_run(letters) < _RANDOM_MEAN_RUN:
        return "a long random string (a key or a token)"
    return None


def credential_kind(value: str) -> str | None:
    """What kind of credential ``value`` holds, or None when it looks like none."""
    if _URL_USER_INFO.search(value):
        return "a URL with a user or password (scheme://USER:PASSWORD@HOST)"
    for what, pattern in _KNOWN:
        if pattern.search(value):
            return what
    if _PRIVATE_KEY.search(value):
        return "a private key"
    for found in _HEX.findall(value):
        if re.search(r"[0-9]", found) and re.search(r"[a-fA-F]", found):
            return "a long hex string (a key or a token)"
    for run in _RUN.findall(value):
        if (kind := _looks_random(run)) is not None:
            return kind
    return None

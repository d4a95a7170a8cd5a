"""Which config fields hold secrets (bearer tokens, API keys), and the text written in their place.

A field is a secret when its name is `token`, `api_key`, `password` or `secret`, or ends with `_token`, `_api_key`,
`_password` or `_secret` (`client.api_key`, `rollout_transport.token`, `inference.server.token`). Resolved configs
(`config.loader.config_to_toml`) and error messages write `REDACTED` instead of a secret's value.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
"""The text written in place of a secret's value."""

_SECRET_NAME = re.compile(r"(?:^|_)(?:token|api_key|password|secret)$")


def is_secret(name: str) -> bool:
    """Whether the config field `name` (its last key: `api_key`, `token`) holds a secret."""
    return bool(_SECRET_NAME.search(name))

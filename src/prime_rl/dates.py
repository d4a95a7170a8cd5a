"""Date options read as ISO dates (`YYYY-MM-DD`), shared by config/ and envs/. Standard library only: GridSim
imports it where prime-rl's config stack is not installed (a peer's venv serving GridSim)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def iso_date(value: Any) -> Any:
    """A GridSim date option (`forward_from`, `train_from`) as a `datetime.date`, from a date or the text
    `YYYY-MM-DD` only (pydantic alone reads `20240101` as a timestamp and Python's `fromisoformat` as the basic ISO
    form); None stays None.

    Raises:
        ValueError: any other form, a date with a time, or a day that does not exist (the field's name is added by
            the config error that reports it).
    """
    if value is None or (isinstance(value, dt.date) and not isinstance(value, dt.datetime)):
        return value
    text = value.isoformat() if isinstance(value, dt.datetime) else str(value).strip()
    if _ISO_DATE.fullmatch(text):
        try:
            return dt.date.fromisoformat(text)
        except ValueError as e:
            raise ValueError(f"{text!r} is not a date ({e}): write it YYYY-MM-DD, e.g. 2024-01-01") from None
    raise ValueError(f"{text!r} is not a date in the form YYYY-MM-DD (e.g. 2024-01-01 for January 1, 2024)")

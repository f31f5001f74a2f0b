"""The factor that shortens every wait of the node agent on `trainstack local`.

The agent's waits are sized for Compute Engine (trainstack_agent.timings). ``trainstack local``
runs the same agent against stand-ins that answer in milliseconds; there
``TRAINSTACK_AGENT_TIME_SCALE`` (a factor from 0.05 to 1) shortens every one of them alike. The
command line checks and reports the factor, the agent applies it: both read it here.
"""

from __future__ import annotations

import re
from typing import Final

TIME_SCALE_VARIABLE: Final = "TRAINSTACK_AGENT_TIME_SCALE"
# 0.05 to 1, at most three decimals: a factor, never a duration in disguise.
_SCALE: Final = re.compile(r"0\.[0-9]{1,3}|1(\.0{1,3})?")
MIN_TIME_SCALE: Final = 0.05


class TimeScaleError(ValueError):
    """TRAINSTACK_AGENT_TIME_SCALE is not a factor from 0.05 to 1."""


def parse_time_scale(text: str | None) -> float:
    """The factor in ``TRAINSTACK_AGENT_TIME_SCALE``; 1 when unset. A value that is not a
    factor from 0.05 to 1 raises: a longer wait than Compute Engine's is never what was meant,
    and zero would spin."""
    if text is None or text == "":
        return 1.0
    if _SCALE.fullmatch(text) is None or float(text) < MIN_TIME_SCALE:
        raise TimeScaleError(f"{TIME_SCALE_VARIABLE} must be a factor from {MIN_TIME_SCALE} to 1, such as 0.25")
    return float(text)

"""Waiting, in a test, for what other processes do: one bounded poll for every test.

A condition is looked at every ``interval`` seconds until it holds (its value is returned) or
``seconds`` have passed. ``gone_wrong`` says why the wait can no longer end well (a process
that ended, a node that failed) so that a broken run fails at once with its reason instead of
at the deadline. The bound is a hang guard, never a measure of speed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

Value = TypeVar("Value")


def wait_until(
    condition: Callable[[], Value | None],
    what: str,
    seconds: float,
    *,
    interval: float = 0.1,
    gone_wrong: Callable[[], str | None] | None = None,
) -> Value:
    """``condition()``'s first true value; AssertionError naming ``what`` past ``seconds``
    or once ``gone_wrong()`` gives a reason."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        reason = gone_wrong() if gone_wrong is not None else None
        if reason:
            raise AssertionError(f"{what} cannot happen now: {reason}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {seconds:g} s")
        time.sleep(interval)


class Polled(Protocol):
    def poll(self) -> int | None: ...


def exit_status(child: Polled, seconds: float = 300.0) -> int:
    """The exit status of a started process (anything with ``poll()``) once it has ended."""
    codes: list[int] = []

    def ended() -> bool:
        code = child.poll()
        if code is not None:
            codes.append(int(code))
        return code is not None

    wait_until(ended, "the process's end", seconds, interval=0.02)
    return codes[0]

"""The few parts of the Pulumi SDK's runtime that trainstack uses beyond its public API.

Written against pulumi 3.272.0 (requirements.txt). Everything else in trainstack uses the
public API; when the SDK is upgraded, this module is the one to check:

- ``pulumi.runtime.config.CONFIG`` / ``_SECRET_KEYS`` / ``set_all_config``: the whole config
  map, and which of its keys are secrets. The public
  ``pulumi.Config`` reads one key at a time and cannot list them, but an unknown key
  (a typo) must be an error, not silently ignored.
- ``rpc._special_sig_key`` / ``_special_secret_sig``: how a secret input reaches the mocks,
  so that a plan can mask it.
- ``SETTINGS.outputs``, ``wait_for_rpcs`` and ``_sync_await``: running a program to the
  point where every registration and output has settled, under mocks, outside
  ``pulumi.runtime.test``'s own loop (see :func:`run_until_settled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pulumi.runtime.config import _SECRET_KEYS, CONFIG, set_all_config
from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key
from pulumi.runtime.settings import SETTINGS
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

T = TypeVar("T")

# How a secret value travels between program and engine (and mocks): {KEY: SIGNATURE, "value": ...}.
SECRET_SIGNATURE_KEY: str = _special_sig_key
SECRET_SIGNATURE: str = _special_secret_sig


def program_config() -> dict[str, Any]:
    """Every config key of the running stack (all namespaces), as the engine passed them."""
    return dict(CONFIG.get())


def program_secret_keys() -> frozenset[str]:
    """The config keys the engine marks secret (set with `pulumi config set --secret`)."""
    return frozenset(_SECRET_KEYS.get())


def set_program_config(config: Mapping[str, str], secret_keys: frozenset[str] = frozenset()) -> None:
    """Config for a program run under mocks: what the engine would pass for a stack file."""
    set_all_config(dict(config), sorted(secret_keys))


def sync_await(awaitable: Awaitable[T]) -> T:
    """Wait for ``awaitable`` on Pulumi's own event loop."""
    return _sync_await(awaitable)


def run_until_settled(program: Callable[[], None]) -> None:
    """Run the program, then wait until every registration and every output has resolved.

    Pulumi's own ``run_pulumi_func`` settles outputs with a loop of ``asyncio.wait(...,
    FIRST_COMPLETED)`` over all pending outputs, which re-arms a callback on every pending
    output after each completion: profiled here, that loop was 60% of a 512-worker plan.
    Gathering each batch of pending outputs at once reaches the same settled state (and
    raises the same first error) in one pass per batch.
    """

    async def settle() -> None:
        program()
        while True:
            await wait_for_rpcs(await_all_outstanding_tasks=False)
            with SETTINGS.lock:
                pending = list(SETTINGS.outputs)
                SETTINGS.outputs.clear()
            if not pending:
                return
            await asyncio.gather(*pending)

    sync_await(settle())

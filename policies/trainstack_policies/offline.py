"""Evaluate the pack's policies against planned resources, without the Pulumi engine.

`trainstack check` plans a stack under Pulumi's mock runtime in the project's environment,
then runs ``python -m trainstack_policies.offline`` in this pack's environment (the two cannot
share one: see requirements.txt) with the planned resources as JSON on stdin::

    {"stack": "...", "resources": [{"type": "...", "name": "...", "inputs": {...}}],
     "config": {<the same document as `pulumi preview --policy-pack-config`>}}

and reads the violations back as JSON on stdout. The policies called are the pack's own
objects, through the same ``validate(args, report)`` entry point the engine calls.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from trainstack_policies import PACK_NAME, POLICIES
from trainstack_policies.contract import PolicyFinding

# A plan is at most a few thousand resources; anything far larger is not one.
MAX_INPUT_BYTES = 256 * 1024 * 1024
LEVELS = {level.value: level for level in EnforcementLevel}


class InputError(ValueError):
    """The request on stdin is not a plan this module can check."""


def urn(stack: str, resource_type: str, name: str) -> str:
    return f"urn:pulumi:{stack}::{PACK_NAME}::{resource_type}::{name}"


def _options() -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )


def settings(policy: Policy, config: Mapping[str, Any]) -> tuple[EnforcementLevel, dict[str, Any]]:
    """A policy's enforcement level and config, as the engine resolves a --policy-pack-config
    document: "all" sets every level, a policy's entry is a level or an object with
    ``enforcementLevel`` and its properties, and the schema's defaults fill the rest."""
    level = policy.enforcement_level or EnforcementLevel.ADVISORY
    values: dict[str, Any] = {}
    schema = policy.config_schema
    if schema is not None:
        values = {key: spec["default"] for key, spec in schema.properties.items() if "default" in spec}
    for key in ("all", policy.name):
        entry = config.get(key)
        if entry is None:
            continue
        if isinstance(entry, str):
            entry = {"enforcementLevel": entry}
        if not isinstance(entry, Mapping):
            raise InputError(f"policy config {key}: a level ({', '.join(LEVELS)}) or an object")
        if "enforcementLevel" in entry:
            if entry["enforcementLevel"] not in LEVELS:
                raise InputError(f"policy config {key}.enforcementLevel: one of {', '.join(LEVELS)}")
            level = LEVELS[entry["enforcementLevel"]]
        for name, value in entry.items():
            if name == "enforcementLevel" or key == "all":
                continue
            spec = schema.properties.get(name) if schema is not None else None
            if spec is None:
                known = ", ".join(schema.properties) if schema is not None else "none"
                raise InputError(f"policy config {key}.{name}: unknown property (known: {known})")
            _check_type(f"{key}.{name}", spec, value)
            values[name] = value
    return level, values


def _check_type(where: str, spec: Mapping[str, Any], value: Any) -> None:
    kind = spec.get("type")
    if kind == "array":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"policy config {where}: a list of strings")
    elif kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise InputError(f"policy config {where}: a positive number")


def _reporter(
    found: list[PolicyFinding], policy: Policy, level: EnforcementLevel, stack: str, resource: PolicyResource | None
) -> Callable[..., None]:
    """The ``report(message, urn=None)`` callback a policy gets, recording against ``resource``
    (or the stack, for a stack validation)."""

    def report(message: str, _urn: str | None = None) -> None:
        where = (resource.resource_type, resource.name) if resource is not None else ("stack", stack)
        found.append(PolicyFinding(policy.name, level.value, *where, message))

    return report


def evaluate(stack: str, resources: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> list[PolicyFinding]:
    found: list[PolicyFinding] = []
    planned = [
        PolicyResource(
            r["type"], r["inputs"], urn(stack, r["type"], r["name"]), r["name"], _options(), None, None, [], {}
        )
        for r in resources
    ]
    for policy in POLICIES:
        level, values = settings(policy, config)
        if level == EnforcementLevel.DISABLED:
            continue
        if isinstance(policy, ResourceValidationPolicy):
            for resource in planned:
                args = ResourceValidationArgs(
                    resource.resource_type, resource.props, resource.urn, resource.name, _options(), None, values
                )
                _settle(policy.validate(args, _reporter(found, policy, level, stack, resource)))
        elif isinstance(policy, StackValidationPolicy):
            whole = StackValidationArgs(planned, values)
            _settle(policy.validate(whole, _reporter(found, policy, level, stack, None)))
    return found


def _settle(result: Any) -> None:
    # Every trainstack rule is synchronous; an awaitable here would be a rule left unchecked.
    if inspect.isawaitable(result):
        raise RuntimeError("a policy returned an awaitable; offline checks run synchronous rules only")


def _read_request(text: str) -> tuple[str, list[Mapping[str, Any]], Mapping[str, Any]]:
    try:
        request = json.loads(text)
    except ValueError as error:
        raise InputError(f"stdin is not JSON: {error}") from None
    if not isinstance(request, dict):
        raise InputError("stdin: a JSON object with stack, resources and config")
    stack, resources, config = request.get("stack"), request.get("resources"), request.get("config", {})
    if not isinstance(stack, str) or not isinstance(resources, list) or not isinstance(config, dict):
        raise InputError("stdin: stack (a string), resources (a list) and config (an object)")
    for index, resource in enumerate(resources):
        if not (
            isinstance(resource, dict)
            and isinstance(resource.get("type"), str)
            and isinstance(resource.get("name"), str)
            and isinstance(resource.get("inputs"), dict)
        ):
            raise InputError(f"resources[{index}]: an object with type, name and inputs")
    return stack, resources, config


def main() -> int:
    text = sys.stdin.read(MAX_INPUT_BYTES + 1)
    try:
        if len(text) > MAX_INPUT_BYTES:
            raise InputError(f"stdin is larger than {MAX_INPUT_BYTES} bytes")
        stack, resources, config = _read_request(text)
        violations = evaluate(stack, resources, config)
    except InputError as error:
        print(f"trainstack_policies: {error}", file=sys.stderr)
        return 2
    # The policies that ran: a policy the config leaves disabled is not among them.
    ran = [p.name for p in POLICIES if settings(p, config)[0] != EnforcementLevel.DISABLED]
    json.dump({"policies": ran, "violations": [asdict(v) for v in violations]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

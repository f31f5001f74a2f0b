"""The stack file's ``config:`` map read into a :class:`~trainstack.stackmodel.schema.StackConfig`.

Pulumi hands a program its config as namespaced keys of strings (``trainstack:cluster`` as
JSON text); a stack file gives them as YAML. Both are read here, once: namespaces checked for
near misses, secrets kept apart, every problem reported with the key it belongs to.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from trainstack.base.errors import Problem, StackConfigError, shorten
from trainstack.base.names import PROJECT_ID_PATTERN, REGION_PATTERN
from trainstack.stackmodel.naming import NAMESPACE, stack_name_problem
from trainstack.stackmodel.schema import Settings, StackConfig
from trainstack.stackmodel.secrets import SECRET_ELSEWHERE, engine_secrets, holds_secure_value

# Pulumi passes each config value as a string; no sensible stack value comes near this.
MAX_CONFIG_VALUE_CHARS = 1024 * 1024


def decode_config_value(value: Any) -> Any:
    """Pulumi hands config values to the program as strings; objects and numbers arrive as JSON text."""
    if not isinstance(value, str) or len(value) > MAX_CONFIG_VALUE_CHARS:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _key_for(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return f"{NAMESPACE}:"
    head, *rest = loc
    path = f"{NAMESPACE}:{head}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _fields_at(model: type[BaseModel], parents: tuple[int | str, ...]) -> dict[str, Any]:
    """The fields of the model that ``parents`` (keys from the top; list indexes skipped)
    leads to, by name; empty when the path leaves the models."""
    current: Any = model
    for part in parents:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if isinstance(current, type) and issubclass(current, BaseModel) else None
        if field is None:
            return {}
        candidates = getattr(field.annotation, "__args__", (field.annotation,))
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return dict(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else {}


def _valid_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names allowed at ``loc`` (for the 'unknown key' message)."""
    return sorted(_fields_at(model, loc[:-1]))


def _bounds(loc: tuple[int | str, ...]) -> tuple[str, float | None, float | None]:
    """The range a number at ``loc`` takes, in words, and its lowest and highest value."""
    field = _fields_at(Settings, loc[:-1]).get(str(loc[-1])) if loc else None
    limits = list(getattr(field, "metadata", []))
    # An optional number (``Annotated[float, Field(...)] | None``) keeps its limits inside.
    for member in typing.get_args(getattr(field, "annotation", None)):
        for extra in typing.get_args(member)[1:]:
            limits += getattr(extra, "metadata", [])
    low = high = None
    words = []
    for limit in limits:
        for attribute, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(limit, attribute, None)
            if isinstance(value, (int, float)):
                words.append(f"{sign} {value:g}")
                low, high = (value, high) if attribute in ("ge", "gt") else (low, value)
    return " and ".join(words), low, high


# What YAML 1.1 (PyYAML, Pulumi's config) reads as text though it looks like a number: an
# exponent whose mantissa has no dot (1e12; 1.0e12 is a number).
_EXPONENT_AS_TEXT = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")


def _number_as_text(loc: tuple[int | str, ...], text: str) -> str | None:
    """For text a number field got that Python reads as a number (YAML 1.1 reads ``1e12``,
    without a dot, as text): what it is and the range the key takes."""
    if not _EXPONENT_AS_TEXT.fullmatch(text.strip()):
        return None
    number = float(text.strip())
    words, low, high = _bounds(loc)
    shown = f"a number {words}" if words else "a number"
    if (low is not None and number < low) or (high is not None and number > high):
        return f"{text!r} is out of range: this key takes {shown}"
    return f"{text!r} is read as text in YAML (an exponent needs a dot: {number:.1e}); this key takes {shown}"


def problems_from_validation_error(error: ValidationError) -> list[Problem]:
    problems = []
    for detail in error.errors():
        loc = tuple(detail["loc"])
        kind = detail["type"]
        if kind == "extra_forbidden":
            valid = _valid_keys(Settings, loc)
            message = f"unknown key; valid keys here: {', '.join(valid)}" if valid else "unknown key"
        elif kind == "missing":
            message = "required key is missing"
        elif (
            kind in ("float_type", "int_type")
            and isinstance(detail.get("input"), str)
            and (number := _number_as_text(loc, detail["input"]))
        ):
            message = number
        else:
            message = str(detail["msg"]).removeprefix("Value error, ")
            if "input" in detail and kind not in {"model_type", "dict_type", "value_error"}:
                message = f"{message} (got {shorten(detail['input'])})"
        problems.append(Problem(_key_for(loc), message))
    return problems


def _salvage(
    stack: str, project: str, region: str, settings_raw: dict[str, Any], failing: frozenset[str]
) -> StackConfig | None:
    """The stack without its failing sections, when that much is valid (for the catalog's
    rules to check the rest in the same pass); None when a required section failed."""
    try:
        settings = Settings.model_validate({k: v for k, v in settings_raw.items() if k not in failing})
    except ValidationError:
        return None
    return StackConfig(stack=stack, project=project, region=region, settings=settings)


STACK_FILE_TOP_LEVEL_KEYS = frozenset({"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"})


# Config namespaces are Pulumi project and provider names: ASCII, lowercase.
CONFIG_NAMESPACE_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,62}")
# The namespaces a stack file's keys belong to: a key in a near miss of one is a typo that
# would otherwise leave its setting at the default in silence.
KNOWN_NAMESPACES = (NAMESPACE, "gcp")


def namespace_problem(namespace: str, name: str) -> str | None:
    """Why ``namespace`` cannot be meant as written, or None."""
    import difflib

    if not CONFIG_NAMESPACE_PATTERN.fullmatch(namespace):
        return "a config namespace is lowercase ASCII letters, digits, '-' and '_' (a look-alike letter is not one)"
    if namespace not in KNOWN_NAMESPACES and (close := difflib.get_close_matches(namespace, KNOWN_NAMESPACES, 1, 0.75)):
        return f"namespace {namespace!r} is not {close[0]!r}: did you mean {close[0]}:{shorten(name).strip(chr(39))}?"
    return None


def parse_stack_config(stack: str, config: Mapping[str, Any], secret_keys: frozenset[str] = frozenset()) -> StackConfig:
    """Turn the ``config:`` mapping of a stack file into a :class:`StackConfig`.

    ``config`` keys are namespaced (``gcp:project``, ``trainstack:cluster``); values may be
    already-decoded YAML or the JSON strings Pulumi passes to a running program.
    Raises :class:`StackConfigError` listing every problem found.
    """
    problems: list[Problem] = []
    settings_raw: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str) or ":" not in key:
            problems.append(Problem(str(key), "config keys are namespaced, e.g. 'trainstack:zone' or 'gcp:project'"))
            continue
        namespace, _, name = key.partition(":")
        if (misspelt := namespace_problem(namespace, name)) is not None:
            problems.append(Problem(shorten(key).strip("'"), misspelt))
            continue
        if namespace == NAMESPACE:
            if name != "secrets" and (key in secret_keys or holds_secure_value(value)):
                # Every other setting reaches the machines' metadata and boot log as it is.
                problems.append(Problem(key, SECRET_ELSEWHERE))
                continue
            settings_raw[name] = decode_config_value(value)
            if name == "secrets" and key in secret_keys:
                settings_raw[name] = engine_secrets(settings_raw[name])

    if (stack_problem := stack_name_problem(stack)) is not None:
        problems.append(Problem("stack", stack_problem))
    project = config.get("gcp:project")
    region = config.get("gcp:region")
    if not isinstance(project, str) or not PROJECT_ID_PATTERN.fullmatch(project):
        problems.append(
            Problem(
                "gcp:project",
                f"a Google Cloud project id is required (6-30 lowercase letters, digits, hyphens), got {shorten(project)}",
            )
        )
    if not isinstance(region, str) or not REGION_PATTERN.fullmatch(region):
        problems.append(Problem("gcp:region", f"a region such as us-central1 is required, got {shorten(region)}"))

    # Salvage only when the stack name, project and region are sound: the rules need them.
    salvageable = not problems
    settings: Settings | None = None
    partial: StackConfig | None = None
    dropped: frozenset[str] = frozenset()
    try:
        settings = Settings.model_validate(settings_raw)
    except ValidationError as error:
        problems.extend(problems_from_validation_error(error))
        if salvageable and isinstance(project, str) and isinstance(region, str):
            failing = frozenset(str(detail["loc"][0]) for detail in error.errors() if detail["loc"])
            partial = _salvage(stack, project, region, settings_raw, failing)
            dropped = frozenset(f"{NAMESPACE}:{name}" for name in failing)

    if settings is not None and not (settings.cluster or settings.tpu or settings.notebook):
        problems.append(
            Problem(
                f"{NAMESPACE}:cluster",
                "a stack needs at least one of trainstack:cluster, trainstack:tpu, trainstack:notebook",
            )
        )
    if problems or settings is None:
        raise StackConfigError(problems, partial, dropped)
    assert isinstance(project, str)
    assert isinstance(region, str)
    return StackConfig(stack=stack, project=project, region=region, settings=settings)

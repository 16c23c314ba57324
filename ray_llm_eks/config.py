"""The YAML configuration of one deployment, loaded into the declared model.

A configuration file is a :class:`~ray_llm_eks.base.deployment.Deployment` written as YAML: its
sections are the model's parts, with the same names, defaults and docstrings (the reference is
docs/configuration.md, generated from the model). Pydantic's ``TypeAdapter`` over the frozen
dataclasses checks the shape (types, unknown keys); every semantic check is the model's own, run
when each part is built, so ``make synth``, ``ray-llm-eks plan`` and a construct used directly
refuse the same values with the same sentence. A mistake surfaces as :class:`ConfigError` whose
lines name the dotted field, the bad value and what is accepted.

The one difference in shape: a leg (``prefill:``, ``decode:``) is written flat, its node pool's
fields beside its own (``tensor_parallel_size``, ``target_ongoing_requests``, ``request_router``), and its role is
the section's name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from .base.deployment import Deployment
from .base.specs import Specs
from .base.errors import DoesNotFit, SpecError, SpecErrors, shown
from .base.placement import WORKER_ROLES
from .base.serving import EndpointType, Leg, SecurityProfile, Topology
from .model_source import resolve_auto

__all__ = [
    "ConfigError", "Deployment", "EndpointType", "SecurityProfile", "Specs", "Topology",
    "load_config", "parse_config",
]

_ADAPTER = TypeAdapter(Deployment)
_LEG_FIELDS = frozenset(f.name for f in fields(Leg)) - {"pool"}


class ConfigError(ValueError):
    """A configuration mistake, explained for a person (never a jsii traceback).

    ``errors`` holds the model's problems, with fields as dotted config paths, when the mistake
    is semantic; ``does_not_fit`` is True when the only problems are the model not fitting in GPU
    memory (``plan`` exits 1 for those, 2 for everything else).
    """

    def __init__(self, message: str, errors: tuple[SpecError, ...] = ()) -> None:
        super().__init__(message)
        self.errors = errors

    @property
    def does_not_fit(self) -> bool:
        return bool(self.errors) and all(isinstance(e, DoesNotFit) for e in self.errors)


def _legs_as_model(data: dict[str, Any]) -> dict[str, Any]:
    """The flat ``prefill:``/``decode:`` sections as :class:`Leg` mappings (pool fields under ``pool``)."""
    shaped = dict(data)
    for role in WORKER_ROLES:
        section = data.get(role)
        if not isinstance(section, dict):
            continue  # pydantic names the wrong type
        pool = {key: value for key, value in section.items() if key not in _LEG_FIELDS}
        pool["role"] = role
        shaped[role] = {**{key: section[key] for key in _LEG_FIELDS if key in section}, "pool": pool}
    return shaped


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(part) for part in loc]
    if len(parts) >= 2 and parts[0] in WORKER_ROLES and parts[1] == "pool":
        del parts[1]  # a leg's pool fields are written flat in the file
    return ".".join(parts) or "(top level)"


_PLAIN_TYPE_ERRORS: dict[str, tuple[str, str]] = {
    "model_type": ("not a section", "a mapping of the section's settings (docs/configuration.md)"),
    "dataclass_type": ("not a section", "a mapping of the section's settings (docs/configuration.md)"),
    "dict_type": ("not a mapping", "a mapping of names to values (docs/configuration.md)"),
    "int_from_float": ("not a whole number", "a whole number, such as 4096"),
    "int_parsing": ("not a whole number", "a whole number, such as 4096"),
    "int_type": ("not a whole number", "a whole number, such as 4096"),
    "float_parsing": ("not a number", "a number, such as 0.9"),
    "float_type": ("not a number", "a number, such as 0.9"),
    "bool_parsing": ("not true or false", "true or false"),
    "bool_type": ("not true or false", "true or false"),
    "string_type": ("not text", "text (quote it in YAML if it looks like a number)"),
    "list_type": ("not a list", "a YAML list, such as [a, b]"),
    "tuple_type": ("not a list", "a YAML list, such as [a, b]"),
}
"""pydantic's type errors in the library's own words: pydantic's text names internal classes
(``Input should be a dictionary or an instance of Leg``), which a configuration's author never wrote."""


def _section(path: tuple[Any, ...]) -> Any:
    """The dataclass of the section at ``path`` (as pydantic locates it), or None; a leg's ``pool``
    is written flat, so the leg stands for both."""
    section: Any = Deployment
    for part in path:
        if not dataclasses.is_dataclass(section):
            return None
        hint = typing.get_type_hints(section).get(str(part))
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            hint = next((a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)), None)
        section = hint
    return section if dataclasses.is_dataclass(section) else None


def _keys(path: tuple[Any, ...]) -> list[str]:
    """The keys a configuration may write in the section at ``path`` (pydantic's location)."""
    if len(path) == 2 and path[0] in WORKER_ROLES and path[1] == "pool":
        path = path[:1]
    section = _section(path)
    if section is None:
        return []
    names = [f.name for f in fields(section) if f.init and not f.name.startswith("_")]
    if section is Leg:  # written flat: the leg's own fields beside its pool's, the role being the section
        names = [n for n in names if n != "pool"] + [f.name for f in fields(_section((*path, "pool"))) if f.name != "role"]
    return names


def _default(path: tuple[Any, ...]) -> Any:
    """The default of the field at ``path``, or None (an example of what the field takes)."""
    section = _section(path[:-1]) if path else None
    field = next((f for f in fields(section) if f.name == str(path[-1])), None) if section is not None else None
    return field.default if field is not None and field.default is not dataclasses.MISSING else None


def _explain(error: ValidationError, source: str) -> ConfigError:
    lines = [f"invalid configuration in {source}:"]
    spec_errors: list[SpecError] = []
    for item in error.errors():
        field = _location(item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, (SpecError, SpecErrors)):
            prefix = "" if field == "(top level)" else field + "."
            for problem in (cause,) if isinstance(cause, SpecError) else cause.errors:
                spec_errors.append(type(problem)(prefix + problem.field, problem.message))
                lines.append(f"  {prefix}{problem.field}: {problem.message}")
            continue
        if item["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            keys = _keys(tuple(item["loc"][:-1]))
            accepted = f"the keys of this section: {', '.join(keys)}" if keys else "the keys docs/configuration.md lists"
            lines.append(f"  {field}: unknown key (got {shown(item['input'])}); accepted: {accepted}")
            continue
        got = item.get("input")
        if item["type"] in _PLAIN_TYPE_ERRORS:
            what, accepted = _PLAIN_TYPE_ERRORS[item["type"]]
            example = _default(tuple(item["loc"]))
            if item["type"].startswith("int_") and isinstance(example, int) and not isinstance(example, bool):
                accepted = f"a whole number, such as {example}"  # the field's own default, not 4096 everywhere
            lines.append(f"  {field}: {what} (got {shown(got)}); accepted: {accepted}")
            continue
        if item["type"] in ("enum", "literal_error"):
            # pydantic says "Input should be 'a', 'b' or 'c'"; the same in the library's words.
            expected = str((item.get("ctx") or {}).get("expected", "")).replace("'", "").replace(" or ", ", ")
            lines.append(f"  {field}: not one of the accepted values (got {shown(got)}); accepted: {expected}")
            continue
        message = item["msg"].removeprefix("Value error, ")
        hidden = isinstance(got, dict) or got is None or repr(got) in message
        quoted = "" if hidden else f" (got {shown(got)})"
        lines.append(f"  {field}: {message}{quoted}")
    return ConfigError("\n".join(lines), tuple(spec_errors))


def parse_config(data: dict[str, Any] | None, source: str = "configuration") -> Deployment:
    """Validate a mapping (for example loaded from YAML) into the declared :class:`Deployment`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: the top level must be a mapping, got {type(data).__name__}")
    for role in WORKER_ROLES:
        section = data.get(role)
        if isinstance(section, dict) and ("role" in section or "pool" in section):
            key = "role" if "role" in section else "pool"
            raise ConfigError(f"invalid configuration in {source}:\n  {role}.{key}: unknown key (got "
                              f"{section[key]!r}); the section's name is the role, and its pool's fields sit in it "
                              "directly (docs/configuration.md)")
    try:
        data = resolve_auto(data)  # model.architecture: auto, read here so synth, plan and RayLlmStack agree
    except SpecErrors as errors:
        lines = [f"  {error.field}: {error.message}" for error in errors.errors]
        raise ConfigError("\n".join([f"invalid configuration in {source}:", *lines]), tuple(errors.errors)) from None
    try:
        return _ADAPTER.validate_python(_legs_as_model(data))
    except ValidationError as error:
        raise _explain(error, source) from None


REFERENCE_CONFIG = Path(__file__).parent / "data" / "reference.yaml"
"""What no configuration means: the reference deployment with ``strict: false``, stated (and
explained) in that file, since no digest or commit can be known offline (docs/deploying.md, Pinning)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: the YAML spec says keys
    are unique, and PyYAML would silently keep the last one (``region:`` twice deploys the second)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1}); "
                    "accepted: each key once in its section", key_node.start_mark)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path | None) -> Deployment:
    """Load and validate a YAML file; ``None`` gives the reference deployment (:data:`REFERENCE_CONFIG`)."""
    if path is None:
        path = REFERENCE_CONFIG
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ConfigError(f"malformed YAML in {path} at {where}: {error.problem or error}") from None
    if data is None:
        raise ConfigError(f"invalid configuration in {path}: the file is empty (got {text.strip()!r}); accepted: a "
                          "mapping of settings, or `{}` to deploy the library's defaults (docs/configuration.md)")
    return parse_config(data, str(path))

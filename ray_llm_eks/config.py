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
import json
import types
import typing
from collections import Counter
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
    "load_config", "load_data", "parse_config",
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


ACCEPTED_ENCODINGS = ("UTF-8 (with or without a byte-order mark) or UTF-16 with a byte-order mark (PowerShell: "
                      "Out-File -Encoding utf8)")

MAX_NESTING = 64
"""Deepest nesting a configuration may have, aliases expanded. The model's deepest field is four
levels down; the bound stops PyYAML's composer, which recurses once per level, before Python's
recursion limit (a 5,000-deep file was a RecursionError traceback)."""

MAX_VALUES = 10_000
"""Most values (mappings, lists and scalars) a configuration may hold once its aliases are
expanded. PyYAML builds an alias as a reference, so a "billion laughs" file loads as a few hundred
nodes and explodes afterwards, in validation and in every manifest that renders it (synth printed
2.1 GB); the reference configuration has about 150."""

_MERGE_TAG = "tag:yaml.org,2002:merge"  # the `<<` key, https://yaml.org/type/merge.html


def _decode(data: bytes) -> str:
    """The text of a configuration file, or ValueError saying what the bytes are instead."""
    if data.startswith((b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00")):
        raise ValueError("it is UTF-32 (its byte-order mark says so)")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16-le" if data.startswith(b"\xff\xfe") else "utf-16-be"
        try:
            text = data[2:].decode(encoding)
        except UnicodeDecodeError as error:
            raise ValueError(f"it starts with a UTF-16 byte-order mark and is not UTF-16 ({error.reason} at byte "
                             f"{error.start + 2})") from None
    else:
        if b"\x00" in data:
            offset = data.index(b"\x00")
            odd, even = data[1::2], data[0::2]
            if data and (odd.count(0) > len(odd) * 0.9 or even.count(0) > len(even) * 0.9):
                raise ValueError("it looks like UTF-16 without a byte-order mark (every other byte is NUL)")
            raise ValueError(f"it is binary, not text (a NUL byte at offset {offset})")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            raise ValueError(f"it is not UTF-8 (byte 0x{data[error.start]:02X} on line {line} is {error.reason}; "
                             "Latin-1 or Windows-1252 perhaps)") from None
    if "\x00" in text:
        raise ValueError(f"it is binary, not text (a NUL character at character {text.index(chr(0))})")
    return text


class _Refused(yaml.MarkedYAMLError):
    """A file this loader will not build: nested too deep, or aliases expanding too far."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with bounds on nesting and alias expansion, refusing a key given twice in
    one mapping: the YAML spec says keys are unique, and PyYAML would silently keep the last one
    (``region:`` twice deploys the second). Merge keys (``<<: *base``) are YAML's own
    (https://yaml.org/type/merge.html): a key a mapping writes itself overrides a merged one, and
    only the keys a mapping writes itself are checked for repeats."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._checked: set[int] = set()

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise _Refused(None, None, f"nested more than {MAX_NESTING} levels deep; accepted: at most "
                               f"{MAX_NESTING} (a configuration needs about 4)", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Called before a mapping's merge keys are folded into it (SafeConstructor.construct_mapping,
        # and for each merged mapping), so the keys seen here are the ones the file writes in it.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    first = seen[key].start_mark.line + 1
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice (lines {first} and {key_node.start_mark.line + 1}); "
                        "accepted: each key once in its section", key_node.start_mark)
                seen[key] = key_node
        super().flatten_mapping(node)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand past :data:`MAX_NESTING` or :data:`MAX_VALUES`;
    each node is measured once, so a bomb is refused in time linear in the file."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height), aliases expanded
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, level: int) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is None:
            if id(node) in open_nodes:
                raise _Refused(None, None, "an alias refers to a node that contains it (a loop); accepted: "
                               "aliases of anchors written before them, outside them", node.start_mark)
            if level > MAX_NESTING:
                raise _Refused(None, None, f"nested more than {MAX_NESTING} levels deep once its aliases are "
                               f"expanded; accepted: at most {MAX_NESTING}", node.start_mark)
            open_nodes.add(id(node))
            children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                        else node.value if isinstance(node, yaml.SequenceNode) else [])
            values, height = 1, 0
            for child in children:
                child_values, child_height = measure(child, level + 1)
                values, height = values + child_values, max(height, child_height + 1)
                if values > MAX_VALUES:
                    raise _Refused(None, None, f"its aliases expand to more than {MAX_VALUES:,} values (an alias "
                                   f"bomb?); accepted: at most {MAX_VALUES:,}", node.start_mark)
            open_nodes.discard(id(node))
            known = sizes[id(node)] = (values, height)
        if level + known[1] > MAX_NESTING:
            raise _Refused(None, None, f"nested more than {MAX_NESTING} levels deep once its aliases are expanded; "
                           f"accepted: at most {MAX_NESTING}", node.start_mark)
        return known

    measure(root, 1)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    counts = Counter(keys)  # list.count per key was quadratic in an object's size
    repeated = next((key for key in keys if counts[key] > 1), None)
    if repeated is not None:
        raise ValueError(f"key {repeated!r} is given twice in one object; accepted: each key once in its section")
    return dict(pairs)


def _json_depth(data: Any) -> int:
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(value, dict):
            stack.extend((item, level + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, level + 1) for item in value)
    return deepest


def _parse(text: str, path: Path) -> Any:
    """The file's data: JSON where the text is JSON (PyYAML, a YAML 1.1 parser, refuses a tab that
    indents JSON and reads ``1e5`` as text), YAML otherwise."""
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text, object_pairs_hook=_json_pairs)
        except json.JSONDecodeError:
            pass  # a YAML flow mapping, or a mistake: YAML's parser says where
        except RecursionError:
            raise ConfigError(f"malformed JSON in {path}: nested more than {MAX_NESTING} levels deep; "
                              f"accepted: at most {MAX_NESTING}") from None
        except ValueError as error:
            raise ConfigError(f"malformed JSON in {path}: {error}") from None
        else:
            if _json_depth(data) > MAX_NESTING:
                raise ConfigError(f"malformed JSON in {path}: nested more than {MAX_NESTING} levels deep; "
                                  f"accepted: at most {MAX_NESTING}")
            return data
    loader = None
    try:
        loader = _Loader(text)  # its reader refuses a character YAML does not allow, here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = " ".join(str(error.problem or error).split())
        raise ConfigError(f"malformed YAML in {path} at {where}: {problem}") from None
    except yaml.YAMLError as error:  # the reader's: a character YAML does not allow
        raise ConfigError(f"malformed YAML in {path}: {' '.join(str(error).split())}") from None
    except ValueError as error:  # a value the safe constructor cannot build, e.g. the date 2026-13-45
        raise ConfigError(f"malformed YAML in {path}: {error}; accepted: a value YAML can read (quote it to "
                          "make it text)") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: Path, what: str = "configuration file") -> str:
    """The text of a file a person wrote, or a :class:`ConfigError` naming the file, what its bytes
    are and :data:`ACCEPTED_ENCODINGS` (PowerShell 5.1's ``Out-File`` writes UTF-16 with a BOM)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {what} {path}: {error.strerror}") from None
    try:
        return _decode(data)
    except ValueError as error:
        raise ConfigError(f"cannot read {what} {path}: {error}; accepted: {ACCEPTED_ENCODINGS}") from None


def load_data(path: str | Path) -> Any:
    """The data of a YAML (or JSON) configuration file, unvalidated (None for an empty one), read as
    :func:`load_config` reads it: the same encodings, bounds and refusals, as :class:`ConfigError`."""
    path = Path(path)
    return _parse(read_text(path), path)


def load_config(path: str | Path | None) -> Deployment:
    """Load and validate a YAML (or JSON) file; ``None`` gives the reference deployment (:data:`REFERENCE_CONFIG`)."""
    path = Path(REFERENCE_CONFIG if path is None else path)
    text = read_text(path)
    data = _parse(text, path)
    if data is None:
        raise ConfigError(f"invalid configuration in {path}: the file is empty (got {text.strip()!r}); accepted: a "
                          "mapping of settings, or `{}` to deploy the library's defaults (docs/configuration.md)")
    return parse_config(data, str(path))

"""Construct-level refusals, in aws-cdk-lib's ``ValidationError`` manner: the construct path first.

A construct builds its spec-layer object (``WorkerPool``, ``ServingSpec``, ...) from its props;
the spec layer's check is the same one the configuration runs, so the sentence after the field
is the one ``make synth`` and ``ray-llm-eks plan`` print for the same mistake.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping, TypeVar

from constructs import Construct

from ..base.errors import SpecError, SpecErrors, problem

T = TypeVar("T")


class ConstructValidationError(ValueError):
    """A construct's props refused: each line is ``<construct path>: <field>: <problem>``."""

    def __init__(self, scope: Construct, errors: SpecErrors | list[SpecError]) -> None:
        self.construct_path = scope.node.path
        self.errors = tuple(errors)
        super().__init__("\n".join(f"{self.construct_path}: {error}" for error in self.errors))


def validated(scope: Construct, build: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``build(*args, **kwargs)`` (a spec type or a check), with refusals reported against ``scope``'s path."""
    try:
        return build(*args, **kwargs)
    except SpecErrors as errors:
        raise ConstructValidationError(scope, errors) from None
    except SpecError as error:
        raise ConstructValidationError(scope, [error]) from None



def spec_prop(scope: Construct, name: str, spec_type: type[T], value: Any, default: Callable[[], T | None]) -> T | None:
    """A construct prop of a spec type (``model``, ``image``, ...): the object, or its fields as a
    dict, built here so that a refusal names this construct's path and ``<name>.<field>``
    (``Inference/Serving: model.max_model_len: not a token count (got '4096')``). A spec object
    built by the caller refuses its fields at once, before this construct exists, naming its type
    (``ModelSpec: max_model_len: ...``); the dict form keeps the construct path."""
    if value is None:
        return default()
    if isinstance(value, spec_type):
        return value
    names = [f.name for f in fields(spec_type) if f.init]  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        unknown = sorted(str(key) for key in value if key not in names)
        if unknown:
            raise ConstructValidationError(scope, [problem(
                name, unknown, f"unknown field(s) of {spec_type.__name__}", ", ".join(names))])
        try:
            return spec_type(**value)
        except SpecErrors as errors:
            raise ConstructValidationError(scope, errors.within(name)) from None
    raise ConstructValidationError(scope, [problem(
        name, value, f"not a {spec_type.__name__}",
        f"{spec_type.__name__}(...) or a dict of its fields ({', '.join(names)})")])


def part_or_props(scope: Construct, name: str, part_type: type[T], part: Any, props: Mapping[str, Any],
                  build: Callable[..., T] | None = None) -> T:
    """A construct's model part given whole (``pool=WorkerPool(...)``, as the stack passes the
    composed parts) or as flat props (``instance_type=..., min_size=...``, as a CDK user writes it),
    never both: giving both is refused, naming the flat props given. A flat prop left None takes the
    part's own default (``build``, default ``part_type``, gets only the props given)."""
    given = {key: value for key, value in props.items() if value is not None}
    if part is None:
        return validated(scope, build or part_type, **given)
    if given:
        raise ConstructValidationError(scope, [problem(
            name, sorted(given), f"given with flat props the {part_type.__name__} already holds",
            f"{name}={part_type.__name__}(...) alone, or the flat props ({', '.join(props)}) without it")])
    if not isinstance(part, part_type):
        raise ConstructValidationError(scope, [problem(
            name, part, f"not a {part_type.__name__}", f"a {part_type.__name__}, or the flat props without it")])
    return part

"""Construct-level refusals, in aws-cdk-lib's ``ValidationError`` manner: the construct path first.

A construct builds its spec-layer object (``WorkerPool``, ``ServingSpec``, ...) from its props;
the spec layer's check is the same one the configuration runs, so the sentence after the field
is the one ``make synth`` and ``ray-llm-eks plan`` print for the same mistake.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from constructs import Construct

from ..base.errors import SpecError, SpecErrors

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


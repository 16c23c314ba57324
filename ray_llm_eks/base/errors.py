"""How the spec layer reports a mistake: the field to change, the bad value, what is accepted.

Every entry point reads the same errors: the configuration adapter prefixes them with the
dotted config path (``prefill.desired_size``), a construct with its construct path
(``Inference/Serving: prefill.desired_size``). The sentence after the field is the same text
in both, so ``make synth``, ``ray-llm-eks plan`` and a construct used directly say the same thing.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator


class SpecError(ValueError):
    """One problem with one field. ``field`` is dotted (``model.max_model_len``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def within(self, prefix: str) -> SpecError:
        """The same problem, with the field seen from one level up (``prefill`` + ``desired_size``)."""
        return type(self)(f"{prefix}.{self.field}" if prefix else self.field, self.message)


class DoesNotFit(SpecError):
    """The model does not fit in GPU memory (``ray-llm-eks plan`` exits 1 for it, not 2)."""


class SpecErrors(ValueError):
    """Every problem found in one validation pass, so a user fixes them in one go."""

    def __init__(self, errors: Iterable[SpecError], owner: str | None = None) -> None:
        self.errors: tuple[SpecError, ...] = tuple(errors)
        self.owner = owner
        """The spec type that refused its own fields when built (``ModelSpec``), or None. Built
        outside any construct (``model=ModelSpec(max_model_len="4096")``), the object fails before
        the construct that would take it exists, so its name stands where a construct path would."""
        prefix = f"{owner}: " if owner else ""
        super().__init__("\n".join(f"{prefix}{error}" for error in self.errors))

    def __iter__(self) -> Iterator[SpecError]:
        return iter(self.errors)

    def within(self, prefix: str) -> SpecErrors:
        return SpecErrors(error.within(prefix) for error in self.errors)


CREDENTIAL_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # gitleaks cmd/generate/config/rules/huggingface.go: ``hf_(?i:[a-z]{34})`` (user access tokens)
    # and ``api_org_(?i:[a-z]{34})`` (organization API tokens); digits allowed here, in case.
    ("a Hugging Face access token", re.compile(r"(?<![A-Za-z0-9])(?:hf_|api_org_)[A-Za-z0-9]{34}(?![A-Za-z0-9])")),
    # gitleaks cmd/generate/config/rules/aws.go: ``(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}``,
    # the prefixes of IAM's unique identifiers (IAM user guide, reference_identifiers: AKIA an
    # access key, ASIA a temporary STS one).
    ("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])")),
    # A secret access key is 40 characters of base64 (IAM user guide's example
    # ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``). Only the whole value, and only with upper and
    # lower case and a digit: a Secrets Manager name of that shape is possible but unlikely, and
    # its ARN (which never has this shape) still names it.
    ("an AWS secret access key", re.compile(r"^(?=[^a-z]*[a-z])(?=[^A-Z]*[A-Z])(?=[^0-9]*[0-9])[A-Za-z0-9/+]{40}$")),
)
"""Credentials by shape, for the fields that take a secret's name or ARN (``model.hf_token_secret``):
a token pasted there would be rendered into the manifests, the IAM policy and the GitOps output."""


def credential_kind(value: Any) -> str | None:
    """What kind of credential ``value`` looks like (:data:`CREDENTIAL_SHAPES`), or None."""
    if not isinstance(value, str):
        return None
    return next((kind for kind, shape in CREDENTIAL_SHAPES if shape.search(value)), None)


def shown(value: Any) -> str:
    """``value`` as a message quotes it: its ``repr``, but a credential only by kind and length, so
    a refusal (printed, logged by CI) never repeats the secret."""
    kind = credential_kind(value)
    return f"<{kind}, {len(value)} characters, redacted>" if kind else repr(value)


def not_a_credential(field: str, value: Any, wanted: str) -> SpecError | None:
    """The one rule for a field that takes a secret's name or ARN (``wanted``): a value shaped like a
    credential is refused, redacted; None otherwise (the field's own check follows)."""
    kind = credential_kind(value)
    if kind is None:
        return None
    return SpecError(field, f"{kind} where the name or ARN of the secret holding it belongs (got {shown(value)}); "
                            f"accepted: {wanted}, of a Secrets Manager secret you put it in (revoke it if this file "
                            "was shared)")


def problem(field: str, value: Any, what: str, accepted: str, kind: type[SpecError] = SpecError) -> SpecError:
    """``<what> (got <value>); accepted: <accepted>``: the one shape every message takes (a
    credential-shaped value is shown redacted: :func:`shown`)."""
    return kind(field, f"{what} (got {shown(value)}); accepted: {accepted}")


def is_whole_number(value: Any) -> bool:
    """An int that is not a bool (YAML's ``true`` and Python's ``True`` are ints to ``isinstance``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def whole_number(field: str, value: Any, accepted: str) -> SpecError | None:
    """``not a whole number`` for a count given as a string or a float (``"2"``, ``2.0``), rather
    than a range message that would read "out of range (got '2')"; None for a whole number (the
    caller checks its range)."""
    if not is_whole_number(value):
        return problem(field, value, "not a whole number", accepted)
    return None


def a_list(field: str, values: Any, example: str) -> SpecError | None:
    """One string (or anything but a list) where a list belongs: a construct prop of names iterated
    as it stands would read ``"api"`` as ``['a', 'p', 'i']``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        return problem(field, values, "not a list", f"a list such as [{example}]")
    return None


class Collector:
    """Gathers the problems of one validation pass; ``raise_if_any`` raises them together."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def add(self, error: SpecError | SpecErrors | None, prefix: str = "") -> None:
        if error is None:
            return
        found = list(error) if isinstance(error, SpecErrors) else [error]
        self.errors.extend(e.within(prefix) if prefix else e for e in found)

    def check(self, function: Any, *args: Any, prefix: str = "", **kwargs: Any) -> Any:
        """Run one check; record what it raises and return its result (None when it failed)."""
        try:
            return function(*args, **kwargs)
        except (SpecError, SpecErrors) as error:
            self.add(error, prefix)
            return None

    def raise_if_any(self, owner: Any = None) -> None:
        """Raise what was found; ``owner``: the spec object whose own fields these are (its type
        names the refusal when nothing else, a construct or a configuration field, does)."""
        if self.errors:
            # Two checks may meet the same mistake (the region, say): report it once.
            unique = {(type(e), e.field, e.message): e for e in self.errors}
            raise SpecErrors(unique.values(), type(owner).__name__ if owner is not None else None)

"""CloudWatch Logs filter patterns, for the subset the metric filters use: JSON patterns.

Semantics from the CloudWatch Logs user guide, "Filter pattern syntax for metric filters,
subscription filters, filter log events, and Live Tail" (JSON log events section), and the
earlier revisions of the same page (awsdocs/amazon-cloudwatch-logs-user-guide):

- A pattern is ``{ <expression> }``; an expression compares a selector (``$.a.b``) with a value
  using ``=`` or ``!=``, and combines comparisons with ``&&`` and ``||`` and parentheses
  (precedence: parentheses, then ``&&``, then ``||``).
- A string value is in double quotes. ``*`` at its start or end is a wildcard for any text;
  anywhere else it is a literal character ("Ev*ent" matches only "Ev*ent"). Without a wildcard,
  ``=`` compares the whole value. Matching is case sensitive.
- A selector that points to an object or an array matches with neither ``=`` nor ``!=`` (the
  guide's JSON section). A selector that names no field is treated the same way here: the guide
  does not say, and ``NOT EXISTS`` is its way to test absence (an assumption; no pattern here
  uses ``!=``).
- A log event that is not JSON matches no JSON pattern.

Not implemented (unused by this library, so a pattern using one fails to parse): numeric
comparisons, ``IS NULL/TRUE/FALSE``, ``NOT EXISTS``, array selectors, regular expressions
(``%...%``), and the unstructured and space-delimited pattern forms.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r'\s*(\{|\}|\(|\)|&&|\|\||!=|=|"(?:[^"\\]|\\.)*"|\$(?:\.[A-Za-z_][A-Za-z0-9_-]*)+)')


class PatternError(ValueError):
    pass


def _tokens(pattern: str) -> list[str]:
    tokens, position = [], 0
    text = pattern.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise PatternError(f"unsupported syntax at {text[position:position + 20]!r}")
        tokens.append(match.group(1))
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    return tokens


def _value_matches(expected: str, actual: Any) -> bool:
    if not isinstance(actual, str):
        return False
    starts, ends = expected.startswith("*"), expected.endswith("*") and len(expected) > 1
    core = expected[1 if starts else 0: len(expected) - (1 if ends else 0)]
    if starts and ends:
        return core in actual
    if starts:
        return actual.endswith(core)
    if ends:
        return actual.startswith(core)
    return actual == core


def _select(event: Any, selector: str) -> tuple[bool, Any]:
    value = event
    for key in selector[2:].split("."):
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.index = tokens, 0

    def take(self, expected: str | None = None) -> str:
        if self.index >= len(self.tokens):
            raise PatternError("the pattern ends too early")
        token = self.tokens[self.index]
        if expected is not None and token != expected:
            raise PatternError(f"expected {expected!r}, got {token!r}")
        self.index += 1
        return token

    def peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def disjunction(self):
        terms = [self.conjunction()]
        while self.peek() == "||":
            self.take()
            terms.append(self.conjunction())
        return lambda event: any(term(event) for term in terms)

    def conjunction(self):
        terms = [self.primary()]
        while self.peek() == "&&":
            self.take()
            terms.append(self.primary())
        return lambda event: all(term(event) for term in terms)

    def primary(self):
        if self.peek() == "(":
            self.take("(")
            inner = self.disjunction()
            self.take(")")
            return inner
        selector = self.take()
        if not selector.startswith("$."):
            raise PatternError(f"expected a selector, got {selector!r}")
        operator = self.take()
        if operator not in ("=", "!="):
            raise PatternError(f"unsupported operator {operator!r}")
        literal = self.take()
        if not literal.startswith('"'):
            raise PatternError(f"expected a quoted string, got {literal!r}")
        expected = json.loads(literal)

        def compare(event: Any) -> bool:
            found, actual = _select(event, selector)
            if not found or isinstance(actual, (dict, list)):
                return False
            return _value_matches(expected, actual) == (operator == "=")

        return compare


def compile_pattern(pattern: str):
    """``pattern`` -> a predicate over a raw log event (the string CloudWatch Logs stores)."""
    tokens = _tokens(pattern)
    parser = _Parser(tokens)
    parser.take("{")
    predicate = parser.disjunction()
    parser.take("}")
    if parser.peek() is not None:
        raise PatternError(f"text after the pattern: {parser.peek()!r}")

    def matches(raw_event: str) -> bool:
        try:
            event = json.loads(raw_event)
        except ValueError:
            return False
        return isinstance(event, dict) and predicate(event)

    return matches

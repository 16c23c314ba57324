r"""CloudWatch Logs filter patterns, for the subset the metric filters use: JSON patterns, with regex.

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

Regular expressions, from the same guide's "Supported regular expressions (regex) syntax"
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/regex-expressions.html) and its JSON
example ``{ $.eventType = %Trail% }``, which matches ``UpdateTrail``:

- ``$.field = %<regex>%`` looks for the regex anywhere in the field's string value; ``^`` and ``$``
  anchor it to the start and the end of the value.
- A regex may hold only letters and digits, the symbols ``: _ # = @ / ; , -`` and the operators
  ``^ $ ? [ ] { } | \ * + .``; "The ( and ) operators are not supported", nor are multi-byte
  characters. A space is not in the list (the guide's own ``|`` example has one): refused here,
  so what passes here passes under either reading.
- ``\`` escapes an operator; ``\d \D``, ``\w \W`` (``[a-zA-Z_0-9]``), ``\s \S`` (tab, space,
  newline) and ``\xhh`` (an ASCII character) are classes; ``.`` is any one character; ``?``, ``*``,
  ``+`` and ``{m,n}`` (either bound may be left out) repeat the preceding term; ``[...]`` is a
  character class (``[^...]`` its complement, as in the guide's ``ab[^c]$``); ``|`` is an "or" of
  whole alternatives (there are no groups).
- At most 2 regex in one JSON pattern (the guide's quotas).

The guide shows escapes and classes separately; that an escape (``\x29``, ``\]``, ``\d``) means
the same inside ``[...]`` is an assumption, modelled so.

Not implemented (unused by this library, so a pattern using one fails to parse): numeric
comparisons, ``IS NULL/TRUE/FALSE``, ``NOT EXISTS``, array selectors, ``!=`` with a regex, and the
unstructured and space-delimited pattern forms.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r'\s*(\{|\}|\(|\)|&&|\|\||!=|=|"(?:[^"\\]|\\.)*"|%[^%]*%|\$(?:\.[A-Za-z_][A-Za-z0-9_-]*)+)')
REGEX_PER_PATTERN = 2
_REGEX_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_#=@/;,-^$?[]{}|\\*+.")
_REGEX_OPERATORS = frozenset("^$?[]{}|\\*+.")
_SPACE = "\t\n "
_CLASSES = {"d": "0-9", "w": "a-zA-Z_0-9", "s": _SPACE}


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


def translate_regex(regex: str) -> str:
    """A CloudWatch regex (without its ``%``) -> the same language in Python's ``re`` syntax."""
    if not regex.isascii():
        raise PatternError(f"multi-byte characters are not supported: {regex!r}")
    refused = sorted(set(regex) - _REGEX_CHARACTERS)
    if refused:
        raise PatternError(f"characters a regex may not hold: {refused} in {regex!r}")
    out, i, in_class = [], 0, False
    while i < len(regex):
        char = regex[i]
        if char == "\\":
            if i + 1 >= len(regex):
                raise PatternError(f"a regex ends in a lone backslash: {regex!r}")
            escaped = regex[i + 1]
            if escaped == "x":
                digits = regex[i + 2:i + 4]
                if not re.fullmatch(r"[0-9A-Fa-f]{2}", digits):
                    raise PatternError(f"\\x needs two hexadecimal digits: {regex!r}")
                out.append(f"\\x{digits}")
                i += 4
                continue
            if escaped.lower() in _CLASSES:
                chars = _CLASSES[escaped.lower()]
                if escaped.islower():
                    out.append(chars if in_class else f"[{chars}]")
                elif in_class:
                    raise PatternError(f"\\{escaped} inside a class is not modelled: {regex!r}")
                else:
                    out.append(f"[^{chars}]")
            elif escaped in _REGEX_OPERATORS:
                out.append("\\" + escaped)
            else:
                raise PatternError(f"\\{escaped} is no escape the guide lists: {regex!r}")
            i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
            elif char == "[":
                raise PatternError(f"a class inside a class: {regex!r}")
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
            if regex[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
        elif char == "$":
            out.append(r"\Z")  # the end of the value (Python's $ would also match before a final newline)
        else:
            out.append(char)
        i += 1
    if in_class:
        raise PatternError(f"an unclosed class: {regex!r}")
    try:
        re.compile("".join(out))
    except re.error as error:
        raise PatternError(f"not a regex: {regex!r} ({error})") from error
    return "".join(out)


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
        self.regexes = 0

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
        if literal.startswith("%"):
            if operator != "=":
                raise PatternError(f"{operator} with a regex is not modelled")
            self.regexes += 1
            if self.regexes > REGEX_PER_PATTERN:
                raise PatternError(f"more than {REGEX_PER_PATTERN} regex in one pattern")
            found_in = re.compile(translate_regex(literal[1:-1]), re.ASCII | re.DOTALL).search

            def search(event: Any) -> bool:
                found, actual = _select(event, selector)
                return found and isinstance(actual, str) and found_in(actual) is not None

            return search
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

"""A tag-only image or an unpinned model revision: one visible warning, or an error with strict."""

from __future__ import annotations

import re

import pytest

from ray_llm_eks.config import ConfigError, parse_config
from ray_llm_eks.stack import build_app
from ray_llm_eks.testing import FAST_SYNTH_CONTEXT

DIGEST = "sha256:" + "c" * 64
REVISION = "0123456789abcdef0123456789abcdef01234567"


WARNING = re.compile("ray-llm-eks:reproducibility|tags are mutable|no revision")


def reproducibility_warnings(stack) -> list[str]:
    """The warnings in the construct tree's metadata, read in Python: the assertions module's
    find_warning hands back jsii proxies that failed to resolve in some test orders.
    ``find_all`` includes the stack itself, so each construct is read once."""
    return [str(entry.data) for construct in stack.node.find_all() for entry in construct.node.metadata
            if entry.type == "aws:cdk:warning" and WARNING.search(str(entry.data))]


def test_unpinned_default_gives_one_warning_naming_both_fixes(default):
    (text,) = reproducibility_warnings(default.stack)
    assert "pinned by tag only" in text and "image.digest" in text
    assert "no revision" in text and "model.revision" in text


def test_pinned_image_and_revision_give_no_warning(synth):
    pinned = synth({"image": {"digest": DIGEST}, "model": {"revision": REVISION}})
    assert reproducibility_warnings(pinned.stack) == []


@pytest.mark.parametrize(
    ("overrides", "named", "not_named"),
    [
        ({"model": {"revision": REVISION}}, "image.digest", "model.revision"),
        ({"image": {"digest": DIGEST}}, "model.revision", "image.digest"),
    ],
)
def test_strict_refuses_what_it_would_warn_about(overrides, named, not_named):
    # Refused while the configuration is read, so `make synth` and `plan` refuse it alike.
    with pytest.raises(ConfigError, match="strict") as caught:
        parse_config({"strict": True, **overrides})
    assert f"  {named}: strict mode refuses it" in str(caught.value) and not_named not in str(caught.value)


def test_strict_refuses_a_branch_as_revision():
    with pytest.raises(ConfigError, match="model.revision: strict mode refuses it: a branch or tag, not a commit; it can move \\(got 'main'\\)"):
        parse_config({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": "main"}})


def test_strict_with_everything_pinned_builds():
    config = parse_config({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": REVISION}})
    _, stack = build_app(config, context=FAST_SYNTH_CONTEXT, nag=False)
    assert stack.config.strict

"""The short content digest the charts and the pools name what they are built from by."""

from __future__ import annotations

import hashlib
import json

DIGEST_LENGTH = 12


def canonical_digest(value: object) -> str:
    """12 hex digits of SHA-256 over the canonical JSON of ``value`` (sorted keys, no spaces): the
    same value gives the same digest in every synth."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]

"""Signal the deploy's CloudFormation wait condition with the gate's verdict.

CloudFormation (``AWS::CloudFormation::WaitCondition``, "Creating wait conditions in a template"):
``PUT`` a JSON body ``{"Status": "SUCCESS"|"FAILURE", "Reason", "UniqueId", "Data"}`` to the
handle's presigned URL, with an empty or absent ``Content-Type`` (the URL's signature covers it).
``FAILURE`` fails the wait condition at once and rolls the stack back; ``Data`` (at most 4096
bytes) becomes the condition's ``Data`` attribute, which the stack outputs.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from . import reads

REASON_MAX_CHARS = 1000


def signal_body(success: bool, reason: str, unique_id: str, data: Any) -> bytes:
    return json.dumps({
        "Status": "SUCCESS" if success else "FAILURE",
        "Reason": reason[:REASON_MAX_CHARS],
        "UniqueId": unique_id,
        "Data": json.dumps(data, separators=(",", ":")),
    }).encode()


def send(url: str, success: bool, reason: str, unique_id: str, data: Any, timeout: float = 30.0) -> int:
    request = urllib.request.Request(url, data=signal_body(success, reason, unique_id, data), method="PUT")
    request.add_header("Content-Type", "")  # urllib would otherwise send a form type the signature excludes
    # Only the status is read; ``timeout`` bounds the whole exchange, as for every read of the gate.
    with reads.urlopen(request, reads.ERROR_BODY, timeout) as response:
        return response.status

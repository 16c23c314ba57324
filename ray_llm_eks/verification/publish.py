"""Continuous verification's one metric, ``TransportVerified``, to CloudWatch.

A CronJob runs the gate's checks read-only (no rollout, no signal) every few minutes and calls
:func:`transport_verified` with the verdict. It uses boto3 from the serving image (Ray's images
carry it), on a role that may put metrics into this one namespace only. Everything else in this package is standard library; this
module imports boto3 only when it publishes. (The EKS user guide gives botocore 1.34.41 as the
minimum for Pod Identity credentials.)
"""

from __future__ import annotations

import os
from typing import Any

NAMESPACE = "RayLlmEks"
METRIC = "TransportVerified"


def dimensions(namespace: str, ray_service: str) -> list[dict[str, str]]:
    return [{"Name": "Namespace", "Value": namespace}, {"Name": "RayService", "Value": ray_service}]


def transport_verified(namespace: str, ray_service: str, passed: bool, *, client: Any = None) -> None:
    """Put 1 (the endpoint answered and the KV cache crossed EFA) or 0 for this run."""
    if client is None:
        try:
            import boto3
        except ImportError:
            raise RuntimeError("the serving image has no boto3, so TransportVerified cannot be published") from None
        from botocore.config import Config

        # Bounded, so a run still ends inside its Job's deadline (a killed run publishes nothing).
        client = boto3.client("cloudwatch", region_name=os.environ.get("AWS_REGION"),
                              config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}))
    client.put_metric_data(Namespace=NAMESPACE, MetricData=[{
        "MetricName": METRIC, "Dimensions": dimensions(namespace, ray_service), "Value": 1.0 if passed else 0.0,
        "Unit": "None"}])

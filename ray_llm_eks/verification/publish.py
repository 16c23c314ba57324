"""Continuous verification's metrics to CloudWatch: ``TransportVerified`` and the window's serving figures.

A CronJob runs the gate's checks read-only (no rollout, no signal) every few minutes and calls
:func:`publish` with the verdict and what the deployment served since the previous run
(:mod:`.serving_window`). It uses boto3 from the serving image (Ray's images carry it), on a role
that may put metrics into this deployment's own namespace only (``wire.metric_namespace``). Everything else in this package is standard
library; this module imports boto3 only when it publishes. (The EKS user guide gives botocore
1.34.41 as the minimum for Pod Identity credentials.)
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from . import serving_window
from .shared import wire


def dimensions(namespace: str, ray_service: str) -> list[dict[str, str]]:
    return [{"Name": "Namespace", "Value": namespace}, {"Name": "RayService", "Value": ray_service}]


def _client() -> Any:
    try:
        import boto3
    except ImportError:
        raise RuntimeError("the serving image has no boto3, so the metrics cannot be published") from None
    from botocore.config import Config

    # Bounded, so a run still ends inside its Job's deadline (a killed run publishes nothing).
    return boto3.client("cloudwatch", region_name=os.environ.get("AWS_REGION"),
                        config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}))


def publish(metric_namespace: str, namespace: str, ray_service: str, passed: bool,
            figures: Mapping[str, Any] | None = None, *, client: Any = None) -> list[str]:
    """Put ``TransportVerified`` (1: the endpoint answered and the KV cache crossed EFA; 0) and the
    window's figures that have a value, in one call (at most 11 metrics; PutMetricData takes 1000).
    Returns the names put."""
    dims = dimensions(namespace, ray_service)
    data = [{"MetricName": wire.TRANSPORT_VERIFIED, "Dimensions": dims, "Value": 1.0 if passed else 0.0, "Unit": "None"}]
    data += [{"MetricName": metric, "Dimensions": dims, "Value": value, "Unit": unit}
             for metric, value, unit in serving_window.published(figures or {})]
    (client or _client()).put_metric_data(Namespace=metric_namespace, MetricData=data)
    return [entry["MetricName"] for entry in data]

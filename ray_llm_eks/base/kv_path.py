"""How the KV cache moves from prefill to decode: one table decides vLLM's ``kv_buffer_device``, the
NIXL backend(s) and the workers' environment, from the model's attention kind, GPUDirect RDMA on
both legs, and the vLLM and NIXL the image carries (docs/kv-path.md).

The table (:data:`KV_PATHS`), by attention kind and GPUDirect RDMA on every worker node of both legs:

======== ====== ========== ========= ===============
kind     GDR    buffer     backend   known from
======== ====== ========== ========= ===============
dense    yes    cuda       LIBFABRIC documented
dense    no     cpu        LIBFABRIC measured
mla      yes    cuda       LIBFABRIC upstream code
mla      no     cpu        LIBFABRIC upstream code
hybrid   yes    cuda       LIBFABRIC documented
hybrid   no     cuda       LIBFABRIC upstream code
======== ====== ========== ========= ===============

Every row's environment is ``VLLM_SSM_CONV_STATE_LAYOUT=DS``: a hybrid model needs it, the others
never read it, and one environment for every model lets a model change apply in place (``_DS``).

Each row's reason is its ``basis`` text. Versions enter through the defects table
(:mod:`.upstream_defects`): the chosen path, with the user's ``nixl`` overrides, is checked against
every row for the image's vLLM and NIXL (:data:`IMAGE_STACKS`); a row that refuses it refuses the
deployment, naming the field, the reason and what to do instead. A row whose basis is upstream code
only (read, never run by anyone cited) deploys with a warning.

The hybrid rows never take the host buffer: vLLM 0.26.0's ``initialize_host_xfer_buffer`` dies on a
Gated-DeltaNet layer (measured). Without GPUDirect RDMA that leaves GPU memory over LIBFABRIC/efa,
which NIXL 1.3.1's README calls unsupported ("GDR (GPU Direct RDMA) support is currently required",
``src/plugins/libfabric/README.md:10``) but whose code registers it: on the efa provider NIXL finds
the GPUs (hwloc) and offers VRAM (``libfabric_backend.cpp`` ``getSupportedMems``), asks libfabric for
``FI_HMEM`` at API 1.18 (``libfabric_rail.cpp:439``), and libfabric's efa provider claims ``FI_HMEM``
for CUDA without GPUDirect RDMA at that API ("the support of CUDA memory is implemented by calling
CUDA library", ofiwg/libfabric v2.6.0 ``prov/efa/src/efa_user_info.c:196-220``; v1.21.0 :270) and registers CUDA memory
without ``ibv_reg_mr`` when its peer-to-peer probe failed (v2.6.0 ``prov/efa/src/rdm/efa_rdm_mr.c:500-510``,
``prov/efa/src/efa_hmem.c:118-197``; v1.21.0 ``efa_mr.c:840-844``), moving the bytes through host copies (cudaMemcpy or gdrcopy). So it is not
known to fail; it is not known to work either, and ``plan`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Mapping

from . import upstream_defects
from .upstream_defects import (
    DENSE,
    HYBRID,
    MLA,
    PULL_KV_CONNECTOR,
    REFUSE,
    SSM_CONV_LAYOUT_DS,
    SSM_CONV_LAYOUT_VARIABLE,
    Defect,
    Facts,
)
from .wire import EXPECTED_PROVIDER


@dataclass(frozen=True)
class ImageStack:
    """The serving stack inside an image tag."""

    ray: str
    vllm: str
    nixl: str
    source: str
    """Where each version is stated."""


IMAGE_STACKS: dict[str, ImageStack] = {
    "serve-llm-cuda-v1.0": ImageStack(
        ray="2.58.0", vllm="0.26.0", nixl="1.3.1",
        source=("Ray 2.58.0 and vLLM 0.26.0: the DLC's Ray LLM changelog "
                "(https://aws.github.io/deep-learning-containers/ray/changelog/), 'Ray LLM v1.0 - 2026-08-31', tags serve-llm-cuda, -v1, -v1.0, -v1.0.0 ('Ray 2.58.0 and vLLM 0.26.0 on PyTorch 2.11.0, "
                "CUDA 13.0.2, Python 3.13'). NIXL 1.3.1: not stated in the DLC sources read (their newest stored "
                "docker/ray_llm/uv.lock, e0ecedea, is the pre-release Ray 2.57.0/vLLM 0.25.1 build with nixl 1.3.0); "
                "1.3.1 is the NIXL vLLM's requirements/kv_connectors.txt pins and the one the H100 measurement ran"),
    ),
}
"""The vLLM and NIXL each known image tag carries. A tag not here, or a custom ``image.repository``,
has unknown versions: every version-bound defect then counts as present."""


class AttentionKind(str, Enum):
    dense = DENSE
    hybrid = HYBRID
    """Gated-DeltaNet or Mamba layers beside full attention (``ModelArchitecture.is_hybrid``)."""
    mla = MLA
    """Multi-head latent attention (``ModelArchitecture.is_mla``)."""


def attention_kind(*, hybrid: bool, mla: bool) -> AttentionKind:
    """A hybrid model is hybrid whatever its attention layers are."""
    return AttentionKind.hybrid if hybrid else AttentionKind.mla if mla else AttentionKind.dense


MEASURED, DOCUMENTED, UPSTREAM_CODE = "measured", "documented", "upstream code"
"""How a row is known: run (on a GPU, cited), documented by the vendor as run, or read in upstream
code only (deploys with a warning)."""

_LIBFABRIC = ("LIBFABRIC",)
_DS = ((SSM_CONV_LAYOUT_VARIABLE, SSM_CONV_LAYOUT_DS),)
"""Required for a hybrid model (``vllm-mamba-conv-layout``). vLLM reads it only for Mamba-style
layers (``vllm/model_executor/layers/mamba/mamba_utils.py`` ``is_conv_state_dim_first``), so every row
sets it: a model change then leaves the pods as they are and reaches the replicas in place
(KubeRay resubmits only the Serve config)."""


@dataclass(frozen=True)
class KvPathRow:
    attention: AttentionKind
    gpudirect_rdma: bool
    kv_buffer_device: str
    backends: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    known: str
    """:data:`MEASURED`, :data:`DOCUMENTED` or :data:`UPSTREAM_CODE`."""
    basis: str


KV_PATHS: tuple[KvPathRow, ...] = (
    KvPathRow(AttentionKind.dense, True, "cuda", _LIBFABRIC, _DS, DOCUMENTED,
              "AWS's NIXL-on-EFA guide runs kv_buffer_device cuda with the LIBFABRIC backend on GPUDirect RDMA types "
              "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nixl.html, step 7)"),
    KvPathRow(AttentionKind.dense, False, "cpu", _LIBFABRIC, _DS, MEASURED,
              "the host buffer (vLLM registers host memory with NIXL and copies the blocks, 'cpu kv buffer for xfer, "
              "used when device memory can not be registered under nixl') ran a dense Llama on an H100 with vLLM "
              "0.26.0 and NIXL 1.3.1 over UCX and LIBFABRIC/tcp, token for token equal to colocated greedy; "
              "host memory registers with any libfabric provider"),
    KvPathRow(AttentionKind.mla, True, "cuda", _LIBFABRIC, _DS, UPSTREAM_CODE,
              "GPU memory as for a dense model; vLLM's NixlConnector registers an MLA layer's one latent tensor "
              "(base_worker.py use_mla); not run here"),
    KvPathRow(AttentionKind.mla, False, "cpu", _LIBFABRIC, _DS, UPSTREAM_CODE,
              "the host buffer as for a dense model; initialize_host_xfer_buffer's use_mla branch copies one latent "
              "tensor per layer; not run here"),
    KvPathRow(AttentionKind.hybrid, True, "cuda", _LIBFABRIC, _DS, DOCUMENTED,
              "GPU memory over LIBFABRIC as AWS's guide runs it (efa-start-nixl.html, step 7), and a hybrid model on "
              "GPU memory with VLLM_SSM_CONV_STATE_LAYOUT=DS ran on an H100 (vLLM 0.26.0, NIXL 1.3.1, UCX; 16 of 16 "
              "tokens equal to colocated)"),
    KvPathRow(AttentionKind.hybrid, False, "cuda", _LIBFABRIC, _DS, UPSTREAM_CODE,
              "the host buffer fails for hybrid models (vllm-hybrid-host-buffer), so GPU memory with "
              "VLLM_SSM_CONV_STATE_LAYOUT=DS (ran over UCX on an H100); over LIBFABRIC/efa without GPUDirect RDMA "
              "NIXL registers it and libfabric's efa provider copies it through host memory (upstream code, "
              "docs/kv-path.md); never run on EFA"),
)


def row_for(kind: AttentionKind, gpudirect_rdma: bool) -> KvPathRow:
    return next(r for r in KV_PATHS if r.attention is kind and r.gpudirect_rdma is gpudirect_rdma)


@dataclass(frozen=True)
class KvPath:
    """The KV path one deployment renders: the table's row with the user's ``nixl`` overrides."""

    row: KvPathRow
    kv_buffer_device: str
    backends: tuple[str, ...]
    env: Mapping[str, str]
    stack: ImageStack | None
    facts: Facts
    overridden: tuple[str, ...] = ()
    """The ``nixl`` fields the user set (they win over the table)."""
    defects: tuple[Defect, ...] = field(default=())
    """The upstream defects that apply, refusals first."""

    @property
    def refusals(self) -> tuple[Defect, ...]:
        return tuple(d for d in self.defects if d.action == REFUSE)

    @property
    def risks(self) -> tuple[Defect, ...]:
        return tuple(d for d in self.defects if d.action != REFUSE)

    @property
    def known(self) -> str:
        """How the rendered path is known: the row's, unless the user changed it."""
        return self.row.known if not self.overridden else "set by the user"

    def summary(self) -> dict[str, object]:
        """``plan --json``'s ``kv_path``."""
        return {
            "attention": self.row.attention.value,
            "gpudirect_rdma": self.row.gpudirect_rdma,
            "kv_buffer_device": self.kv_buffer_device,
            "backends": list(self.backends),
            "env": dict(self.env),
            "kv_connector": self.facts.kv_connector,
            "vllm": self.stack.vllm if self.stack else None,
            "nixl": self.stack.nixl if self.stack else None,
            "known": self.known,
            "basis": self.row.basis,
            "overridden": list(self.overridden),
            "defects_checked": [
                {"key": d.key, "action": d.action, "applies": d in self.defects, "affected": d.affected,
                 "source": d.source}
                for d in upstream_defects.KV_PATH_DEFECTS
            ],
        }


def resolve(kind: AttentionKind, gpudirect_rdma: bool, stack: ImageStack | None, *, disaggregated: bool,
            kv_buffer_device: str | None = None, backends: Iterable[str] | None = None,
            libfabric_provider: str = EXPECTED_PROVIDER) -> KvPath:
    """The table's path for ``kind`` with GPUDirect RDMA on both legs or not, the user's
    ``kv_buffer_device`` and ``backends`` (None: the table's) applied, and the defects it meets."""
    row = row_for(kind, gpudirect_rdma)
    overridden = tuple(name for name, given in (("nixl.kv_buffer_device", kv_buffer_device),
                                                ("nixl.backends", backends)) if given is not None)
    chosen_buffer = kv_buffer_device or row.kv_buffer_device
    chosen_backends = tuple(backends) if backends is not None else row.backends
    env = dict(row.env)
    facts = Facts(attention=kind.value, disaggregated=disaggregated, kv_buffer_device=chosen_buffer,
                  backends=chosen_backends, libfabric_provider=libfabric_provider, gpudirect_rdma=gpudirect_rdma,
                  worker_env=env, kv_connector=PULL_KV_CONNECTOR,
                  vllm=stack.vllm if stack else None, nixl=stack.nixl if stack else None)
    return KvPath(row=row, kv_buffer_device=chosen_buffer, backends=chosen_backends, env=env, stack=stack,
                  facts=facts, overridden=overridden, defects=tuple(upstream_defects.applicable(facts)))


NO_PATH_INSTEAD = ("topology: colocated (no KV transfer), a P-series type on both legs (GPUDirect RDMA), or a dense "
                   "model")
"""What to do when the table's own choice meets a refusal (no KV path known for the deployment)."""

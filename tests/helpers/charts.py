"""The cdk8s chart scenarios and the upstream checkers the chart tests use (the fixtures of
tests/cdk8s_charts/conftest.py hand out the scenarios, each built once per session).

The checkers are the upstream ones: the KubeRay v1.4.0 CRD schema (closed, as
``kubectl apply --validate=strict`` would be), Ray 2.58's ``LLMConfig`` and
``ServeDeploySchema``, and kubernetes-validate's Kubernetes 1.35 schemas.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import cdk8s
import yaml

from ray_llm_eks.cdk8s_charts import ServingCharts, build_serving_charts
from helpers.pins import unpinned
from ray_llm_eks.base.deployment import Deployment, Versions
from ray_llm_eks.base.placement import DECODE, PREFILL
from ray_llm_eks.base.pools import WorkerPool
from ray_llm_eks.base.serving import (
    DisaggregationSpec,
    EndpointType,
    ImageSpec,
    Leg,
    ModelSpec,
    NixlSpec,
    SecurityProfile,
    ServiceSettings,
    Topology,
)

DATA = Path(__file__).resolve().parents[1] / "data"
CRD_FILE_V1_4_0 = DATA / "ray.io_rayservices.yaml"
CRD_FILE_V1_5_1 = DATA / "kuberay-v1.5.1" / "ray.io_rayservices.yaml"
CRD_FILE = CRD_FILE_V1_5_1
"""The default operator's (``infra.DEFAULT_KUBERAY_VERSION``) RayService CRD."""

# kubernetes-validate 1.37 ships schemas for 1.32 .. 1.37; EKS here runs 1.35, the newest <= 1.35.
KUBERNETES_VERSION = "1.35.0"

PINNED_REVISION = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "ab" * 32

def leg(role: str, *, tensor_parallel_size: int | None = None, target_ongoing_requests: float | None = None,
        **pool: Any) -> Leg:
    """A leg built directly from the model's parts: its pool's fields beside its own, as a test writes it."""
    return Leg(WorkerPool(role, **pool), tensor_parallel_size, target_ongoing_requests)


def pair(**pool: Any) -> dict[str, Leg]:
    """Both legs on the same pool settings (``Deployment(**pair(min_size=2, ...))``)."""
    return {role: leg(role, **pool) for role in (PREFILL, DECODE)}


MODEL_ENGINE_KWARGS = {"max_num_seqs": 64, "override_generation_config": {"temperature": 0.6, "top_p": 0.95}}
PREFILL_ENGINE_KWARGS = {"enable_prefix_caching": True, "override_generation_config": {"temperature": 0.0}}
"""The escape hatch (``base.engine_args``) in the hardened scenario: both legs' and prefill's own, nested."""

_LLAMA = ModelSpec(source="meta-llama/Llama-3.1-8B-Instruct", served_name="llama-8b", tensor_parallel_size=2)
_TWO_G6_12XL = pair(instance_type="g6.12xlarge", min_size=2, desired_size=2, max_size=2)

SCENARIOS: dict[str, Deployment] = {
    "disaggregated": unpinned(),
    "colocated": unpinned(topology=Topology.colocated),
    # Everything optional switched on: pinned revision and digest, user engine arguments, ipc-lock, internal NLB, the NIXL settings
    # written out (the KV-path table's own choice for a hybrid model on g6: base/kv_path.py).
    "hardened": unpinned(
        model=ModelSpec(revision=PINNED_REVISION, engine_kwargs=MODEL_ENGINE_KWARGS),
        prefill=Leg(WorkerPool(PREFILL), engine_kwargs=PREFILL_ENGINE_KWARGS),
        image=ImageSpec(digest=DIGEST),
        serving=ServiceSettings(security_profile=SecurityProfile.ipc_lock, endpoint=EndpointType.internal_nlb,
                                namespace="llm", service_name="qwen", client_cidrs=("10.50.0.0/16",),
                                client_namespaces=("apps",)),
        nixl=NixlSpec(kv_buffer_device="cuda", backends=("LIBFABRIC",)),
        # Strict requires the device plugins' images by digest too (shaped, not real: tests/constructs/test_cluster_pins.py).
        versions=Versions(nvidia_device_plugin_image_digest="sha256:" + "d" * 64,
                          efa_device_plugin_image_digest="sha256:" + "e" * 64),
        strict=True,
    ),
    # Four L4s per node, two tensor-parallel replicas per node, two nodes per leg, a non-hybrid model.
    "multi_gpu": unpinned(model=_LLAMA, **_TWO_G6_12XL),
    "multi_gpu_colocated": unpinned(topology=Topology.colocated, model=_LLAMA, **_TWO_G6_12XL),
    # Conditional disaggregation: prompts under 1,024 tokens prefilled on decode (ray_llm_eks/pd).
    "conditional": unpinned(disaggregation=DisaggregationSpec(min_prompt_tokens=1024)),
}
"""The chart scenarios, built directly from the model's parts (the YAML adapter is tested in
tests/test_config.py)."""


@dataclass
class Rendered:
    """One scenario: its config, its charts, and the synthesized objects of each chart."""

    config: Deployment
    charts: ServingCharts
    objects: dict[str, list[dict[str, Any]]]  # chart id -> synthesized objects

    def all_objects(self) -> Iterator[dict[str, Any]]:
        for objects in self.objects.values():
            yield from objects

    def one(self, kind: str) -> dict[str, Any]:
        found = [o for o in self.all_objects() if o["kind"] == kind]
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    @property
    def ray_service(self) -> dict[str, Any]:
        return self.one("RayService")

    @property
    def serve_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.ray_service["spec"]["serveConfigV2"])

    @property
    def application(self) -> dict[str, Any]:
        (application,) = self.serve_config["applications"]
        return application

    @property
    def cluster(self) -> dict[str, Any]:
        return self.ray_service["spec"]["rayClusterConfig"]

    def worker_group(self, name: str) -> dict[str, Any]:
        (group,) = [g for g in self.cluster["workerGroupSpecs"] if g["groupName"] == name]
        return group

    def worker_container(self, name: str) -> dict[str, Any]:
        (container,) = self.worker_group(name)["template"]["spec"]["containers"]
        return container

    @property
    def head_group(self) -> dict[str, Any]:
        return self.cluster["headGroupSpec"]

    @property
    def head_container(self) -> dict[str, Any]:
        (container,) = self.head_group["template"]["spec"]["containers"]
        return container


def render(config: Deployment) -> Rendered:
    charts = build_serving_charts(cdk8s.App(), config.specs().serving)
    objects = {chart.node.id: list(cdk8s.Testing.synth(chart)) for chart in charts.charts}
    return Rendered(config=config, charts=charts, objects=objects)


def _close(schema: Any) -> None:
    """Reject unknown fields like ``kubectl --validate=strict``: every object schema that lists
    properties and does not preserve unknown fields gets ``additionalProperties: false``."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in schema
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _close(value)
    elif isinstance(schema, list):
        for item in schema:
            _close(item)


@functools.cache
def crd_document(crd_file: Path) -> dict:
    """A CRD file parsed, once per process: a KubeRay CRD is about 1 MB of YAML, about a second of
    CPU to load even with libyaml, and five tests on a worker read the same one. Read-only."""
    return yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def strict_validator(crd_file: Path):
    """The CRD's ``v1`` schema, closed like ``kubectl --validate=strict`` (one validator per CRD file
    and process: a jsonschema validator holds no state between ``iter_errors`` calls)."""
    import jsonschema

    (version,) = [v for v in crd_document(crd_file)["spec"]["versions"] if v["name"] == "v1"]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    _close(schema)
    return jsonschema.Draft7Validator(schema)

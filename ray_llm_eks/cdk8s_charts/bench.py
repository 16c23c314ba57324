"""The benchmark as a Kubernetes Job next to the service: ``ray-llm-eks bench --emit-job``.

A run from a laptop measures the load balancer as much as the service. This
Job runs AIPerf on the system node and sends to the OpenAI Service's cluster address, so the
measurement path is the one in-cluster clients take. Not part of the deployment: rendered on
demand, applied with ``kubectl apply``, deleted when the results are copied.

- ConfigMap ``<job>``: the modules of :mod:`ray_llm_eks.bench` (mounted as the package
  ``rayllmeks_bench``), ``bench.json`` (the run's settings) and, for a trace replay, the trace
  (at most :data:`MAX_TRACE_BYTES`).
- Job ``<job>``: the serving image's Python (already on the node: nothing new to pull) installs
  AIPerf into a virtualenv (or, without the venv module, a ``pip --target`` directory) on an
  ``emptyDir`` at start (the NAT gateway's way out, as the model
  download takes), runs the bench into ``/work/out``, then waits until ``/work/out/.fetched``
  exists (``kubectl cp`` the results, then ``touch`` it) or ``hold_seconds`` pass.

``<job>`` is ``<service>-bench-<hash of the settings>``: a rerun with other settings is a new Job.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import cdk8s
from cdk8s_plus_35 import k8s

from ..bench import bundle
from ..bench.runner import AIPERF_VERSION
from ..base import sizing
from ..base.serving import SERVE_PORT, ServingSpec
from ..base.wire import BENCH_COMPONENT, COMPONENT_LABEL, INSTANCE_LABEL
from .containers import guaranteed, locked_down, non_root
from .labels import bench_job_prefix
from .serving import openai_service_name

PROGRAM_DIR = "/opt/rayllmeks-bench"
WORK_DIR = "/work"
OUT_DIR = f"{WORK_DIR}/out"
SETTINGS_FILE = "bench.json"
TRACE_FILE = "trace.jsonl"
MAX_TRACE_BYTES = 800_000
"""A ConfigMap holds at most 1 MiB in all; the program's modules (about 150 kB with the gate's
modules the utilization reader shares, :data:`..bench.bundle.SHARED`) and settings take the rest."""
FETCHED_MARKER = ".fetched"
AIPERF_IN_POD = f"{WORK_DIR}/bin/aiperf"
DEFAULT_HOLD_SECONDS = 3600


def bench_job_name(service_name: str, settings: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return f"{bench_job_prefix(service_name)}{digest}"


def in_cluster_url(spec: ServingSpec) -> str:
    """The OpenAI Service's cluster address: what pods in the cluster send to."""
    return f"http://{openai_service_name(spec.service_name)}.{spec.namespace}.svc:{SERVE_PORT}"


def _script(hold_seconds: int) -> str:
    # A virtualenv where the image's Python has the venv module, else pip --target: either way
    # AIPerf and its dependencies stay out of the image's own site-packages (vLLM's pins).
    # A failed bench still holds, so its log and partial results can be copied.
    pin = f"aiperf=={AIPERF_VERSION}"
    pip = "--quiet --disable-pip-version-check --no-cache-dir"
    return "\n".join([
        "set -u",
        'PY="$(command -v python3 || command -v python)"',
        f"mkdir -p {WORK_DIR}/bin {OUT_DIR}",
        f"echo '[bench] installing {pin}'",
        f'if "$PY" -m venv {WORK_DIR}/venv 2>/dev/null; then',
        f"  {WORK_DIR}/venv/bin/pip install {pip} '{pin}' || exit 2",
        f"  ln -sf {WORK_DIR}/venv/bin/aiperf {AIPERF_IN_POD}",
        "else",
        f"  \"$PY\" -m pip install {pip} --target {WORK_DIR}/site '{pin}' || exit 2",
        f"  printf '#!/bin/sh\\nPYTHONPATH={WORK_DIR}/site exec %s -m aiperf \"$@\"\\n' \"$PY\" > {AIPERF_IN_POD}",
        # The bench's tokenizer check runs in AIPerf's Python: a python beside the aiperf wrapper.
        f"  printf '#!/bin/sh\\nPYTHONPATH={WORK_DIR}/site exec %s \"$@\"\\n' \"$PY\" > {WORK_DIR}/bin/python",
        f"  chmod +x {AIPERF_IN_POD} {WORK_DIR}/bin/python",
        "fi",
        f'"$PY" -m {bundle.IN_CLUSTER_PACKAGE} {PROGRAM_DIR}/{SETTINGS_FILE} {OUT_DIR}',
        "code=$?",
        f"echo \"[bench] exit $code; copy {OUT_DIR} with kubectl cp, then touch {OUT_DIR}/{FETCHED_MARKER}\"",
        f"end=$(( $(date +%s) + {hold_seconds} ))",
        f'while [ ! -e {OUT_DIR}/{FETCHED_MARKER} ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done',
        "exit $code",
    ])


class BenchJobChart(cdk8s.Chart):
    """The ConfigMap and Job of one benchmark run (see the module docstring)."""

    def __init__(self, scope: cdk8s.App, construct_id: str, *, spec: ServingSpec, settings: dict[str, Any],
                 hold_seconds: int = DEFAULT_HOLD_SECONDS, trace_text: str | None = None) -> None:
        super().__init__(scope, construct_id, namespace=spec.namespace)
        settings = {**settings, "aiperf": AIPERF_IN_POD}
        extra = {}
        if trace_text is not None:
            settings["trace"] = f"{PROGRAM_DIR}/{TRACE_FILE}"
            extra[TRACE_FILE] = trace_text
        self.job_name = bench_job_name(spec.service_name, {**settings, **extra})
        labels = {INSTANCE_LABEL: spec.service_name, COMPONENT_LABEL: BENCH_COMPONENT}
        program = bundle.files()
        k8s.KubeConfigMap(self, "Program", metadata=k8s.ObjectMeta(name=self.job_name, labels=labels),
                          data={**program, SETTINGS_FILE: json.dumps(settings, indent=2, sort_keys=True), **extra})
        items = [k8s.KeyToPath(key=f, path=f"{bundle.IN_CLUSTER_PACKAGE}/{f}") for f in sorted(program)]
        items += [k8s.KeyToPath(key=f, path=f) for f in (SETTINGS_FILE, *extra)]
        k8s.KubeJob(self, "Job", metadata=k8s.ObjectMeta(name=self.job_name, labels=labels), spec=k8s.JobSpec(
            backoff_limit=0,
            template=k8s.PodTemplateSpec(
                metadata=k8s.ObjectMeta(labels=labels),
                spec=k8s.PodSpec(
                    automount_service_account_token=False,  # it talks to the service, never to the API
                    restart_policy="Never",
                    node_selector=spec.system.labels,
                    security_context=non_root(),
                    containers=[k8s.Container(
                        name="bench", image=spec.image_uri, command=["/bin/sh", "-c", _script(hold_seconds)],
                        env=[k8s.EnvVar(name="PYTHONPATH", value=PROGRAM_DIR),
                             k8s.EnvVar(name="PYTHONDONTWRITEBYTECODE", value="1"),
                             k8s.EnvVar(name="PYTHONUNBUFFERED", value="1"),
                             # AIPerf's tokenizer download lands on the emptyDir.
                             k8s.EnvVar(name="HOME", value=WORK_DIR)],
                        resources=guaranteed(sizing.BENCH_JOB),
                        security_context=locked_down(),
                        volume_mounts=[k8s.VolumeMount(name="program", mount_path=PROGRAM_DIR, read_only=True),
                                       k8s.VolumeMount(name="work", mount_path=WORK_DIR),
                                       k8s.VolumeMount(name="tmp", mount_path="/tmp")],
                    )],
                    volumes=[k8s.Volume(name="program", config_map=k8s.ConfigMapVolumeSource(name=self.job_name,
                                                                                             items=items)),
                             k8s.Volume(name="work", empty_dir=k8s.EmptyDirVolumeSource(
                                 size_limit=k8s.Quantity.from_string("4Gi"))),
                             k8s.Volume(name="tmp", empty_dir=k8s.EmptyDirVolumeSource(
                                 size_limit=k8s.Quantity.from_string("1Gi")))],
                ),
            ),
        ))


def render_bench_job(spec: ServingSpec, settings: dict[str, Any], hold_seconds: int = DEFAULT_HOLD_SECONDS,
                     trace_text: str | None = None) -> tuple[str, str]:
    """The Job's name and its manifests as one YAML document stream (the trace, if any, rides in the ConfigMap)."""
    app = cdk8s.App()
    chart = BenchJobChart(app, "bench", spec=spec, settings=settings, hold_seconds=hold_seconds, trace_text=trace_text)
    return chart.job_name, app.synth_yaml()

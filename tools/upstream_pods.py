"""Write tests/data/upstream_pods/: the pod templates upstream ships for everything the stack runs
beside its own pods (EKS's add-ons, the Helm charts it installs), at the versions it pins, so
tests/cdk8s_charts/test_admission_policy_upstream_pods.py can put each through the admission policy as its
controller would create it.

Each file holds one workload (a DaemonSet's or a Deployment's ``spec.template``), taken from:

- the EKS add-on manifests eksctl ships (``eksctl-io/eksctl`` ``pkg/addons/default/assets/``:
  CoreDNS for the stack's Kubernetes version, aws-node with its network policy agent), and
  kube-proxy's DaemonSet as eksctl keeps it from a real EKS cluster
  (``pkg/addons/default/testdata/sample-1.25.json``: eksctl ships no kube-proxy manifest);
- the Helm charts the stack installs, rendered by :func:`ray_llm_eks.gitops.helm_template` (the
  kubectl layer's helm, ``--kube-version`` 1.35) with the values the stack gives them
  (``ray-llm-eks render`` writes the same ``helm/<release>/values.yaml``): the KubeRay operator,
  the NVIDIA and EFA device plugins, Cluster Autoscaler (the autoscaled build's values);
- the charts EKS builds its add-ons from, with the add-on's configuration: the Pod Identity agent
  (``aws/eks-pod-identity-agent`` ``charts/eks-pod-identity-agent``, its newest tag: the stack
  takes EKS's default build) and the CloudWatch Observability add-on
  (``aws-observability/helm-charts`` ``charts/amazon-cloudwatch-observability`` at the add-on's
  version, with ``constructs.observability.ADDON_CONFIGURATION``). That chart renders Fluent Bit
  and the operator's Deployment itself, but the agent and the DCGM exporter as custom resources
  (``AmazonCloudWatchAgent``, ``DcgmExporter``); the operator of the chart's ``manager.image.tag``
  makes their DaemonSets, and :func:`cloudwatch_agent_template` / :func:`dcgm_exporter_template`
  build the pod template as its code does (each line cites it).

Where the pinned version is not in the mirror, :data:`NEAREST` names the version taken instead,
and the file says so (``source.pinned`` beside ``source.ref``).

Run (a maintainer's tool; CI reads only its output)::

    .venv/bin/python tools/upstream_pods.py --mirror DIR

``DIR`` holds one git clone (bare or not) per repository, as ``DIR/<owner>+<name>`` or
``DIR/<owner>+<name>/repo`` (``git clone --bare https://github.com/<owner>/<name>
DIR/<owner>+<name>``), with the tags. The files are replaced whole.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET = ROOT / "tests" / "data" / "upstream_pods"
COMMAND = ".venv/bin/python tools/upstream_pods.py --mirror DIR"
NEAREST = {
    # NVIDIA/k8s-device-plugin: the mirror's newest tag and release-0.20 branch are 0.20.0.
    ("NVIDIA/k8s-device-plugin", "v0.20.1"): "v0.20.0",
}
WORKLOADS = ("DaemonSet", "Deployment")


@dataclass(frozen=True)
class Pod:
    """One workload's pod template and where it came from."""

    file: str
    what: str
    kind: str
    namespace: str
    name: str
    template: dict
    source: dict
    installed_by: dict
    """``{"addon": name}`` or ``{"helm": chart}``: which part of the stack puts it on the cluster."""


@dataclass
class Mirror:
    root: Path
    _dirs: dict[str, Path] = field(default_factory=dict)

    def git_dir(self, repo: str) -> Path:
        if repo not in self._dirs:
            base = self.root / repo.replace("/", "+")
            for candidate in (base / "repo" / ".git", base / "repo", base / ".git", base):
                if (candidate / "HEAD").is_file():
                    self._dirs[repo] = candidate
                    break
            else:
                sys.exit(f"{repo}: no git directory at {base} (clone it: git clone --bare "
                         f"https://github.com/{repo} {base})")
        return self._dirs[repo]

    def git(self, repo: str, *args: str, binary: bool = False):
        result = subprocess.run(["git", "--git-dir", str(self.git_dir(repo)), *args], capture_output=True,
                                check=False)
        if result.returncode != 0:
            raise LookupError(f"{repo}: git {' '.join(args)}: {result.stderr.decode().strip()}")
        return result.stdout if binary else result.stdout.decode()

    def has(self, repo: str, ref: str) -> bool:
        try:
            self.git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
            return True
        except LookupError:
            return False

    def commit(self, repo: str, ref: str) -> str:
        return self.git(repo, "rev-parse", f"{ref}^{{commit}}").strip()

    def show(self, repo: str, ref: str, path: str) -> str:
        return self.git(repo, "show", f"{ref}:{path}")

    def extract(self, repo: str, ref: str, path: str, into: Path) -> Path:
        archive = self.git(repo, "archive", "--format=tar", ref, path, binary=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
        return into / path

    def newest_tag(self, repo: str, pattern: str) -> str:
        return self.git(repo, "tag", "--list", pattern, "--sort=-v:refname").split()[0]

    def chart_commit(self, repo: str, chart_dir: str, version: str) -> str:
        """The newest commit whose ``Chart.yaml`` has ``version`` (charts of repositories that tag none)."""
        for commit in self.git(repo, "log", "--format=%H", "HEAD", "--", f"{chart_dir}/Chart.yaml").split():
            try:
                found = yaml.safe_load(self.show(repo, commit, f"{chart_dir}/Chart.yaml"))
            except LookupError:
                continue
            if str(found.get("version")) == version:
                return commit
        raise LookupError(f"{repo}: no commit with {chart_dir}/Chart.yaml version {version}")


def _source(mirror: Mirror, repo: str, ref: str, path: str, pinned: str | None = None, **extra: Any) -> dict:
    source = {"repo": repo, "ref": ref, "commit": mirror.commit(repo, ref), "path": path}
    if pinned is not None and pinned != ref:
        source["pinned"] = pinned
    return {**source, **extra}


def _workloads(objects) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects if o and o.get("kind") in WORKLOADS}


def _pod(file: str, what: str, workload: dict, namespace: str, source: dict, installed_by: dict) -> Pod:
    template = json.loads(json.dumps(workload["spec"]["template"]))
    (template.get("metadata") or {}).pop("creationTimestamp", None)
    return Pod(file, what, workload["kind"], namespace, workload["metadata"]["name"], template, source, installed_by)


# --- EKS add-ons as eksctl ships them ---------------------------------------------------------------

EKSCTL = "eksctl-io/eksctl"


def eks_addons(mirror: Mirror, kubernetes_version: str) -> list[Pod]:
    ref = "HEAD"
    pods = []
    coredns = f"pkg/addons/default/assets/coredns-{kubernetes_version}.json"
    found = _workloads(json.loads(mirror.show(EKSCTL, ref, coredns))["items"])
    pods.append(_pod("coredns", "CoreDNS (EKS add-on coredns)", found[("Deployment", "coredns")], "kube-system",
                     _source(mirror, EKSCTL, ref, coredns), {"addon": "coredns"}))
    aws_node = "pkg/addons/default/assets/aws-node.yaml"
    found = _workloads(yaml.safe_load_all(mirror.show(EKSCTL, ref, aws_node)))
    pods.append(_pod("aws-node", "VPC CNI with its network policy agent (EKS add-on vpc-cni)",
                     found[("DaemonSet", "aws-node")], "kube-system", _source(mirror, EKSCTL, ref, aws_node),
                     {"addon": "vpc-cni"}))
    kube_proxy = "pkg/addons/default/testdata/sample-1.25.json"
    found = _workloads(json.loads(mirror.show(EKSCTL, ref, kube_proxy))["items"])
    pods.append(_pod("kube-proxy", "kube-proxy (EKS add-on kube-proxy; an EKS 1.25 cluster's DaemonSet, the newest "
                     "eksctl keeps)", found[("DaemonSet", "kube-proxy")], "kube-system",
                     _source(mirror, EKSCTL, ref, kube_proxy,
                             pinned=f"EKS's default build for Kubernetes {kubernetes_version} (not in eksctl)"),
                     {"addon": "kube-proxy"}))
    return pods


# --- Helm charts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    repo: str
    path: str
    release: str
    chart: str
    namespace: str
    pinned: str
    ref: Callable[[Mirror, str], str]
    """The git ref of the pinned version (given the pin)."""
    installed_by: dict


def _render(mirror: Mirror, chart: Chart, values: dict, helm: Path) -> tuple[list[dict], dict]:
    from ray_llm_eks.constructs.kubernetes_side import HelmRelease
    from ray_llm_eks.gitops import helm_template

    ref = chart.ref(mirror, chart.pinned)
    if not mirror.has(chart.repo, ref) and (chart.repo, ref) in NEAREST:
        ref = NEAREST[(chart.repo, ref)]
    with tempfile.TemporaryDirectory() as scratch:
        folder = mirror.extract(chart.repo, ref, chart.path, Path(scratch))
        version = str(yaml.safe_load((folder / "Chart.yaml").read_text())["version"])
        values_file = Path(scratch) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values, sort_keys=False))
        release = HelmRelease(release=chart.release, chart=chart.chart, repository="", version=version,
                              namespace=chart.namespace, values=values)
        objects = helm_template(helm, release, values_file, folder)
    source = _source(mirror, chart.repo, ref, chart.path, release=chart.release, chart_version=version,
                     values=values)
    if chart.pinned.removeprefix("v") != version.removeprefix("v"):
        source["pinned"] = chart.pinned
    return objects, source


def _tag(prefix: str) -> Callable[[Mirror, str], str]:
    return lambda mirror, version: f"{prefix}{version.removeprefix('v')}"


def helm_charts(mirror: Mirror, values: dict[str, dict], helm: Path) -> list[Pod]:
    from ray_llm_eks.base import infrastructure as infra
    from ray_llm_eks.constructs import autoscaler

    charts = {
        "kuberay-operator": Chart("ray-project/kuberay", "helm-chart/kuberay-operator", infra.KUBERAY_RELEASE,
                                  "kuberay-operator", infra.KUBERAY_NAMESPACE, infra.DEFAULT_KUBERAY_VERSION,
                                  _tag("v"), {"helm": "kuberay-operator"}),
        "nvidia-device-plugin": Chart("NVIDIA/k8s-device-plugin", "deployments/helm/nvidia-device-plugin",
                                      infra.NVIDIA_DEVICE_PLUGIN_RELEASE, "nvidia-device-plugin", "kube-system",
                                      infra.DEFAULT_NVIDIA_DEVICE_PLUGIN_VERSION, _tag("v"),
                                      {"helm": "nvidia-device-plugin"}),
        "aws-efa-k8s-device-plugin": Chart(
            "aws/eks-charts", "stable/aws-efa-k8s-device-plugin", "aws-efa-k8s-device-plugin",
            "aws-efa-k8s-device-plugin", "kube-system", infra.DEFAULT_EFA_DEVICE_PLUGIN_VERSION,
            lambda m, v: m.chart_commit("aws/eks-charts", "stable/aws-efa-k8s-device-plugin", v),
            {"helm": "aws-efa-k8s-device-plugin"}),
        "cluster-autoscaler": Chart("kubernetes/autoscaler", "cluster-autoscaler/charts/cluster-autoscaler",
                                    autoscaler.CHART, autoscaler.CHART, autoscaler.NAMESPACE,
                                    autoscaler.DEFAULT_CHART_VERSION, _tag("cluster-autoscaler-chart-"),
                                    {"helm": "cluster-autoscaler"}),
    }
    pods = []
    for name, chart in charts.items():
        objects, source = _render(mirror, chart, values[name], helm)
        for (kind, workload_name), workload in sorted(_workloads(objects).items()):
            pods.append(_pod(workload_name, f"{name} chart {source['chart_version']}", workload, chart.namespace,
                             source, chart.installed_by))
    return pods


# --- EKS add-ons built from charts --------------------------------------------------------------------

POD_IDENTITY = "aws/eks-pod-identity-agent"
OBSERVABILITY_CHARTS = "aws-observability/helm-charts"
OPERATOR = "aws/amazon-cloudwatch-agent-operator"


def pod_identity_agent(mirror: Mirror, helm: Path) -> list[Pod]:
    tag = mirror.newest_tag(POD_IDENTITY, "v*")
    chart = Chart(POD_IDENTITY, "charts/eks-pod-identity-agent", "eks-pod-identity-agent", "eks-pod-identity-agent",
                  "kube-system", tag, lambda m, v: v, {"addon": "eks-pod-identity-agent"})
    objects, source = _render(mirror, chart, {}, helm)
    source.pop("pinned", None)  # the chart's own version, not the tag: the stack takes EKS's default build
    (workload,) = _workloads(objects).values()
    return [_pod("eks-pod-identity-agent", f"EKS Pod Identity agent (chart {source['chart_version']}, tag {tag})",
                 workload, "kube-system", source, {"addon": "eks-pod-identity-agent"})]


def _operator_labels(cr: dict, component: str) -> dict:
    """``manifestutils.Labels`` (``internal/manifests/manifestutils/labels.go``): the instance's
    labels, the selector labels, the image's tag as the version and the instance's name."""
    image = cr["spec"]["image"].split(":")
    return {**cr["metadata"].get("labels", {}), "app.kubernetes.io/managed-by": "amazon-cloudwatch-agent-operator",
            "app.kubernetes.io/instance": f"{cr['metadata']['namespace']}.{cr['metadata']['name']}",
            "app.kubernetes.io/part-of": "amazon-cloudwatch-agent", "app.kubernetes.io/component": component,
            "app.kubernetes.io/version": image[-1] if len(image) == 2 else "latest",
            "app.kubernetes.io/name": cr["metadata"]["name"]}


def cloudwatch_agent_template(cr: dict) -> dict:
    """The pod template the operator makes of an ``AmazonCloudWatchAgent`` in daemonset mode
    (amazon-cloudwatch-agent-operator ``internal/manifests/collector/daemonset.go``, ``container.go``,
    ``volume.go``, ``utils.go``); ports, probes and args, which it derives from the agent's
    configuration, are left out (none sets a host port: ``portMapToContainerPortList``)."""
    spec = cr["spec"]
    container = {"name": "otc-container", "image": spec["image"],  # naming.Container()
                 # getVolumeMounts: the config map at /etc/cwagentconfig (Linux), then the CR's mounts.
                 "volumeMounts": [{"name": "otc-internal", "mountPath": "/etc/cwagentconfig"},
                                  *spec.get("volumeMounts", [])],
                 "env": [*spec.get("env", []), {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                     "fieldPath": "metadata.name"}}}]}
    for key in ("resources", "securityContext", "imagePullPolicy", "workingDir", "envFrom", "lifecycle"):
        if key in spec:
            container[key] = spec[key]
    pod_spec = {
        "serviceAccountName": spec.get("serviceAccount") or f"{cr['metadata']['name']}",
        "containers": [*spec.get("additionalContainers", []), container],
        # Volumes(): the config map volume, then the CR's.
        "volumes": [{"name": "otc-internal", "configMap": {"name": f"{cr['metadata']['name']}"}},
                    *spec.get("volumes", [])],
        # getDNSPolicy: ClusterFirstWithHostNet with hostNetwork.
        "dnsPolicy": "ClusterFirstWithHostNet" if spec.get("hostNetwork") else "ClusterFirst",
    }
    for key, field_ in (("initContainers", "initContainers"), ("tolerations", "tolerations"),
                        ("nodeSelector", "nodeSelector"), ("hostNetwork", "hostNetwork"),
                        ("securityContext", "podSecurityContext"), ("priorityClassName", "priorityClassName"),
                        ("affinity", "affinity")):
        if field_ in spec:
            pod_spec[key] = spec[field_]
    return {"metadata": {"labels": _operator_labels(cr, "amazon-cloudwatch-agent")}, "spec": pod_spec}


def dcgm_exporter_template(cr: dict) -> dict:
    """The pod template the operator makes of a ``DcgmExporter`` (``internal/manifests/dcgmexporter/
    daemonset.go``, ``container.go``, ``volume.go``; ``configmap.go`` names the config map)."""
    spec = cr["spec"]
    container = {"name": "dcgm-exporter", "image": spec["image"],
                 "ports": [{k: v for k, v in (("name", p.get("name")), ("containerPort", p["port"]),
                                              ("protocol", p.get("protocol"))) if v is not None}
                           for p in spec.get("ports", [])],
                 "env": [*spec.get("env", []), {"name": "DCGM_EXPORTER_COLLECTORS",
                                                "value": "/etc/dcgm-exporter/dcp-metrics-included.csv"}],
                 "volumeMounts": [{"name": "dcgm-config", "mountPath": "/etc/dcgm-exporter"},
                                  *spec.get("volumeMounts", [])]}
    for key in ("resources", "securityContext"):
        if key in spec:
            container[key] = spec[key]
    pod_spec = {"serviceAccountName": spec.get("serviceAccount") or "dcgm-exporter-service-acct",
                "containers": [container],
                "volumes": [*spec.get("volumes", []),
                            {"name": "dcgm-config", "configMap": {"name": "dcgm-exporter-config-map"}}]}
    for key in ("tolerations", "nodeSelector", "affinity"):
        if key in spec:
            pod_spec[key] = spec[key]
    return {"metadata": {"labels": _operator_labels(cr, "dcgm-exporter")}, "spec": pod_spec}


def cloudwatch_observability(mirror: Mirror, helm: Path, cluster_name: str, region: str) -> list[Pod]:
    from ray_llm_eks.base.observability import ADDON_NAME, AGENT_NAMESPACE
    from ray_llm_eks.constructs.observability import ADDON_CONFIGURATION, DEFAULT_ADDON_VERSION

    version = DEFAULT_ADDON_VERSION.removeprefix("v").split("-")[0]
    chart = Chart(OBSERVABILITY_CHARTS, "charts/amazon-cloudwatch-observability", ADDON_NAME, ADDON_NAME,
                  AGENT_NAMESPACE, version, _tag(f"{ADDON_NAME}-"), {"addon": ADDON_NAME})
    values = {**ADDON_CONFIGURATION, "clusterName": cluster_name, "region": region}
    objects, source = _render(mirror, chart, values, helm)
    installed_by = {"addon": ADDON_NAME}
    pods = []
    for (kind, name), workload in sorted(_workloads(objects).items()):
        if "windows" in name:  # nodeSelector kubernetes.io/os: windows; the stack runs no Windows node
            continue
        pods.append(_pod(name, f"CloudWatch Observability add-on {DEFAULT_ADDON_VERSION} (chart {version})",
                         workload, AGENT_NAMESPACE, source, installed_by))
    chart_values = yaml.safe_load(mirror.show(OBSERVABILITY_CHARTS, source["ref"], f"{chart.path}/values.yaml"))
    operator_tag = f"v{chart_values['manager']['image']['tag']}"
    makers = {"AmazonCloudWatchAgent": ("internal/manifests/collector/daemonset.go", cloudwatch_agent_template),
              "DcgmExporter": ("internal/manifests/dcgmexporter/daemonset.go", dcgm_exporter_template)}
    for cr in objects:
        kind, name = cr.get("kind"), cr.get("metadata", {}).get("name", "")
        if kind not in makers or "windows" in name:
            continue
        path, make = makers[kind]
        workload = {"kind": "DaemonSet", "metadata": {"name": name}, "spec": {"template": make(cr)}}
        operator = _source(mirror, OPERATOR, operator_tag, path,
                           custom_resource=f"{kind} {AGENT_NAMESPACE}/{name}, rendered from {source['repo']} "
                                           f"{source['ref']} {source['path']}")
        pods.append(_pod(name, f"CloudWatch Observability add-on {DEFAULT_ADDON_VERSION}: the operator's DaemonSet "
                         f"of the chart's {kind}", workload, AGENT_NAMESPACE, {**operator, "chart": source},
                         installed_by))
    return pods


# --- the stack's own chart values ---------------------------------------------------------------------


def stack_values() -> tuple[dict[str, dict], str, str]:
    """The values the stack gives each chart (reference build; Cluster Autoscaler from a build that
    autoscales a leg), as ``ray-llm-eks render`` writes them; and the cluster name and region."""
    from ray_llm_eks.config import parse_config
    from ray_llm_eks.gitops import render_manifests
    from ray_llm_eks.stack import build_app
    from ray_llm_eks.testing import FAST_SYNTH_CONTEXT

    values: dict[str, dict] = {}
    region = ""
    for overrides in ({}, {"decode": {"min_size": 1, "desired_size": 1, "max_size": 3}}):
        config = parse_config({"strict": False, **overrides}, "tools/upstream_pods.py")
        with tempfile.TemporaryDirectory() as scratch:
            _, stack = build_app(config, outdir=f"{scratch}/cdk.out", context=FAST_SYNTH_CONTEXT, nag=False)
            region = stack.region
            result = render_manifests(stack, f"{scratch}/render")
            for release in result.releases:
                text = (Path(scratch) / "render" / "helm" / release.release.release / "values.yaml").read_text()
                values.setdefault(release.release.chart, yaml.safe_load(text))
    from ray_llm_eks.manifests import DEPLOY_TIME_VALUE

    return values, DEPLOY_TIME_VALUE, region


def write(pods: list[Pod], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        old.unlink()
    for pod in pods:
        source = pod.source
        made = "built as the operator's code does" if "custom_resource" in source else "as upstream ships it"
        header = [f"# {pod.what}: {pod.kind} {pod.namespace}/{pod.name}, spec.template {made}.",
                  f"# From {source['repo']} {source['ref']} (commit {source['commit']}), {source['path']}.",
                  f"# Written by tools/upstream_pods.py; regenerate with: {COMMAND}", ""]
        document = {"kind": pod.kind, "namespace": pod.namespace, "name": pod.name, "installed_by": pod.installed_by,
                    "source": source, "template": pod.template}
        text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=120)
        path = out / f"{pod.file}.yaml"
        if path.exists():
            raise SystemExit(f"two workloads write {path.name}")
        path.write_text("\n".join(header) + text)
        print(f"wrote {path.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True,
                        help="folder of git clones, one per repository, as <owner>+<name> (or <owner>+<name>/repo)")
    parser.add_argument("--out", type=Path, default=TARGET)
    parser.add_argument("--helm", type=Path, default=None, help="default: the kubectl layer's (gitops.helm_binary)")
    args = parser.parse_args(argv)
    from ray_llm_eks.base.infrastructure import DEFAULT_KUBERNETES_VERSION
    from ray_llm_eks.gitops import helm_binary

    mirror = Mirror(args.mirror)
    helm = args.helm or helm_binary()
    values, cluster_name, region = stack_values()
    pods = [*eks_addons(mirror, DEFAULT_KUBERNETES_VERSION), *pod_identity_agent(mirror, helm),
            *cloudwatch_observability(mirror, helm, cluster_name, region), *helm_charts(mirror, values, helm)]
    write(pods, args.out)


if __name__ == "__main__":
    main()

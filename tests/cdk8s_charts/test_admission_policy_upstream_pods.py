"""Every pod upstream ships for what the stack runs beside its own pods (EKS's add-ons, the Helm
charts it installs) is admitted by every build's admission policy, which governs kube-system too.

The pod templates are upstream's own, at the versions the stack pins (tests/data/upstream_pods/,
written by tools/upstream_pods.py, which names each source: eksctl's EKS add-on manifests, the
charts rendered with the stack's values, the CloudWatch operator's DaemonSets of its chart's custom
resources). Each pod is built as its controller creates it: the DaemonSet controller's
tolerations, or the ReplicaSet controller's pod with ``DefaultTolerationSeconds``' (helpers.admission),
requested by that controller's account, in its own namespace, under its own service account; then
the API server's defaulting of host ports, which runs before admission. tests/cdk8s_charts/test_admission_policy_every_build.py
does the same for the pods the stack renders itself.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from helpers.admission import (DAEMONSET_CONTROLLER, REPLICASET_CONTROLLER, controller_pod, daemonset_pod, denials,
                               policy_of)
from cdk8s_charts.test_admission_policy_every_build import BUILDS, _objects

DATA = Path(__file__).resolve().parents[1] / "data" / "upstream_pods"
UPSTREAM = {path.stem: yaml.safe_load(path.read_text()) for path in sorted(DATA.glob("*.yaml"))}
CONTROLLERS = {"DaemonSet": (daemonset_pod, DAEMONSET_CONTROLLER),
               "Deployment": (controller_pod, REPLICASET_CONTROLLER)}


def _with_host_network_ports(pod: dict) -> dict:
    """The API server sets ``hostPort`` to ``containerPort`` on every port of a ``hostNetwork``
    pod before admission (kubernetes ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_Pod``; since
    1.28 on pods only, not on templates: feature gate ``DefaultHostNetworkHostPortsInPodTemplates``)."""
    pod = copy.deepcopy(pod)
    if pod["spec"].get("hostNetwork"):
        for container in pod["spec"].get("containers", []) + pod["spec"].get("initContainers", []):
            for port in container.get("ports", []):
                port.setdefault("hostPort", port["containerPort"])
    return pod


def created(entry: dict) -> tuple[dict, str]:
    """The pod as its controller creates it from the upstream template, and who asks."""
    make, user = CONTROLLERS[entry["kind"]]
    return _with_host_network_ports(make(entry["template"])), user


def _installed(built) -> tuple[dict[str, str | None], dict[str, str]]:
    """The build's EKS add-ons (name -> pinned version or None) and Helm charts (chart -> version)."""
    addons = {r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion")
              for r in built.resources("AWS::EKS::Addon").values()}
    charts = {r["Properties"]["Chart"]: r["Properties"]["Version"]
              for r in built.resources("Custom::AWSCDK-EKS-HelmChart").values()}
    return addons, charts


def _runs_in(entry: dict, addons, charts) -> bool:
    ((how, name),) = entry["installed_by"].items()
    return name in (addons if how == "addon" else charts)


def test_the_upstream_pods_are_upstream_templates_with_their_source():
    """What the tests below read: one workload per file, each with the repository, ref, commit and
    path it came from (tools/upstream_pods.py)."""
    assert {"coredns", "aws-node", "kube-proxy", "eks-pod-identity-agent", "fluent-bit", "cloudwatch-agent",
            "dcgm-exporter", "amazon-cloudwatch-observability-controller-manager", "kuberay-operator",
            "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "cluster-autoscaler-aws-cluster-autoscaler"} \
        <= set(UPSTREAM)
    for stem, entry in UPSTREAM.items():
        text = (DATA / f"{stem}.yaml").read_text()
        assert "regenerate with: .venv/bin/python tools/upstream_pods.py --mirror DIR" in text.splitlines()[2], stem
        assert entry["kind"] in CONTROLLERS and entry["template"]["spec"]["containers"], stem
        assert len(entry["source"]["commit"]) == 40 and entry["source"]["repo"].count("/") == 1, stem
    # The finding of issue 38, as upstream ships it: CoreDNS adds a capability and runs under its own account.
    (coredns,) = UPSTREAM["coredns"]["template"]["spec"]["containers"]
    assert coredns["securityContext"]["capabilities"]["add"] == ["NET_BIND_SERVICE"]
    assert UPSTREAM["coredns"]["template"]["spec"]["serviceAccountName"] == "coredns"
    # aws-node carries the network policy agent, privileged, beside the CNI.
    containers = {c["name"]: c for c in UPSTREAM["aws-node"]["template"]["spec"]["containers"]}
    assert containers["aws-eks-nodeagent"]["securityContext"]["privileged"] is True


@pytest.mark.parametrize("build", list(BUILDS))
def test_every_part_the_build_installs_has_its_upstream_pods_at_the_pinned_version(synth, build):
    """No add-on or chart of the build is missing from tests/data/upstream_pods, and each chart's
    pods were rendered from the version the build installs (or the nearest, named in the file)."""
    addons, charts = _installed(synth(BUILDS[build]))
    covered = {(how, name) for entry in UPSTREAM.values() for how, name in entry["installed_by"].items()}
    assert {("addon", name) for name in addons} | {("helm", chart) for chart in charts} <= covered
    for stem, entry in UPSTREAM.items():
        ((how, name),) = entry["installed_by"].items()
        source = entry["source"].get("chart", entry["source"])
        if how == "helm" and name in charts:
            assert source.get("pinned", source["chart_version"]) == charts[name], stem
        elif how == "addon" and addons.get(name):
            assert addons[name].startswith(f"v{source['chart_version']}-eksbuild."), stem
    assert ("cluster-autoscaler" in charts) == (build == "autoscaling")
    assert ("amazon-cloudwatch-observability" in addons) == (build != "observability off")


@pytest.mark.parametrize("build", list(BUILDS))
def test_every_upstream_pod_the_build_runs_is_admitted(synth, build):
    objects = _objects(synth(BUILDS[build]))
    policy = policy_of(objects)
    addons, charts = _installed(synth(BUILDS[build]))
    refused, checked = [], set()
    for stem, entry in UPSTREAM.items():
        if not _runs_in(entry, addons, charts):
            continue
        pod, user = created(entry)
        checked.add(stem)
        found = denials(policy, entry["namespace"], pod, user=user)
        if found:
            refused.append(f"{entry['kind']} {entry['namespace']}/{entry['name']} (tests/data/upstream_pods/"
                           f"{stem}.yaml, account {pod['spec'].get('serviceAccountName') or 'default'}, "
                           f"created by {user}): " + "; ".join(found))
    # EKS's add-ons and the charts every build installs (the CloudWatch pods with observability,
    # Cluster Autoscaler when a leg autoscales: the test above).
    assert {"coredns", "aws-node", "kube-proxy", "eks-pod-identity-agent", "kuberay-operator",
            "nvidia-device-plugin", "aws-efa-k8s-device-plugin"} <= checked
    assert ("cloudwatch-agent" in checked) == (build != "observability off")
    assert not refused, f"{build}: the admission policy refuses {len(refused)} upstream pod(s):\n" + "\n".join(refused)

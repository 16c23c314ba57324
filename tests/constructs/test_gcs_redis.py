"""serving.gcs_fault_tolerance: the GCS in ElastiCache for Valkey, its password never in the template."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.cdk8s_charts import NAMESPACE_CHART_ID, RAYSERVICE_CHART_ID
from ray_llm_eks.cdk8s_charts.gcs_redis import GCS_REDIS_CHART_ID
from ray_llm_eks.config import ConfigError, parse_config

GCS = {"serving": {"gcs_fault_tolerance": {"enabled": True}}}


def props(resource: dict) -> dict:
    return resource["Properties"]


@pytest.fixture(scope="module")
def with_cache(synth):
    return synth(GCS, nag=True)  # cdk-nag AwsSolutions and the project's rules pass with it on


def test_off_by_default(default):
    assert default.resources("AWS::ElastiCache::ReplicationGroup") == {}
    assert "gcsFaultToleranceOptions" not in json.dumps(default.template_json)


def test_one_valkey_shard_with_tls_auth_and_a_replica_in_another_az(with_cache):
    (group,) = with_cache.resources("AWS::ElastiCache::ReplicationGroup").values()
    p = props(group)
    assert (p["Engine"], p["EngineVersion"], p["CacheNodeType"]) == ("valkey", "8.0", "cache.t4g.small")
    assert p["NumCacheClusters"] == 2 and p["AutomaticFailoverEnabled"] is True and p["MultiAZEnabled"] is True
    assert "NumNodeGroups" not in p  # one shard: Ray refuses Redis Cluster with more than one
    assert p["TransitEncryptionEnabled"] is True and p["AtRestEncryptionEnabled"] is True
    secret_id = with_cache.logical_id(with_cache.stack.serving.gcs_cache.password)
    # The AUTH token is a dynamic reference CloudFormation resolves at deploy time, not a value.
    assert p["AuthToken"] == {"Fn::Join": ["", ["{{resolve:secretsmanager:", {"Ref": secret_id}, ":SecretString:::}}"]]}
    (subnets,) = with_cache.resources("AWS::ElastiCache::SubnetGroup").values()
    assert len(props(subnets)["SubnetIds"]) == 2  # the private subnets of both AZs


def test_only_the_cluster_nodes_may_open_6379(with_cache):
    (group,) = with_cache.resources("AWS::ElastiCache::ReplicationGroup").values()
    (sg_ref,) = props(group)["SecurityGroupIds"]
    sg = with_cache.template_json["Resources"][sg_ref["Fn::GetAtt"][0]]
    (ingress,) = props(sg)["SecurityGroupIngress"]
    assert (ingress["FromPort"], ingress["ToPort"], ingress["IpProtocol"]) == (6379, 6379, "tcp")
    assert ingress["SourceSecurityGroupId"] == {"Fn::GetAtt": ["ClusterC2E21B66", "ClusterSecurityGroupId"]}
    assert props(sg)["SecurityGroupEgress"][0]["Description"] == "Disallow all traffic"


def test_the_copy_job_role_may_read_that_one_secret_for_its_own_account(with_cache):
    secret_id = with_cache.logical_id(with_cache.stack.serving.gcs_cache.password)
    roles = {k: r for k, r in with_cache.resources("AWS::IAM::Role").items() if k.startswith("ServingGcsCacheCopyRole")}
    (role,) = roles.values()
    conditions = props(role)["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/kubernetes-service-account"] == "ray-llm-gcs-redis-secret"
    assert conditions["aws:RequestTag/kubernetes-namespace"] == "inference"
    (policy,) = [p for k, p in with_cache.resources("AWS::IAM::Policy").items() if k.startswith("ServingGcsCacheCopyRole")]
    assert props(policy)["PolicyDocument"]["Statement"] == [
        {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret_id}}]
    (association,) = [a for a in with_cache.resources("AWS::EKS::PodIdentityAssociation").values()
                      if props(a)["ServiceAccount"] == "ray-llm-gcs-redis-secret"]
    assert props(association)["Namespace"] == "inference"


def test_the_cache_chart_is_applied_before_the_rayservice(with_cache):
    manifests = {k: r for k, r in with_cache.template_json["Resources"].items()
                 if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"}
    def holding(marker: str) -> str:
        (found,) = [k for k, r in manifests.items() if marker in json.dumps(props(r)["Manifest"])]
        return found

    gcs_id, rayservice_id = holding("ExternalName"), holding("serveConfigV2")
    assert gcs_id in manifests[rayservice_id].get("DependsOn", [])
    # The copy Job's pod needs its Pod Identity association at admission.
    (association,) = [k for k, a in with_cache.resources("AWS::EKS::PodIdentityAssociation").items()
                      if props(a)["ServiceAccount"] == "ray-llm-gcs-redis-secret"]
    assert association in manifests[gcs_id].get("DependsOn", [])


def test_the_cluster_spec_is_the_same_whatever_the_cache_endpoint(with_cache, synth):
    """The RayService names the cache by its in-cluster alias, so no CloudFormation token and no
    account-specific endpoint enters the hashed cluster spec."""
    text = json.dumps(with_cache.stack.serving.serving_charts.rayservice.to_json())
    assert "${Token[" not in text
    assert "rediss://ray-llm-gcs-redis.inference.svc.cluster.local:6379" in text


def test_plan_prices_the_cache_nodes(tmp_path):
    from typer.testing import CliRunner

    from ray_llm_eks.cli import app

    config = tmp_path / "gcs.yaml"
    config.write_text("strict: false\nserving:\n  gcs_fault_tolerance:\n    enabled: true\n    cache_nodes: 3\n")
    result = CliRunner().invoke(app, ["plan", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    lines = {line["item"]: line for line in json.loads(result.stdout)["cost_lines"]}
    line = lines["GCS cache cache.t4g.small (ElastiCache for Valkey)"]
    assert line["quantity"] == 3 and line["usd_per_hour"] == pytest.approx(3 * 0.0256)
    assert line["basis"] == "estimate"


@pytest.mark.parametrize(("settings", "field", "says"), [
    ({"cache_nodes": 0}, "cache_nodes", "not a node count for one Valkey shard"),
    ({"cache_nodes": 7}, "cache_nodes", "not a node count for one Valkey shard"),
    ({"cache_node_type": "t4g.small"}, "cache_node_type", "not an ElastiCache node type"),
])
def test_bad_settings_are_refused_with_the_field(settings, field, says):
    with pytest.raises(ConfigError, match=rf"serving\.gcs_fault_tolerance\.{field}: {says}"):
        parse_config({"serving": {"gcs_fault_tolerance": {"enabled": True, **settings}}}).specs()


def test_a_single_node_cache_has_no_failover(synth):
    synthesized = synth({"serving": {"gcs_fault_tolerance": {"enabled": True, "cache_nodes": 1}}})
    (group,) = synthesized.resources("AWS::ElastiCache::ReplicationGroup").values()
    assert props(group)["AutomaticFailoverEnabled"] is False and props(group)["MultiAZEnabled"] is False


def test_cfn_lint_finds_nothing_new_with_the_cache(with_cache):
    from test_upstream_checkers_aws import ACCEPTED_CFN_LINT_WARNINGS, AWS_CDK_LIB_W3005, cfn_lint

    findings = cfn_lint(with_cache.outdir / f"{with_cache.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    assert [f for f in findings if f[0] == "W3005" and not AWS_CDK_LIB_W3005.match(f[1])] == []


def _deleted_after_the_rayservice(synthesized) -> set[str]:
    """Everything the RayService manifest depends on, directly or not: CloudFormation deletes each of
    them only once the RayService manifest's delete has returned."""
    resources = synthesized.template_json["Resources"]
    todo = [synthesized.logical_id(synthesized.stack.serving.manifests[RAYSERVICE_CHART_ID])]
    seen: set[str] = set()
    while todo:
        for dependency in resources[todo.pop()].get("DependsOn", ()):
            if dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen


@pytest.mark.parametrize("build", ["default", "with_cache"])
@pytest.mark.usefixtures("synth")  # it looks its synth up by name; with the synth group (tests/conftest.py)
def test_a_destroy_holds_the_rayservice_manifest_while_what_its_clusters_finalizer_needs_still_exists(build, request):
    """``cdk destroy`` with GCS fault tolerance: KubeRay removes a RayCluster's Redis-cleanup
    finalizer only once its cleanup Job finished (raycluster_controller.go@v1.4.0:198-296). The
    RayService manifest's delete returns only when its teardown guard pod is gone, which its preStop
    hook holds until the RayClusters are (tests/cdk8s_charts/test_teardown_guard.py); the namespace
    (where the Job runs), the Redis Service, password Secret and egress policy (the GCS chart), the
    guard's own account and program, the operator, the device plugins and the nodes are deleted
    after it. Without GCS fault tolerance the same order lets the Ray pods end on their nodes before
    the node groups go."""
    synthesized = request.getfixturevalue(build)
    stack = synthesized.stack
    after = _deleted_after_the_rayservice(synthesized)
    needed = {stack.serving.manifests[NAMESPACE_CHART_ID], stack.kuberay.chart, *stack.device_plugins.charts,
              stack.serving.pod_identity, stack.system_nodes.nodegroup,
              *(group.nodegroup for group in stack.gpu_node_groups.values())}
    if build == "with_cache":
        needed |= {stack.serving.manifests[GCS_REDIS_CHART_ID], stack.serving.gcs_cache.copy_identity}
    missing = {synthesized.logical_id(c) for c in needed} - after
    assert not missing, missing
    objects = synthesized.manifest_objects(synthesized.logical_id(stack.serving.manifests[RAYSERVICE_CHART_ID]))
    order = [(o["kind"], o["metadata"]["name"]) for o in objects]
    guard = stack.serving.serving_charts.rayservice.teardown_guard.pod_name
    # kubectl deletes in the manifest's order, the RayService before the guard, then waits for both.
    assert order.index(("RayService", stack.serving.ray_service_name)) < order.index(("Pod", guard))

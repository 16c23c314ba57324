"""One validation: `make synth`'s code path, `ray-llm-eks plan` and the constructs refuse the same
configurations with the same sentences (field, bad value, what is accepted), never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from helpers.pins import UNPINNED
from ray_llm_eks import app as synth_app
from ray_llm_eks import cli

runner = CliRunner()
HEX40 = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "d" * 64

# (configuration, the dotted field the message must name, a fragment of the sentence)
BAD_CONFIGS: list[tuple[dict, str, str]] = [
    # region and zones
    ({"region": "us-east-1"}, "control_plane_azs", "not in region us-east-1"),
    ({"region": "us-east-1"}, "data_plane_az", "not an availability zone of region us-east-1"),
    ({"region": "Oregon"}, "region", "not an AWS region name"),
    ({"control_plane_azs": ["us-west-2a"]}, "control_plane_azs", "at least two availability zones"),
    ({"control_plane_azs": ["us-west-2a", "us-west-2a"]}, "control_plane_azs", "must be distinct"),
    ({"data_plane_az": "us-west-2c"}, "data_plane_az", "not one of control_plane_azs"),
    # names
    ({"stack_name": "ray llm"}, "stack_name", "not a CloudFormation stack name"),
    ({"stack_name": "1stack"}, "stack_name", "not a CloudFormation stack name"),
    ({"cluster": {"name": "my cluster!"}}, "cluster.name", "not an EKS cluster name"),
    ({"cluster": {"name": "x" * 101}}, "cluster.name", "not an EKS cluster name"),
    ({"serving": {"service_name": "r" * 48}}, "serving.service_name", "at most 47 characters"),
    ({"serving": {"service_name": "Ray_LLM"}}, "serving.service_name", "not a DNS label"),
    ({"serving": {"namespace": "infer ence"}}, "serving.namespace", "not a DNS label"),
    # the deployment gate
    ({"verification": {"timeout_minutes": 721}}, "verification.timeout_minutes", "12-hour maximum"),
    ({"verification": {"timeout_minutes": 5}}, "verification.timeout_minutes", "room for a cold start"),
    ({"verification": {"probes": 0}}, "verification.probes", "not a probe count"),
    ({"verification": {"probe_prompt_fraction": 1.5}}, "verification.probe_prompt_fraction", "fraction of max_model_len"),
    ({"verification": {"min_kv_fraction": 0}}, "verification.min_kv_fraction", "predicted KV bytes"),
    ({"region": "us-west-3"}, "region", "not an AWS region (aws-cdk-lib's region facts"),
    # network
    ({"network": {"vpc_cidr": "10.0.0.0/33"}}, "network.vpc_cidr", "not an IPv4 CIDR block"),
    ({"network": {"vpc_cidr": "10.0.0.0/24"}}, "network.vpc_cidr", "a /24 cannot hold"),
    ({"network": {"vpc_cidr": "10.0.0.1/16"}}, "network.vpc_cidr",
     "has host bits set after the /16 prefix (got '10.0.0.1/16'); accepted: the network address, 10.0.0.0/16"),
    ({"network": {"vpc_cidr": "10.0.0.0/8"}}, "network.vpc_cidr", "a /8 is larger than the largest VPC block AWS allows (/16)"),
    ({"network": {"nat_gateways": 3}}, "network.nat_gateways", "one per AZ"),
    ({"network": {"flow_log_retention_days": 31}}, "network.flow_log_retention_days", "retention period"),
    ({"cluster": {"endpoint_access": "public-and-private", "public_access_cidrs": ["office-vpn"]}},
     "cluster.public_access_cidrs", "not an IPv4 CIDR"),
    ({"cluster": {"endpoint_access": "public-and-private"}}, "cluster.public_access_cidrs",
     "needs the CIDRs allowed to reach the public side"),
    ({"cluster": {"endpoint_access": "public-and-private", "public_access_cidrs": ["0.0.0.0/0"]}},
     "cluster.public_access_cidrs", "opens the Kubernetes API to the whole internet"),
    ({"cluster": {"public_access_cidrs": ["203.0.113.0/24"]}}, "cluster.public_access_cidrs",
     "a private endpoint has no public side"),
    ({"cluster": {"endpoint_access": "public"}}, "cluster.endpoint_access", "not an EKS endpoint access mode"),
    ({"serving": {"endpoint": "internal-nlb"}}, "serving.client_cidrs", "opens its NodePort on every node"),
    ({"serving": {"client_cidrs": ["10.0.0.0/16"]}}, "serving.client_cidrs", "overlaps the cluster's VPC 10.0.0.0/16"),
    ({"serving": {"client_cidrs": ["10.0.64.0/24"]}}, "serving.client_cidrs", "the cluster's own subnets"),
    ({"serving": {"client_cidrs": ["10.0.0.0/8"]}}, "serving.client_cidrs", "overlaps the cluster's VPC"),
    ({"network": {"vpc_cidr": "172.16.0.0/16"}, "serving": {"client_cidrs": ["172.16.128.0/20"]}},
     "serving.client_cidrs", "overlaps the cluster's VPC 172.16.0.0/16"),
    ({"serving": {"client_namespaces": ["Apps!"]}}, "serving.client_namespaces", "not a namespace name"),
    ({"serving": {"egress_cidrs": ["internet"]}}, "serving.egress_cidrs", "not an IPv4 CIDR"),
    ({"serving": {"admission_exempt_namespaces": ["agents"]}}, "serving.admission_exempt_namespaces",
     "replaced by serving.admission_exempt_agents"),
    ({"cluster": {"control_plane_log_retention_days": 42}}, "cluster.control_plane_log_retention_days",
     "not a CloudWatch Logs retention period"),
    ({"cluster": {"endpoint_access": "internet"}}, "cluster.endpoint_access", "not an EKS endpoint access mode"),
    ({"cluster": {"kubernetes_version": "1.30"}}, "cluster.kubernetes_version", "no kubectl layer"),
    ({"cluster": {"control_plane_logs": ["everything"]}}, "cluster.control_plane_logs", "not EKS control-plane log"),
    ({"cluster": {"admin_role_arn": "admin"}}, "cluster.admin_role_arn", "not an IAM role ARN"),
    # versions and image
    ({"versions": {"kuberay": "latest"}}, "versions.kuberay", "not a semantic version"),
    ({"versions": {"kuberay": "1.4.0"}}, "serving.ray_auth", "ray_auth: disabled to keep KubeRay 1.4.0"),
    ({"versions": {"nvidia_device_plugin": "0.19.2"}}, "versions.nvidia_device_plugin", "MOFED"),
    ({"versions": {"efa_device_plugin": "main"}}, "versions.efa_device_plugin", "not a semantic version"),
    ({"versions": {"ray": "2.59.0"}}, "versions.ray", "ships Ray 2.58.0"),
    ({"versions": {"ray": "two"}}, "versions.ray", "not a semantic version"),
    ({"image": {"tag": "serve-llm-cuda-v9"}}, "image.tag", "not an AWS Ray LLM DLC tag"),
    ({"image": {"digest": "sha256:abc"}}, "image.digest", "not an image digest"),
    ({"image": {"tag": None}}, "image.tag", "needs a tag or a digest"),
    # strict mode
    ({"strict": True}, "image.digest", "strict mode refuses it"),
    ({"strict": True, "image": {"digest": DIGEST}, "model": {"revision": "main"}}, "model.revision",
     "a branch or tag, not a commit"),
    # node groups
    ({"prefill": {"instance_type": "m7i.xlarge"}}, "prefill.instance_type", "has no GPU"),
    ({"decode": {"instance_type": "g6.4xlarge"}}, "decode.instance_type", "does not support EFA"),
    ({"decode": {"instance_type": "p5.48xlarge"}}, "decode.instance_type", "not in the library's instance table"),
    ({"system": {"instance_type": "g6.8xlarge"}}, "system.instance_type", "has a GPU"),
    ({"prefill": {"min_size": 0, "desired_size": 0}}, "prefill.desired_size", "no GPU to run on"),
    ({"decode": {"desired_size": 3, "max_size": 2}}, "decode.desired_size", "min_size <= desired_size <= max_size"),
    ({"prefill": {"min_size": 3, "desired_size": 2, "max_size": 2}}, "prefill.min_size",
     "min_size is above max_size (2) (got 3); accepted: 0 to 2, or raise max_size to at least 3"),
    ({"decode": {"max_size": 101}}, "decode.max_size", "node count out of range"),
    ({"system": {"count": 0}}, "system.count", "out of range"),
    ({"prefill": {"root_volume": {"throughput_mibps": 2000}}}, "prefill.root_volume.throughput_mibps", "range"),
    ({"prefill": {"root_volume": {"iops": 3000}}}, "prefill.root_volume.throughput_mibps", "0.25 MiB/s per IOPS"),
    ({"decode": {"root_volume": {"size_gib": 10}}}, "decode.root_volume.size_gib", "outside gp3's range"),
    # tensor parallelism and topology
    ({"model": {"tensor_parallel_size": 3}, "prefill": {"instance_type": "g6.12xlarge"},
      "decode": {"instance_type": "g6.12xlarge"}}, "model.tensor_parallel_size", "does not divide the 4 GPUs"),
    ({"model": {"tensor_parallel_size": 2}}, "model.tensor_parallel_size", "larger than the 1 GPU(s)"),
    ({"decode": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 2}}, "decode.tensor_parallel_size",
     "hybrid"),
    ({"topology": "colocated", "decode": {"instance_type": "g6e.8xlarge"}}, "decode.instance_type",
     "one GPU model"),
    ({"topology": "colocated", "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
      "prefill": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 2},
      "decode": {"instance_type": "g6.12xlarge", "tensor_parallel_size": 4}}, "decode.tensor_parallel_size",
     "same tensor_parallel_size"),
    # the model
    ({"model": {"max_model_len": 262144}}, "model.max_model_len", "less than one sequence"),
    ({"model": {"max_model_len": 0}}, "model.max_model_len", "not a token count"),
    ({"model": {"gpu_memory_utilization": 1.5}}, "model.gpu_memory_utilization", "(0, 1]"),
    ({"model": {"served_name": "qwen 9b"}}, "model.served_name", "no whitespace"),
    ({"model": {"source": "meta-llama/Llama-3.3-70B-Instruct"}}, "model.architecture", "not in the package's"),
    ({"model": {"source": "x/dense-70b", "architecture": {
        "parameter_count": 70_553_706_496, "num_hidden_layers": 80, "full_attention_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}}},
     "decode.instance_type", "do not fit"),
    ({"model": {"gpu_memory_utilization": 0.5}}, "prefill.instance_type", "do not fit"),
    # shape errors pydantic reports
    ({"prefil": {}}, "prefil", "unknown key"),
    ({"topology": "pipelined"}, "topology", "disaggregated"),
    ({"nixl": {"backends": ["TCP"]}}, "nixl.backends.0", "LIBFABRIC"),
]


def _lines(output: str) -> list[str]:
    return sorted(line.strip() for line in output.splitlines() if line.startswith("  ") and ": " in line)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Each bad configuration once through each entry point: (synth exit, synth lines, plan exit, plan lines)."""
    import contextlib
    import io

    results = {}
    for index, (config, _, _) in enumerate(BAD_CONFIGS):
        path = tmp_path_factory.mktemp("bad") / f"bad-{index}.yaml"
        path.write_text(yaml.safe_dump({**UNPINNED, **config}))  # only the refusal under test (helpers/pins.py)
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            synth_exit = synth_app.main(str(path))
        plan = runner.invoke(cli.app, ["plan", "--config", str(path)])
        results[index] = (synth_exit, stderr.getvalue(), plan.exit_code, plan.output, plan.exception)
    return results


def test_the_battery_is_large_enough():
    assert len(BAD_CONFIGS) >= 40
    assert len({json.dumps(c, sort_keys=True) for c, _, _ in BAD_CONFIGS}) >= 40


@pytest.mark.parametrize("index", range(len(BAD_CONFIGS)), ids=[f for _, f, _ in BAD_CONFIGS])
def test_synth_and_plan_refuse_it_with_the_same_sentences(refusals, index):
    _, field, fragment = BAD_CONFIGS[index]
    synth_exit, synth_err, plan_exit, plan_out, plan_exception = refusals[index]
    assert synth_exit == 2, synth_err
    assert plan_exit in (1, 2), plan_out
    assert not isinstance(plan_exception, Exception) or isinstance(plan_exception, SystemExit), plan_exception
    assert "Traceback" not in synth_err + plan_out and "jsii" not in (synth_err + plan_out).lower()
    synth_lines, plan_lines = _lines(synth_err), _lines(plan_out)
    assert synth_lines == plan_lines
    named = [line for line in synth_lines if line.startswith(f"{field}: ")]
    assert named and any(fragment in line for line in named), synth_err
    # Every line names the value it refuses (or the unknown key).
    for line in named:
        assert "(got " in line or "Input should be" in line, line


def test_plan_exits_1_only_when_the_model_does_not_fit(refusals):
    for index, (_, field, fragment) in enumerate(BAD_CONFIGS):
        _, _, plan_exit, _, _ = refusals[index]
        assert plan_exit == (1 if fragment in ("do not fit", "less than one sequence") else 2), BAD_CONFIGS[index]


def test_the_default_configuration_is_accepted_by_both(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("strict: false\nmodel: {max_model_len: 8192}\n")
    assert runner.invoke(cli.app, ["plan", "--config", str(path), "--json"]).exit_code == 0

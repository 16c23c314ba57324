"""Capacity reservations (issue 26): a leg's ``capacity`` from the configuration to the launch
template and node group, its refusals, ``preflight``'s reservation check and ``plan``'s prices.

moto has no Capacity Reservation API (moto 5.2.5: no ``describe_capacity_reservations``), so
the preflight check is fed by botocore's Stubber, which validates both the request and the
stubbed answer against botocore's EC2 service model (shape ``CapacityReservation``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from typer.testing import CliRunner

from helpers.aws import BOOTSTRAP_PARAMETER, StubbedEksSession
from helpers.composition import cluster_stack
from helpers.pins import unpinned_config
from ray_llm_eks import cli
from ray_llm_eks.base import Capacity, WorkerPool
from ray_llm_eks.base.errors import SpecErrors
from ray_llm_eks.config import ConfigError
from ray_llm_eks.constructs import ConstructValidationError, EfaFabric, EfaGpuNodeGroup
from ray_llm_eks.planning import make_plan
from ray_llm_eks.preflight import (G_AND_VT_QUOTA, STANDARD_QUOTA, CheckStatus, check_capacity_reservations,
                                   check_titles)
from ray_llm_eks.base.pricing import PriceBasis, load_price_table
from test_upstream_checkers_aws import ACCEPTED_CFN_LINT_WARNINGS, cfn_lint

BLOCK_ID, ODCR_ID = "cr-02168da1478b509e0", "cr-0123456789abcdef0"
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/gpu-reservations"
BLOCK = {"type": "capacity-block", "reservation_id": BLOCK_ID, "hourly_rate_usd": 4.25}
ODCR = {"type": "odcr", "reservation_id": ODCR_ID}
RESERVED = {"prefill": {"placement_group": False, "capacity": BLOCK},
            "decode": {"placement_group": False, "capacity": ODCR}}
"""Prefill on a Capacity Block, decode on an ODCR (the reference's g6.8xlarge: P-series are the
hardware change's; the reservation's type is checked against AWS's answer at preflight)."""


def _refusals(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        unpinned_config(data)
    return [f"{e.field}: {e.message}" for e in caught.value.errors]


# --- the declared option -------------------------------------------------------------------------

def test_the_default_is_on_demand_and_leaves_the_node_identity_as_it_was():
    pool = unpinned_config().prefill.pool
    assert pool.capacity == Capacity() and pool.capacity.type == "on-demand" and not pool.capacity.reserved
    # The identity of an On-Demand pool is the digest it had before reservations existed.
    assert pool.node_identity == WorkerPool(role="prefill").node_identity
    reserved = unpinned_config(RESERVED)
    assert reserved.prefill.pool.node_identity != pool.node_identity
    # The rate prices the plan only: changing it rolls no node.
    cheaper = unpinned_config({**RESERVED, "prefill": {"placement_group": False,
                                                       "capacity": {**BLOCK, "hourly_rate_usd": 1.0}}})
    assert cheaper.prefill.pool.node_identity == reserved.prefill.pool.node_identity


def test_a_reserved_leg_needs_the_placement_group_off():
    (message,) = _refusals({"prefill": {"capacity": BLOCK}})
    assert message.startswith("prefill.placement_group: capacity.type capacity-block launches the nodes where the "
                              "reservation is")
    assert message.endswith("(got True); accepted: false")
    (message,) = _refusals({"decode": {"capacity": ODCR}})
    assert message.startswith("decode.placement_group: capacity.type odcr")


@pytest.mark.parametrize(("capacity", "expected"), [
    ({"type": "spot"}, ["prefill.capacity.type: not a capacity type (got 'spot'); accepted: on-demand, odcr, "
                        "capacity-block"]),
    ({"reservation_id": BLOCK_ID}, ["prefill.capacity.reservation_id: set while type is on-demand (got "
                                    f"'{BLOCK_ID}'); accepted: type: odcr or capacity-block with reservation_id, "
                                    "or leave reservation_id out"]),
    ({"type": "capacity-block"}, [
        "prefill.capacity.reservation_id: a Capacity Block node group targets its reservation by ID (EKS user guide, "
        "capacity-blocks-mng) (got None); accepted: the block's cr- ID",
        "prefill.capacity.hourly_rate_usd: a Capacity Block is priced per reservation, not at the On-Demand rate, so "
        "plan needs its price (got None); accepted: the block's price per instance-hour in USD (its upfront fee / "
        "instances / hours)"]),
    ({**BLOCK, "resource_group_arn": GROUP_ARN}, [
        f"prefill.capacity.resource_group_arn: an EKS Capacity Block node group targets the block by "
        f"CapacityReservationId only (got '{GROUP_ARN}'); accepted: leave resource_group_arn out; give reservation_id"]),
    ({**BLOCK, "hourly_rate_usd": 0}, [
        "prefill.capacity.hourly_rate_usd: not a price per instance-hour (got 0.0); accepted: a number of USD above 0 "
        "(the Capacity Block's price / instances / hours)"]),
    ({**ODCR, "preference": "open"}, [
        "prefill.capacity.type: an ODCR is targeted by exactly one of reservation_id, resource_group_arn and "
        "preference; given: reservation_id, preference (got 'odcr'); accepted: one of them"]),
    ({"type": "odcr"}, [
        "prefill.capacity.type: an ODCR is targeted by exactly one of reservation_id, resource_group_arn and "
        "preference; given: none (got 'odcr'); accepted: one of them"]),
    ({**ODCR, "hourly_rate_usd": 2.0}, [
        "prefill.capacity.hourly_rate_usd: an ODCR is billed at the On-Demand rate whether used or not (EC2 user "
        "guide, Capacity Reservation pricing and billing) (got 2.0); accepted: leave it out: plan prices an ODCR at "
        "the On-Demand rate"]),
    ({"type": "odcr", "reservation_id": "cr-XYZ"}, [
        "prefill.capacity.reservation_id: not a Capacity Reservation ID (got 'cr-XYZ'); accepted: cr- and 8 or 17 "
        "lowercase hex digits, as `aws ec2 describe-capacity-reservations` prints"]),
    ({"type": "odcr", "resource_group_arn": "arn:aws:ec2:us-west-2:123456789012:capacity-reservation/x"}, [
        "prefill.capacity.resource_group_arn: not a resource group ARN (got "
        "'arn:aws:ec2:us-west-2:123456789012:capacity-reservation/x'); accepted: "
        "arn:aws:resource-groups:<region>:<account>:group/<name>"]),
    ({"type": "odcr", "preference": "none"}, [
        "prefill.capacity.preference: not a Capacity Reservation preference that uses reservations (got 'none'); "
        "accepted: open, capacity-reservations-only (none is type: on-demand)"]),
])
def test_the_configuration_refuses_what_aws_would(capacity, expected):
    assert _refusals({"prefill": {"placement_group": False, "capacity": capacity}}) == expected


def test_an_unknown_capacity_key_names_the_accepted_ones():
    with pytest.raises(ConfigError, match=r"prefill\.capacity\.reservation: unknown key .*accepted: the keys of this "
                                          r"section: type, reservation_id, resource_group_arn, preference, hourly_rate_usd"):
        unpinned_config({"prefill": {"placement_group": False, "capacity": {"type": "odcr", "reservation": ODCR_ID}}})


# --- synthesized: the launch templates and node groups --------------------------------------------

@pytest.fixture(scope="module")
def reserved(synth):
    return synth(RESERVED, nag=True)


def _group(reserved, role: str) -> tuple[dict, dict]:
    """(launch template data, node group properties) of a role's GPU node group."""
    group = reserved.stack.gpu_node_groups[role]
    resources = reserved.template_json["Resources"]
    template = resources[reserved.stack.get_logical_id(group.launch_template)]["Properties"]["LaunchTemplateData"]
    nodegroup = resources[reserved.stack.get_logical_id(group.nodegroup.node.default_child)]["Properties"]
    return template, nodegroup


def test_a_capacity_block_node_group_targets_its_block(reserved):
    template, nodegroup = _group(reserved, "prefill")
    # EKS user guide, capacity-blocks-mng: market type, reservation ID and instance type in the
    # launch template; capacity type CAPACITY_BLOCK; no instance type on the node group.
    assert template["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert template["CapacityReservationSpecification"] == {"CapacityReservationTarget": {
        "CapacityReservationId": BLOCK_ID}}
    assert template["InstanceType"] == "g6.8xlarge"
    assert "Placement" not in template
    assert nodegroup["CapacityType"] == "CAPACITY_BLOCK"
    assert "InstanceTypes" not in nodegroup
    assert nodegroup["ScalingConfig"] == {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1}
    assert reserved.stack.gpu_node_groups["prefill"].capacity_type.name == "CAPACITY_BLOCK"


def test_an_odcr_node_group_targets_its_reservation_on_demand(reserved):
    template, nodegroup = _group(reserved, "decode")
    assert template["CapacityReservationSpecification"] == {"CapacityReservationTarget": {
        "CapacityReservationId": ODCR_ID}}
    for absent in ("InstanceMarketOptions", "InstanceType", "Placement"):
        assert absent not in template
    assert "CapacityType" not in nodegroup  # On-Demand: EKS's default, left out
    assert nodegroup["InstanceTypes"] == ["g6.8xlarge"]
    # No placement group at all: neither leg joins one.
    assert reserved.resources("AWS::EC2::PlacementGroup") == {}


def test_the_reserved_template_passes_cfn_lint_and_cdk_nag(reserved):
    findings = cfn_lint(reserved.outdir / f"{reserved.stack.artifact_id}.template.json")
    assert [f for f in findings if f[0].startswith("E")] == []
    assert [f for f in findings if f[0] not in ACCEPTED_CFN_LINT_WARNINGS] == []
    report = json.loads((reserved.outdir / "validation-report.json").read_text())
    assert {p["pluginName"]: p["conclusion"] for p in report["pluginReports"]} == {
        p["pluginName"]: "success" for p in report["pluginReports"]}
    assert "AwsSolutions" in {p["pluginName"] for p in report["pluginReports"]}


# --- the construct, used directly ------------------------------------------------------------------

@pytest.fixture(scope="module")
def construct_stack():
    stack, network, cluster = cluster_stack("Capacity")
    return stack, network, cluster, EfaFabric(stack, "Fabric", vpc=network.vpc, placement_group=False)


def test_the_construct_takes_a_resource_group_or_a_preference(tmp_path):
    from aws_cdk import assertions
    stack, network, cluster = cluster_stack("CapacityTargets")  # its own: the refusals' stack is never synthesized
    fabric = EfaFabric(stack, "Fabric", vpc=network.vpc, placement_group=False)
    by_group = EfaGpuNodeGroup(stack, "ByGroup", cluster=cluster, subnet=network.data_plane_subnet, role="decode",
                               fabric=fabric, placement_group=False,
                               capacity=Capacity(type="odcr", resource_group_arn=GROUP_ARN))
    only = EfaGpuNodeGroup(stack, "Only", cluster=cluster, subnet=network.data_plane_subnet, role="prefill",
                           fabric=fabric, placement_group=False,
                           capacity=Capacity(type="odcr", preference="capacity-reservations-only"))
    template = assertions.Template.from_stack(stack).to_json()
    resources = template["Resources"]
    (tmp_path / "template.json").write_text(json.dumps(template))
    findings = cfn_lint(tmp_path / "template.json")
    assert [f for f in findings if f[0].startswith("E")] == []

    def specification(group):
        data = resources[stack.get_logical_id(group.launch_template)]["Properties"]["LaunchTemplateData"]
        return data["CapacityReservationSpecification"]

    assert specification(by_group) == {"CapacityReservationTarget": {"CapacityReservationResourceGroupArn": GROUP_ARN}}
    assert specification(only) == {"CapacityReservationPreference": "capacity-reservations-only"}


@pytest.mark.parametrize(("props", "message"), [
    ({"capacity": Capacity(**BLOCK), "capacity_type": "SPOT"},
     r"capacity_type: a Capacity Block's nodes are neither On-Demand nor Spot: EKS requires capacity type "
     r"CAPACITY_BLOCK for them \(got 'SPOT'\); accepted: CAPACITY_BLOCK, or leave capacity_type unset"),
    ({"capacity": Capacity(**ODCR), "capacity_type": "SPOT"},
     r"capacity_type: an On-Demand Capacity Reservation holds On-Demand capacity: Spot Instances do not launch into "
     r"it \(got 'SPOT'\); accepted: ON_DEMAND"),
    ({"capacity_type": "CAPACITY_BLOCK"},
     r"capacity_type: a Capacity Block node group needs its launch template to target the reservation .*"
     r"\(got 'CAPACITY_BLOCK'\); accepted: ON_DEMAND or SPOT, or capacity=Capacity\(type='capacity-block'"),
])
def test_the_construct_refuses_a_capacity_type_the_reservation_cannot_take(construct_stack, props, message):
    stack, network, cluster, fabric = construct_stack
    construct_id = f"Refused{len(stack.node.children)}"
    with pytest.raises(ConstructValidationError, match=message) as caught:
        EfaGpuNodeGroup(stack, construct_id, cluster=cluster, subnet=network.data_plane_subnet, role="decode",
                        fabric=fabric, placement_group=False, **props)
    assert str(caught.value).startswith(f"Capacity/{construct_id}: ")


def test_the_construct_refuses_a_reserved_leg_in_the_placement_group(construct_stack):
    stack, network, cluster, _ = construct_stack
    with pytest.raises(ConstructValidationError, match=r"Capacity/InGroup: placement_group: capacity.type "
                                                       r"capacity-block .*\(got True\); accepted: false"):
        EfaGpuNodeGroup(stack, "InGroup", cluster=cluster, subnet=network.data_plane_subnet, role="decode",
                        capacity=Capacity(**BLOCK))


def test_a_capacity_built_directly_refuses_with_its_own_name():
    with pytest.raises(SpecErrors, match=r"^Capacity: hourly_rate_usd: a Capacity Block is priced per reservation"):
        Capacity(type="capacity-block", reservation_id=BLOCK_ID)


# --- preflight (botocore Stubber on the EC2 client) ----------------------------------------------

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def _reservation(reservation_id: str, **changes) -> dict:
    """One ``CapacityReservation`` as DescribeCapacityReservations returns it (botocore's EC2
    model, shape CapacityReservation; the Stubber refuses a field or a type the model lacks)."""
    answer = {
        "CapacityReservationId": reservation_id, "OwnerId": "123456789012", "InstanceType": "g6.8xlarge",
        "InstancePlatform": "Linux/UNIX", "AvailabilityZone": "us-west-2a", "AvailabilityZoneId": "usw2-az1",
        "Tenancy": "default", "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "State": "active",
        "StartDate": NOW - timedelta(days=1), "EndDate": NOW + timedelta(days=6), "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted", "ReservationType": "default",
    }
    merged = {**answer, **changes}
    return {key: value for key, value in merged.items() if value is not None}  # None: EC2 leaves the field out


def _block(**changes) -> dict:
    return _reservation(BLOCK_ID, ReservationType="capacity-block", CapacityBlockId="cb-0123456789abcdef0", **changes)


def _check(reservations: list[dict] | None = None, *, error: str | None = None, config=None):
    config = config or unpinned_config(RESERVED)
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing")
    with Stubber(ec2) as stub:
        request = {"CapacityReservationIds": sorted({leg.pool.capacity.reservation_id
                                                     for leg in (config.prefill, config.decode)
                                                     if leg.pool.capacity.reservation_id})}
        if error is not None:
            stub.add_client_error("describe_capacity_reservations", service_error_code=error,
                                  service_message=f"The capacity reservation ID '{BLOCK_ID}' does not exist",
                                  expected_params=request)
        elif request["CapacityReservationIds"]:
            stub.add_response("describe_capacity_reservations", {"CapacityReservations": reservations},
                              expected_params=request)
        result = check_capacity_reservations(ec2, config, now=NOW)
        stub.assert_no_pending_responses()
    return result


def test_preflight_passes_matching_reservations_and_says_what_it_read():
    result = _check([_block(), _reservation(ODCR_ID)])
    assert result.status is CheckStatus.passed, result.detail
    assert result.detail == (
        f"{ODCR_ID} (decode): g6.8xlarge x 2 (2 available) in us-west-2a, active, ends 2026-12-09 12:00 UTC; "
        f"{BLOCK_ID} (prefill): g6.8xlarge x 2 (2 available) in us-west-2a, active, ends 2026-12-09 12:00 UTC")


def test_preflight_runs_the_check_only_with_a_reserved_leg():
    assert "capacity reservations" not in check_titles(unpinned_config())
    assert check_titles(unpinned_config(RESERVED))[4] == "capacity reservations"


def test_preflight_fails_every_mismatch_with_its_fix():
    result = _check([_block(AvailabilityZone="us-west-2b", InstanceType="p5.48xlarge", TotalInstanceCount=0,
                            State="expired"),
                     _reservation(ODCR_ID, ReservationType="capacity-block", InstancePlatform="Windows",
                                  Tenancy="dedicated")])
    assert result.status is CheckStatus.failed
    assert result.detail == (
        f"{ODCR_ID} (decode) is for Windows, the nodes boot Linux/UNIX (AL2023); has dedicated tenancy, the nodes "
        "launch with default tenancy; is a Capacity Block, "
        f"decode.capacity.type is odcr; {BLOCK_ID} (prefill) is in us-west-2b, the data plane in us-west-2a; reserves p5.48xlarge, "
        "prefill runs g6.8xlarge; holds 0 instances, max_size needs 1; is expired")
    assert result.fix == (
        "use a Linux/UNIX reservation; use a reservation with default tenancy; set decode.capacity.type to capacity-block; set data_plane_az to us-west-2b, "
        "or use a reservation in us-west-2a; set prefill.instance_type to p5.48xlarge, or use a reservation for "
        "g6.8xlarge; lower prefill.max_size to 0 in all, or reserve 1 instances; use an active or scheduled "
        "reservation")


def test_preflight_counts_both_legs_against_a_shared_reservation():
    shared = {"prefill": {"placement_group": False, "max_size": 2, "capacity": ODCR},
              "decode": {"placement_group": False, "max_size": 2, "capacity": ODCR}}
    result = _check([_reservation(ODCR_ID, TotalInstanceCount=3)], config=unpinned_config(shared))
    assert result.detail == f"{ODCR_ID} (prefill and decode) holds 3 instances, max_size needs 4"
    assert result.fix == "lower prefill and decode.max_size to 3 in all, or reserve 4 instances"


def test_preflight_refuses_one_reservation_taken_as_two_kinds():
    mixed = {"prefill": {"placement_group": False, "capacity": {**BLOCK, "reservation_id": ODCR_ID}},
             "decode": {"placement_group": False, "capacity": ODCR}}
    result = _check([_reservation(ODCR_ID)], config=unpinned_config(mixed))
    assert result.detail == (f"{ODCR_ID} (prefill and decode) is an On-Demand Capacity Reservation, "
                             "prefill.capacity.type is capacity-block")
    assert result.fix == "set prefill.capacity.type to odcr"


def test_preflight_fails_a_reservation_that_has_ended_though_ec2_still_says_active():
    result = _check([_block(EndDate=NOW - timedelta(minutes=1)), _reservation(ODCR_ID)])
    assert result.status is CheckStatus.failed
    assert result.detail == f"{BLOCK_ID} (prefill) ended 2026-12-03 11:59 UTC"


def test_preflight_passes_a_scheduled_block_and_warns_when_it_ends_within_a_day():
    result = _check([_block(State="scheduled", StartDate=NOW + timedelta(hours=2), EndDate=NOW + timedelta(hours=20)),
                     _reservation(ODCR_ID, EndDate=None, EndDateType="unlimited")])
    assert result.status is CheckStatus.warned and result.passed
    assert result.detail == (
        f"{ODCR_ID} (decode): g6.8xlarge x 2 (2 available) in us-west-2a, active; "
        f"{BLOCK_ID} (prefill): g6.8xlarge x 2 (2 available) in us-west-2a, scheduled, starts 2026-12-03 14:00 UTC: "
        "nodes fail to launch until then, ends 2026-12-04 08:00 UTC; "
        f"{BLOCK_ID} ends 2026-12-04 08:00 UTC, within 24 h; EKS scales the node group to 0 forty minutes before")


def test_preflight_names_a_reservation_ec2_does_not_know():
    result = _check(error="InvalidCapacityReservationId.NotFound")
    assert result.status is CheckStatus.failed
    assert result.detail.startswith(f"EC2 does not know {ODCR_ID}, {BLOCK_ID} in us-west-2: ")
    assert "describe-capacity-reservations" in result.fix


def test_preflight_names_the_permission_it_needs():
    result = _check(error="UnauthorizedOperation")
    assert result.detail == "could not check: UnauthorizedOperation"
    assert result.fix == "grant the caller ec2:DescribeCapacityReservations"


def test_preflight_says_what_it_cannot_check_without_an_id():
    config = unpinned_config({"prefill": {"placement_group": False,
                                          "capacity": {"type": "odcr", "resource_group_arn": GROUP_ARN}},
                              "decode": {"placement_group": False,
                                         "capacity": {"type": "odcr", "preference": "open"}}})
    result = _check(config=config)  # no call at all: the Stubber has nothing queued
    assert result.status is CheckStatus.passed
    assert result.detail == (f"not checked, EC2 picks the reservation at launch: prefill ({GROUP_ARN}), "
                             "decode (preference open)")


# --- plan -----------------------------------------------------------------------------------------

def test_plan_prices_a_block_at_its_rate_and_an_odcr_at_on_demand():
    plan = make_plan(unpinned_config(RESERVED))
    lines = {line.item.split(" ", 1)[0]: line for line in plan.cost.lines if " node g6.8xlarge" in line.item}
    block, odcr = lines["prefill"], lines["decode"]
    assert block.usd_per_hour == 4.25 and block.basis is PriceBasis.configured
    assert block.item == (f"prefill node g6.8xlarge (Capacity Block {BLOCK_ID}: prefill.capacity.hourly_rate_usd; "
                          "the block is paid for in full, used or not)")
    on_demand = load_price_table().region("us-west-2").instance("g6.8xlarge")
    assert odcr.usd_per_hour == on_demand.usd_per_hour and odcr.basis is on_demand.basis
    assert odcr.item == ("decode node g6.8xlarge (ODCR: the On-Demand rate, billed for the whole reservation whether "
                         "used or not)")
    # The block's line differs from the On-Demand plan by exactly the rate difference.
    plain = make_plan(unpinned_config())
    assert plan.cost.hourly_usd - plain.cost.hourly_usd == pytest.approx(4.25 - on_demand.usd_per_hour)


# --- the whole preflight run, through the CLI ------------------------------------------------------

class ReservationsSession(StubbedEksSession):
    """moto for every EC2 call but DescribeCapacityReservations (moto lacks it), answered here with
    ``answer``, validated against botocore's EC2 output shape first as the Stubber would."""

    answer: dict = {}

    def client(self, service_name, *args, **kwargs):
        client = super().client(service_name, *args, **kwargs)
        if service_name == "ec2":
            operation = client.meta.service_model.operation_model("DescribeCapacityReservations")
            validate_parameters(self.answer, operation.output_shape)
            answer = self.answer
            client.meta.events.register("before-call.ec2.DescribeCapacityReservations",
                                        lambda **_: (AWSResponse(None, 200, {}, None), answer))
        return client


def test_cli_preflight_runs_the_reservation_check_and_prints_its_warning(aws, ec2_quotas, monkeypatch, tmp_path):
    ec2_quotas.update({G_AND_VT_QUOTA: 64, STANDARD_QUOTA: 32})
    boto3.client("ssm", region_name="us-west-2").put_parameter(Name=BOOTSTRAP_PARAMETER, Value="27", Type="String")
    soon = datetime.now(timezone.utc) + timedelta(hours=3)
    monkeypatch.setattr(ReservationsSession, "answer", {"CapacityReservations": [
        _block(EndDate=soon, StartDate=soon - timedelta(days=1)), _reservation(ODCR_ID, EndDate=soon + timedelta(days=7))]})
    monkeypatch.setattr(boto3, "Session", ReservationsSession)
    config = tmp_path / "reserved.yaml"
    config.write_text(yaml.safe_dump({"strict": False, **RESERVED}))
    result = CliRunner().invoke(cli.app, ["preflight", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert result.output.count("PASS") == 5 and result.output.count("WARN") == 1
    assert "all 6 checks passed" in result.output
    data = json.loads(CliRunner().invoke(cli.app, ["preflight", "--config", str(config), "--json"]).stdout)
    assert [c["name"] for c in data["checks"]] == ["instance-types-offered", "efa-supported", "vcpu-quotas",
                                                   "eks-version", "capacity-reservations", "cdk-bootstrap"]
    assert data["passed"] is True and data["checks"][4]["status"] == "warn"
    assert f"{BLOCK_ID} ends {soon.strftime('%Y-%m-%d %H:%M')} UTC, within 24 h" in data["checks"][4]["detail"]


def test_cli_plan_names_the_price_each_reserved_leg_uses(tmp_path):
    config = tmp_path / "reserved.yaml"
    config.write_text(yaml.safe_dump({"strict": False, **RESERVED}))
    result = CliRunner().invoke(cli.app, ["plan", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    lines = {line["item"].split(" ", 1)[0]: line for line in json.loads(result.stdout)["cost_lines"]
             if " node g6.8xlarge" in line["item"]}
    assert lines["prefill"]["usd_per_hour"] == 4.25 and lines["prefill"]["basis"] == "configured"
    assert "prefill.capacity.hourly_rate_usd" in lines["prefill"]["item"]
    assert lines["decode"]["basis"] == "us_parity" and "the On-Demand rate" in lines["decode"]["item"]

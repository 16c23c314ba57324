"""The VPC: two AZs for the EKS control plane, one AZ for every node (the single-AZ data plane).

EKS requires cluster subnets in at least two AZs (EKS user guide, "Amazon EKS VPC and subnet
requirements"); EFA traffic cannot cross an AZ, so all nodes share one private subnet.
"""

from __future__ import annotations

from typing import Sequence

from aws_cdk import Aws, Fn, RemovalPolicy, Stack, Token, aws_ec2 as ec2, aws_logs as logs
from constructs import Construct

from ..base import infrastructure as infra
from ..base.errors import problem
from .validation import ConstructValidationError, validated


class InferenceVpc(Construct):
    """A VPC for inference, or an existing one (existing XOR props).

    Default settings (new VPC):
    - CIDR ``10.0.0.0/16``; one public /24 and one private /19 subnet per AZ (the /19 leaves
      room for the VPC CNI, which gives every pod a VPC address).
    - One NAT gateway, in the data-plane AZ: every node lives there, so that is where egress
      traffic starts; the other AZ only holds EKS control-plane network interfaces.
    - VPC flow logs (all traffic) to a CloudWatch Logs group kept 30 days.
    - Load-balancer subnet tags (``kubernetes.io/role/internal-elb`` on private subnets,
      ``kubernetes.io/role/elb`` on public ones) come from ``aws_eks_v2.Cluster``, which tags the
      VPC it is given; the optional internal NLB of the OpenAI endpoint relies on them.

    :param data_plane_az: the AZ of every node; its private subnet is ``data_plane_subnet``.
    :param availability_zones: AZ names (at least two) for a new VPC. No lookups, so synth runs offline.
    :param cidr: the new VPC's CIDR. Default ``10.0.0.0/16``.
    :param nat_gateways: NAT gateways of the new VPC (1 or one per AZ). Default 1.
    :param flow_log_retention_days: retention of the flow log group. Default 30.
    :param vpc: an existing VPC instead of a new one; give ``data_plane_subnet`` with it and none
        of the props above.
    :param data_plane_subnet: the existing private subnet, in ``data_plane_az``, with a route to NAT.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        data_plane_az: str,
        availability_zones: Sequence[str] | None = None,
        cidr: str | None = None,
        nat_gateways: int | None = None,
        flow_log_retention_days: int | None = None,
        vpc: ec2.IVpc | None = None,
        data_plane_subnet: ec2.ISubnet | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.data_plane_az = data_plane_az
        self.flow_log: ec2.FlowLog | None = None
        self.flow_log_group: logs.LogGroup | None = None

        if vpc is not None or data_plane_subnet is not None:
            self._use_existing(
                vpc,
                data_plane_subnet,
                new_vpc_props={
                    "availability_zones": availability_zones,
                    "cidr": cidr,
                    "nat_gateways": nat_gateways,
                    "flow_log_retention_days": flow_log_retention_days,
                },
            )
            return

        # The configuration's check (base.infrastructure), in this construct's prop names.
        validated(self, infra.availability_zones, _stack_region(self),
                  [] if availability_zones is None else availability_zones, data_plane_az,
                  azs_field="availability_zones", az_field="data_plane_az")
        azs = list(availability_zones or ())
        cidr = validated(self, infra.vpc_cidr, cidr or infra.DEFAULT_VPC_CIDR, len(azs), "cidr")
        nat_count = validated(self, infra.nat_gateways, infra.DEFAULT_NAT_GATEWAYS if nat_gateways is None
                              else nat_gateways, len(azs), "nat_gateways")
        retention = validated(self, infra.retention_days, infra.DEFAULT_FLOW_LOG_RETENTION_DAYS
                              if flow_log_retention_days is None else flow_log_retention_days,
                              "flow_log_retention_days")
        # The first NAT gateway goes in the data-plane AZ, where all egress originates.
        nat_azs = [data_plane_az, *[az for az in availability_zones if az != data_plane_az]][:nat_count]

        self.vpc: ec2.IVpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones),
            nat_gateways=nat_count,
            nat_gateway_subnets=ec2.SubnetSelection(
                subnet_type=ec2.SubnetType.PUBLIC, availability_zones=nat_azs
            ),
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19
                ),
            ],
        )
        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogGroup",
            removal_policy=RemovalPolicy.DESTROY,
        )
        # Any period CloudWatch Logs accepts (spec.infrastructure), without a second table of
        # aws_logs.RetentionDays members to keep in step with it.
        self.flow_log_group.node.default_child.retention_in_days = retention
        self.flow_log = self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # Confused deputy: the flow-logs service assumes this role only for a flow log of this
        # account and region (VPC user guide, "IAM role for publishing flow logs to CloudWatch
        # Logs", which recommends both keys). The flow log's own ID is not known before the role
        # exists (the flow log names the role), so the ARN ends in the documented wildcard.
        trust = self.flow_log.iam_role.node.default_child
        trust.add_property_override("AssumeRolePolicyDocument.Statement.0.Condition", {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": Fn.join("", [
                "arn:", Aws.PARTITION, ":ec2:", Aws.REGION, ":", Aws.ACCOUNT_ID, ":vpc-flow-log/*"])},
        })
        selected = self.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[data_plane_az]
        ).subnets
        self.data_plane_subnet: ec2.ISubnet = selected[0]

    def _use_existing(
        self,
        vpc: ec2.IVpc | None,
        data_plane_subnet: ec2.ISubnet | None,
        new_vpc_props: dict[str, object],
    ) -> None:
        if vpc is None or data_plane_subnet is None:
            missing = "data_plane_subnet" if vpc is not None else "vpc"
            raise ConstructValidationError(self, [problem(
                missing, None, "an existing VPC needs both vpc and data_plane_subnet",
                "both, or neither (to create a VPC)")])
        given = sorted(name for name, value in new_vpc_props.items() if value is not None)
        if given:
            raise ConstructValidationError(self, [problem(
                given[0], new_vpc_props[given[0]], "give either an existing vpc or the props to create one, "
                f"not both; with vpc set, remove: {', '.join(given)}", "an existing vpc XOR new-VPC props")])

        if not Token.is_unresolved(self.data_plane_az):
            region_name = _stack_region(self) or infra.az_region(self.data_plane_az)
            validated(self, infra.availability_zone, self.data_plane_az, region_name, "data_plane_az")
        subnet_az = data_plane_subnet.availability_zone
        if not Token.is_unresolved(subnet_az) and subnet_az != self.data_plane_az:
            raise ConstructValidationError(self, [problem(
                "data_plane_subnet", subnet_az, f"the subnet is not in data_plane_az {self.data_plane_az}",
                f"a private subnet in {self.data_plane_az}")])
        self.vpc = vpc
        self.data_plane_subnet = data_plane_subnet

    @property
    def data_plane_subnets(self) -> ec2.SubnetSelection:
        """The data-plane subnet as a selection, for node groups and anything else that must sit beside them."""
        return ec2.SubnetSelection(subnets=[self.data_plane_subnet])


def _stack_region(scope: Construct) -> str | None:
    """The stack's region, or None for an environment-agnostic stack (a token until deploy time)."""
    region_name = Stack.of(scope).region
    return None if Token.is_unresolved(region_name) else region_name

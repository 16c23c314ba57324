"""ElastiCache for Valkey as the Ray GCS's fault-tolerant store (``serving.gcs_fault_tolerance``).

One shard (Ray refuses Redis Cluster with more than one shard: "Ray currently doesn't support
Redis Cluster with more than one shard", Ray 2.58 ``redis_context.cc``), cluster mode disabled,
TLS in transit and encryption at rest, and an AUTH token that Secrets Manager generates and
CloudFormation passes by dynamic reference, so it is never in the template. With two or more
nodes the replicas sit in other AZs with automatic failover. Only the cluster security group
(the nodes, and so the head's pod, which shares its node's address space under the VPC CNI) may
open 6379, and inside the cluster only the head's NetworkPolicy allows the egress.

The Kubernetes half (the ExternalName Service, the Secret copy Job) is
``cdk8s_charts.gcs_redis``; KubeRay's ``gcsFaultToleranceOptions`` point at it.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2, aws_eks_v2 as eks, aws_elasticache as elasticache, aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from ..base.serving import GcsFaultTolerance
from .identity import pod_identity
from .nag import acknowledge_gcs_redis

ENGINE, ENGINE_VERSION = "valkey", "8.0"
"""Valkey speaks the Redis protocol Ray's GCS uses; ElastiCache prices it below Redis OSS."""
PORT = 6379


class GcsRedisCache(Construct):
    """The cache, its password secret, and the role the Kubernetes Secret copy Job runs as.

    Public attributes: ``replication_group`` (the ``CfnReplicationGroup``), ``endpoint`` (the
    primary endpoint's address), ``password`` (the ``Secret``), ``security_group``,
    ``copy_role`` and ``copy_identity`` (Pod Identity for ``namespace/copy_service_account``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, settings: GcsFaultTolerance,
                 namespace: str, copy_service_account: str, description: str) -> None:
        super().__init__(scope, construct_id)
        vpc = cluster.vpc
        self.password = secretsmanager.Secret(
            self, "Password", description=f"AUTH token of the Ray GCS cache ({description})",
            # ElastiCache AUTH: 16 to 128 printable characters, some punctuation refused.
            generate_secret_string=secretsmanager.SecretStringGenerator(password_length=64, exclude_punctuation=True))
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"Ray GCS cache ({description}): 6379 from the cluster nodes only")
        self.security_group.add_ingress_rule(ec2.Peer.security_group_id(cluster.cluster_security_group_id),
                                             ec2.Port.tcp(PORT), "Ray GCS on the cluster's nodes")
        subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids
        subnet_group = elasticache.CfnSubnetGroup(
            self, "Subnets", description=f"Ray GCS cache ({description})", subnet_ids=subnets)
        replicas = settings.cache_nodes > 1
        self.replication_group = elasticache.CfnReplicationGroup(
            self, "Cache",
            replication_group_description=f"Ray GCS ({description})",
            engine=ENGINE, engine_version=ENGINE_VERSION, cache_node_type=settings.cache_node_type,
            num_cache_clusters=settings.cache_nodes,
            automatic_failover_enabled=replicas, multi_az_enabled=replicas,
            cache_subnet_group_name=subnet_group.ref, security_group_ids=[self.security_group.security_group_id],
            port=PORT, transit_encryption_enabled=True, at_rest_encryption_enabled=True,
            auth_token=self.password.secret_value.unsafe_unwrap(),  # a {{resolve:secretsmanager:...}} reference
            snapshot_retention_limit=1,
        )
        self.endpoint = self.replication_group.attr_primary_end_point_address
        self.copy_role, self.copy_identity = pod_identity(
            self, "CopyRole", "CopyIdentity", cluster=cluster, namespace=namespace,
            service_account=copy_service_account,
            description=f"Copies the Ray GCS cache password into Kubernetes ({namespace}/{copy_service_account})")
        self.copy_role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"],
                                                         resources=[self.password.secret_arn]))
        acknowledge_gcs_redis(self)

"""Read-only AWS account checks to run before ``cdk deploy`` (``ray-llm-eks preflight``).

Each check answers one question the AWS sample leaves to hand, with the caller's own
credentials, and says how to fix a failure:

* ``instance-types-offered``: are the system and GPU instance types offered in the data-plane AZ?
* ``efa-supported``: does EC2 report EFA support for every GPU instance type?
* ``vcpu-quotas``: do the On-Demand vCPU quotas (G and VT: L-DB2E81BA; P: L-417A185B; Standard: L-1216C47A),
  minus what is already running, cover the planned nodes?
* ``eks-version``: does EKS offer the configured Kubernetes version in the region?
* ``capacity-reservations`` (only when a leg uses a reservation): does each reservation named by
  ID exist in the data-plane AZ, for the leg's instance type, platform and default tenancy, with
  enough instances for the legs' ``max_size``, active or scheduled, not ended (and is a Capacity
  Block one exactly when the leg says so)?
* ``cdk-bootstrap``: is the environment bootstrapped (SSM ``/cdk-bootstrap/<qualifier>/version``
  at a version current CDK accepts), and can the caller assume the CDK deploy role?

Only Describe/Get/List calls are made, plus ``sts:AssumeRole`` on the CDK deploy role, whose
credentials are discarded: that is the only way to prove the caller may use the role.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError as BotoConnectionError,
    CredentialRetrievalError,
    NoCredentialsError,
    PartialCredentialsError,
    SSOError,
    TokenRetrievalError,
)

# botocore's ways of saying "the credentials you configured cannot be obtained or used":
# a failing credential_process, an expired or missing SSO token, a refresh that failed.
_CREDENTIAL_ERRORS = (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError, SSOError, TokenRetrievalError)

from .base import instance_types
from .base.deployment import Deployment
from .base.pools import CAPACITY_BLOCK, ODCR

CDK_DEFAULT_QUALIFIER = "hnb659fds"
# Templates synthesized by CDK v2 carry a CheckBootstrapVersion rule that rejects bootstrap
# stacks older than version 6 (aws-cdk-lib DefaultStackSynthesizer, minimum bootstrap version).
CDK_MIN_BOOTSTRAP_VERSION = 6

G_AND_VT_QUOTA = "L-DB2E81BA"  # Running On-Demand G and VT instances (vCPUs)
STANDARD_QUOTA = "L-1216C47A"  # Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances (vCPUs)
P_QUOTA = "L-417A185B"  # Running On-Demand P instances (vCPUs): p4d, p4de, p5, p5e, p5en

# Which On-Demand vCPU quota an instance family counts against (Service Quotas, EC2). Families
# with quotas of their own that the library has no type of (Inf, Trn, DL, X, F, HPC, Mac, high
# memory) map to None; the
# longer prefixes are tried first so that "inf2" is not mistaken for the standard "i" family.
_QUOTA_BY_FAMILY_PREFIX: tuple[tuple[str, str | None], ...] = (
    ("inf", None), ("trn", None), ("dl", None), ("hpc", None), ("mac", None), ("u-", None),
    ("vt", G_AND_VT_QUOTA), ("g", G_AND_VT_QUOTA), ("p", P_QUOTA), ("x", None), ("f", None),
    *((letter, STANDARD_QUOTA) for letter in ("a", "c", "d", "h", "i", "m", "r", "t", "z")),
)
_QUOTA_NAMES = {
    G_AND_VT_QUOTA: "Running On-Demand G and VT instances",
    STANDARD_QUOTA: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    P_QUOTA: "Running On-Demand P instances",
}

# Error codes that mean "these credentials do not work", as opposed to "not allowed to do this".
_BAD_CREDENTIAL_CODES = {
    "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
    "SignatureDoesNotMatch", "InvalidAccessKeyId", "AuthFailure",
}


class NoCredentials(RuntimeError):
    """No usable AWS credentials: preflight cannot ask AWS anything."""


class AwsUnreachable(RuntimeError):
    """The AWS endpoints cannot be reached (network, proxy, or a region name with no endpoint)."""


class CheckStatus(str, Enum):
    passed = "pass"
    warned = "warn"
    """Passed, with something to act on soon (a Capacity Block that ends within a day)."""
    failed = "fail"


@dataclass(frozen=True)
class CheckResult:
    name: str
    title: str
    status: CheckStatus
    detail: str
    fix: str | None = None

    @property
    def passed(self) -> bool:
        return self.status is not CheckStatus.failed


@dataclass(frozen=True)
class PreflightReport:
    account: str
    caller_arn: str
    region: str
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    def summary(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "account": self.account,
            "caller_arn": self.caller_arn,
            "region": self.region,
            "checks": [
                {"name": r.name, "title": r.title, "status": r.status.value, "detail": r.detail, "fix": r.fix}
                for r in self.results
            ],
        }


def _passed(name: str, title: str, detail: str) -> CheckResult:
    return CheckResult(name, title, CheckStatus.passed, detail)


def _failed(name: str, title: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, title, CheckStatus.failed, detail, fix)


def _api_problem(error: ClientError | BotoCoreError, permission: str) -> tuple[str, str]:
    """A failed call explained, with the permission it needs when that is the cause."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "Unknown")
        message = error.response.get("Error", {}).get("Message", "")
        if code in _BAD_CREDENTIAL_CODES:
            raise NoCredentials(f"AWS rejected the credentials ({code}): {message}") from error
        if "AccessDenied" in code or code == "UnauthorizedOperation":
            return (f"could not check: {code}", f"grant the caller {permission}")
        return (f"could not check: {code}: {message}", f"retry; the call needs {permission}")
    return (f"could not reach AWS: {error}", "check network access to the AWS API endpoints and retry")


# --- individual checks -------------------------------------------------------------------------

def check_instance_types_offered(ec2: Any, az: str, types: Iterable[str]) -> CheckResult:
    name, title = "instance-types-offered", f"instance types offered in {az}"
    wanted = sorted(set(types))
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "location", "Values": [az]}, {"Name": "instance-type", "Values": wanted}],
        )
        offered = {o["InstanceType"] for page in pages for o in page["InstanceTypeOfferings"]}
        missing = [t for t in wanted if t not in offered]
        if not missing:
            return _passed(name, title, f"{', '.join(wanted)} offered in {az}")
        # Say where the missing types ARE offered, so the fix is concrete.
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": missing}]
        )
        elsewhere: dict[str, set[str]] = {t: set() for t in missing}
        for page in pages:
            for offering in page["InstanceTypeOfferings"]:
                elsewhere[offering["InstanceType"]].add(offering["Location"])
    except (ClientError, BotoCoreError) as error:
        detail, fix = _api_problem(error, "ec2:DescribeInstanceTypeOfferings")
        return _failed(name, title, detail, fix)
    where = "; ".join(
        f"{t}: {', '.join(sorted(azs)) if azs else 'no AZ of this region'}" for t, azs in elsewhere.items()
    )
    return _failed(
        name, title, f"not offered in {az}: {', '.join(missing)}",
        f"set data_plane_az (and control_plane_azs) to an AZ that offers every type, or change the "
        f"instance type; offered in: {where}",
    )


def check_efa_supported(ec2: Any, gpu_types: Iterable[str]) -> CheckResult:
    name, title = "efa-supported", "GPU instance types support EFA"
    wanted = sorted(set(gpu_types))
    try:
        response = ec2.describe_instance_types(InstanceTypes=wanted)
    except (ClientError, BotoCoreError) as error:
        detail, fix = _api_problem(error, "ec2:DescribeInstanceTypes")
        return _failed(name, title, detail, fix)
    reported = {t["InstanceType"]: bool(t.get("NetworkInfo", {}).get("EfaSupported")) for t in response["InstanceTypes"]}
    without = [t for t in wanted if not reported.get(t, False)]
    if not without:
        return _passed(name, title, f"EC2 reports EfaSupported for {', '.join(wanted)}")
    return _failed(
        name, title, f"EC2 reports no EFA support for {', '.join(without)}",
        f"use a GPU instance type with EFA for prefill and decode: {', '.join(instance_types.efa_gpu_names())}",
    )


@dataclass(frozen=True)
class _QuotaNeed:
    code: str
    planned_vcpus: int
    planned: tuple[str, ...]


def quota_code_for(instance_type: str) -> str:
    """The On-Demand vCPU quota code an instance type counts against (G/VT, P or Standard)."""
    family = instance_type.split(".", 1)[0]
    for prefix, code in _QUOTA_BY_FAMILY_PREFIX:
        if family.startswith(prefix):
            if code is None:
                break
            return code
    raise ValueError(f"instance family {family!r} counts against none of the G/VT, P and Standard quotas")


def planned_vcpus_by_quota(config: Deployment) -> dict[str, _QuotaNeed]:
    """vCPUs each quota must cover: every node at its desired size (what the deploy starts)."""
    groups = [
        ("system", config.system.instance_type, config.system.count),
        ("prefill", config.prefill.pool.instance_type, config.prefill.pool.desired_size),
        ("decode", config.decode.pool.instance_type, config.decode.pool.desired_size),
    ]
    needs: dict[str, tuple[int, list[str]]] = {}
    for role, itype, count in groups:
        code = quota_code_for(itype)
        vcpus, planned = needs.get(code, (0, []))
        needs[code] = (vcpus + count * instance_types.INSTANCE_TYPES[itype].vcpus, [*planned, f"{count} x {itype} ({role})"])
    return {code: _QuotaNeed(code, vcpus, tuple(planned)) for code, (vcpus, planned) in needs.items()}


def _running_vcpus_by_quota(ec2: Any) -> dict[str, int]:
    """vCPUs of On-Demand instances already pending or running: they use the same quotas.

    Spot and scheduled instances count against separate quotas, so they are left out."""
    used: dict[str, int] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                if instance.get("InstanceLifecycle") in ("spot", "scheduled"):
                    continue
                try:
                    code = quota_code_for(instance["InstanceType"])
                except ValueError:
                    continue  # Inf, Trn, X, ... count against quotas this deployment does not use
                cpu = instance.get("CpuOptions") or {}
                vcpus = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1)
                if not vcpus:
                    known = instance_types.INSTANCE_TYPES.get(instance["InstanceType"])
                    vcpus = known.vcpus if known else 0
                used[code] = used.get(code, 0) + vcpus
    return used


def _quota_value(quotas: Any, code: str) -> float:
    try:
        return quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    # Never adjusted in this account: the AWS default applies.
    return quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]


def check_vcpu_quotas(ec2: Any, quotas: Any, config: Deployment) -> CheckResult:
    name, title = "vcpu-quotas", "On-Demand vCPU quotas cover the planned nodes"
    needs = planned_vcpus_by_quota(config)
    try:
        used = _running_vcpus_by_quota(ec2)
    except (ClientError, BotoCoreError) as error:
        detail, fix = _api_problem(error, "ec2:DescribeInstances")
        return _failed(name, title, detail, fix)
    lines, shortfalls = [], []
    for code, need in sorted(needs.items()):
        try:
            quota = _quota_value(quotas, code)
        except (ClientError, BotoCoreError) as error:
            detail, fix = _api_problem(error, "servicequotas:GetServiceQuota")
            return _failed(name, title, f"{_QUOTA_NAMES[code]} ({code}): {detail}", fix)
        in_use = used.get(code, 0)
        available = quota - in_use
        lines.append(f"{code} {_QUOTA_NAMES[code]}: quota {quota:g}, in use {in_use}, "
                     f"needed {need.planned_vcpus} ({', '.join(need.planned)})")
        if available < need.planned_vcpus:
            shortfalls.append((code, quota, in_use, need))
    if not shortfalls:
        return _passed(name, title, "; ".join(lines))
    fixes = [
        f"request {code} ({_QUOTA_NAMES[code]}) of at least {need.planned_vcpus + in_use:g} vCPUs in "
        f"{config.region} (Service Quotas console, or `aws service-quotas request-service-quota-increase "
        f"--service-code ec2 --quota-code {code} --desired-value {need.planned_vcpus + in_use}`), "
        "or stop instances that use it"
        for code, quota, in_use, need in shortfalls
    ]
    detail = "; ".join(
        f"{code}: {need.planned_vcpus} vCPUs needed, {max(quota - in_use, 0):g} available "
        f"(quota {quota:g}, in use {in_use})" for code, quota, in_use, need in shortfalls
    )
    return _failed(name, title, detail, "; ".join(fixes))


def check_eks_version(eks: Any, version: str, region: str) -> CheckResult:
    name, title = "eks-version", f"EKS offers Kubernetes {version} in {region}"
    try:
        response = eks.describe_cluster_versions(clusterVersions=[version])
    except (ClientError, BotoCoreError) as error:
        detail, fix = _api_problem(error, "eks:DescribeClusterVersions")
        return _failed(name, title, detail, fix)
    found = [v for v in response.get("clusterVersions", []) if v.get("clusterVersion") == version]
    if not found:
        return _failed(name, title, f"EKS does not offer Kubernetes {version} in {region}",
                       "use a region that offers it; cluster.kubernetes_version must match the kubectl layer "
                       "the library ships, so the version itself cannot be changed in the config")
    status = found[0].get("versionStatus") or str(found[0].get("status", "")).upper().replace("-", "_")
    if status == "STANDARD_SUPPORT":
        return _passed(name, title, f"Kubernetes {version} is in standard support")
    if status == "EXTENDED_SUPPORT":
        return _passed(name, title, f"Kubernetes {version} is in EXTENDED support: the control plane "
                                    "costs $0.60/h instead of $0.10/h")
    return _failed(name, title, f"Kubernetes {version} status is {status or 'unknown'}",
                   "upgrade the library to one that ships a supported Kubernetes version")


def check_cdk_bootstrap(ssm: Any, sts: Any, account: str, region: str,
                        qualifier: str = CDK_DEFAULT_QUALIFIER, partition: str = "aws") -> CheckResult:
    name, title = "cdk-bootstrap", f"CDK bootstrap of aws://{account}/{region}"
    bootstrap = f"cdk bootstrap aws://{account}/{region}"
    parameter = f"/cdk-bootstrap/{qualifier}/version"
    try:
        value = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return _failed(name, title, f"SSM parameter {parameter} does not exist: the environment is not bootstrapped",
                           f"run `{bootstrap}` with administrator credentials")
        detail, fix = _api_problem(error, f"ssm:GetParameter on {parameter}")
        return _failed(name, title, detail, fix)
    except BotoCoreError as error:
        detail, fix = _api_problem(error, f"ssm:GetParameter on {parameter}")
        return _failed(name, title, detail, fix)
    try:
        version = int(value)
    except ValueError:
        return _failed(name, title, f"{parameter} holds {value!r}, not a version number", f"re-run `{bootstrap}`")
    if version < CDK_MIN_BOOTSTRAP_VERSION:
        return _failed(name, title, f"bootstrap version {version} is older than the {CDK_MIN_BOOTSTRAP_VERSION} CDK v2 requires",
                       f"re-run `{bootstrap}` to upgrade the bootstrap stack")
    role = f"arn:{partition}:iam::{account}:role/cdk-{qualifier}-deploy-role-{account}-{region}"
    try:
        sts.assume_role(RoleArn=role, RoleSessionName="ray-llm-eks-preflight", DurationSeconds=900)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "Unknown")
        return _failed(name, title, f"bootstrap version {version}, but the caller cannot assume {role} ({code})",
                       "deploy with credentials allowed to assume the CDK deploy role (the bootstrap roles trust "
                       f"principals of account {account} that have sts:AssumeRole on them)")
    except BotoCoreError as error:
        detail, fix = _api_problem(error, f"sts:AssumeRole on {role}")
        return _failed(name, title, detail, fix)
    return _passed(name, title, f"bootstrap version {version}; the caller can assume the CDK deploy role")


RESERVATION_ENDS_SOON = timedelta(hours=24)
"""A reservation ending within this is a warning: EKS scales a Capacity Block node group to 0
forty minutes before the block ends and EC2 starts shutting its instances down thirty minutes
before (EKS user guide, capacity-blocks-mng), so a deploy then serves for less than a day."""
_USABLE_STATES = {"active", "scheduled"}
_LINUX = "Linux/UNIX"  # the platform of the AL2023 EKS-optimized AMIs the GPU node groups boot


def _reserved_legs(config: Deployment) -> dict[str, list[Any]]:
    """The legs targeting a reservation by ID, by reservation ID (both legs may share one)."""
    legs: dict[str, list[Any]] = {}
    for leg in (config.prefill, config.decode):
        if leg.pool.capacity.reservation_id is not None:
            legs.setdefault(leg.pool.capacity.reservation_id, []).append(leg.pool)
    return legs


def _when(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def check_capacity_reservations(ec2: Any, config: Deployment, now: datetime | None = None) -> CheckResult:
    """Each reservation a leg targets by ID, as ``DescribeCapacityReservations`` reports it.

    A leg using a resource group or a preference names no single reservation: EC2 matches one at
    launch, so it is listed in the detail as not checked."""
    name, title = "capacity-reservations", "capacity reservations match the legs"
    now = now or datetime.now(timezone.utc)
    legs = _reserved_legs(config)
    try:
        # No IDs would list every reservation of the account: nothing to ask then.
        response = (ec2.describe_capacity_reservations(CapacityReservationIds=sorted(legs)) if legs
                    else {"CapacityReservations": []})
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("InvalidCapacityReservationId.NotFound",
                                                           "InvalidCapacityReservationId.Malformed"):
            return _failed(name, title, f"EC2 does not know {', '.join(sorted(legs))} in {config.region}: "
                           f"{error.response['Error'].get('Message', '')}",
                           "set capacity.reservation_id to a reservation of this account in this region "
                           "(`aws ec2 describe-capacity-reservations`)")
        detail, fix = _api_problem(error, "ec2:DescribeCapacityReservations")
        return _failed(name, title, detail, fix)
    except BotoCoreError as error:
        detail, fix = _api_problem(error, "ec2:DescribeCapacityReservations")
        return _failed(name, title, detail, fix)
    found = {r["CapacityReservationId"]: r for r in response.get("CapacityReservations", [])}
    passed, problems, fixes, warnings = [], [], [], []
    for reservation_id, pools in sorted(legs.items()):
        roles = " and ".join(pool.role for pool in pools)
        reservation = found.get(reservation_id)
        if reservation is None:
            problems.append(f"{reservation_id} ({roles}): not found")
            fixes.append(f"{roles}.capacity.reservation_id: a reservation of this account in {config.region}")
            continue
        wrong: list[str] = []
        az, itype = reservation.get("AvailabilityZone"), reservation.get("InstanceType")
        if az != config.data_plane_az:
            wrong.append(f"is in {az}, the data plane in {config.data_plane_az}")
            fixes.append(f"set data_plane_az to {az}, or use a reservation in {config.data_plane_az}")
        for pool in pools:
            if itype != pool.instance_type:
                wrong.append(f"reserves {itype}, {pool.role} runs {pool.instance_type}")
                fixes.append(f"set {pool.role}.instance_type to {itype}, or use a reservation for {pool.instance_type}")
        platform = reservation.get("InstancePlatform")
        if platform != _LINUX:
            wrong.append(f"is for {platform}, the nodes boot {_LINUX} (AL2023)")
            fixes.append(f"use a {_LINUX} reservation")
        tenancy = reservation.get("Tenancy", "default")
        if tenancy != "default":
            # The launch template asks for no tenancy, so the nodes launch on shared hardware and
            # match only a default-tenancy reservation (tenancy is one of the attributes EC2 matches).
            wrong.append(f"has {tenancy} tenancy, the nodes launch with default tenancy")
            fixes.append("use a reservation with default tenancy")
        total = reservation.get("TotalInstanceCount", 0)
        needed = sum(pool.max_size for pool in pools)
        if total < needed:
            wrong.append(f"holds {total} instances, max_size needs {needed}")
            fixes.append(f"lower {roles}.max_size to {total} in all, or reserve {needed} instances")
        # ReservationType: "default" (an ODCR) or "capacity-block" (botocore's EC2 model, CapacityReservationType).
        is_block = reservation.get("ReservationType") == "capacity-block"
        for pool in pools:
            if is_block != (pool.capacity.type == CAPACITY_BLOCK):
                actual = "a Capacity Block" if is_block else "an On-Demand Capacity Reservation"
                wrong.append(f"is {actual}, {pool.role}.capacity.type is {pool.capacity.type}")
                fixes.append(f"set {pool.role}.capacity.type to {CAPACITY_BLOCK if is_block else ODCR}")
        state, start, end = reservation.get("State"), reservation.get("StartDate"), reservation.get("EndDate")
        if state not in _USABLE_STATES:
            wrong.append(f"is {state}")
            fixes.append("use an active or scheduled reservation")
        elif end is not None and end <= now:
            wrong.append(f"ended {_when(end)}")
            fixes.append("use a reservation that has not ended")
        if wrong:
            problems.append(f"{reservation_id} ({roles}) " + "; ".join(wrong))
            continue
        when = []
        if state == "scheduled" and start is not None:
            # EKS keeps a non-zero desired size and launches fail until the block starts (capacity-blocks-mng).
            when.append(f"starts {_when(start)}: nodes fail to launch until then")
        if end is not None:
            when.append(f"ends {_when(end)}")
            if end - now <= RESERVATION_ENDS_SOON:
                warnings.append(f"{reservation_id} ends {_when(end)}, within {RESERVATION_ENDS_SOON.total_seconds() / 3600:g} h"
                                + ("; EKS scales the node group to 0 forty minutes before" if is_block else ""))
        passed.append(f"{reservation_id} ({roles}): {itype} x {total} ({reservation.get('AvailableInstanceCount', 0)} "
                      f"available) in {az}, {state}" + (f", {', '.join(when)}" if when else ""))
    unchecked = [f"{leg.pool.role} ({leg.pool.capacity.resource_group_arn or 'preference ' + str(leg.pool.capacity.preference)})"
                 for leg in (config.prefill, config.decode)
                 if leg.pool.capacity.reserved and leg.pool.capacity.reservation_id is None]
    if unchecked:
        passed.append(f"not checked, EC2 picks the reservation at launch: {', '.join(unchecked)}")
    if problems:
        return _failed(name, title, "; ".join(problems), "; ".join(dict.fromkeys(fixes)))
    if warnings:
        return CheckResult(name, title, CheckStatus.warned, "; ".join(passed + warnings))
    return _passed(name, title, "; ".join(passed))


# --- the whole run ---------------------------------------------------------------------------

CHECK_TITLES = (
    "instance types offered in the data-plane AZ",
    "GPU instance types support EFA",
    "On-Demand vCPU quotas",
    "EKS Kubernetes version",
    "CDK bootstrap",
)
CAPACITY_TITLE = "capacity reservations"


def check_titles(config: Deployment) -> tuple[str, ...]:
    """The checks ``run_preflight`` runs for ``config``, in order (the reservations only when a leg
    names one or uses one)."""
    reserved = any(leg.pool.capacity.reserved for leg in (config.prefill, config.decode))
    return CHECK_TITLES[:4] + ((CAPACITY_TITLE,) if reserved else ()) + CHECK_TITLES[4:]


def caller_identity(session: boto3.Session) -> dict[str, str]:
    """Who the credentials belong to; :class:`NoCredentials` when there are none or AWS rejects them."""
    try:
        if session.get_credentials() is None:
            raise NoCredentials("no AWS credentials found")
        return session.client("sts").get_caller_identity()
    except _CREDENTIAL_ERRORS as error:
        raise NoCredentials(f"no usable AWS credentials: {error}") from error
    except BotoConnectionError as error:
        raise AwsUnreachable(f"cannot reach AWS STS: {error}") from error
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "Unknown")
        if code in _BAD_CREDENTIAL_CODES:
            raise NoCredentials(f"AWS rejected the credentials ({code})") from error
        raise


def run_preflight(config: Deployment, session: boto3.Session | None = None,
                  on_check: Callable[[str], None] | None = None,
                  qualifier: str = CDK_DEFAULT_QUALIFIER) -> PreflightReport:
    """Run every check in the config's region. ``on_check(title)`` is called before each one
    (the CLI advances its progress bar with it)."""
    session = session or boto3.Session(region_name=config.region)
    identity = caller_identity(session)
    account = identity["Account"]
    ec2 = session.client("ec2", region_name=config.region)
    announce = on_check or (lambda title: None)

    gpu_types = [config.prefill.pool.instance_type, config.decode.pool.instance_type]
    results = []
    announce(CHECK_TITLES[0])
    results.append(check_instance_types_offered(ec2, config.data_plane_az, [config.system.instance_type, *gpu_types]))
    announce(CHECK_TITLES[1])
    results.append(check_efa_supported(ec2, gpu_types))
    announce(CHECK_TITLES[2])
    results.append(check_vcpu_quotas(ec2, session.client("service-quotas", region_name=config.region), config))
    announce(CHECK_TITLES[3])
    results.append(check_eks_version(session.client("eks", region_name=config.region),
                                     config.cluster.kubernetes_version, config.region))
    if CAPACITY_TITLE in check_titles(config):
        announce(CAPACITY_TITLE)
        results.append(check_capacity_reservations(ec2, config))
    announce(CHECK_TITLES[4])
    results.append(check_cdk_bootstrap(session.client("ssm", region_name=config.region),
                                       session.client("sts", region_name=config.region), account, config.region,
                                       qualifier, partition=identity["Arn"].split(":")[1]))
    return PreflightReport(account=account, caller_arn=identity["Arn"], region=config.region, results=tuple(results))

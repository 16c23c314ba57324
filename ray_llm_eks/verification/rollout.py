"""Phases 1 and 2 of the gate: roll the pods to the deployed spec, and wait until they serve it.

KubeRay 1.4.0 with ``upgradeStrategy: None`` applies no pod-template or replica change to a
running RayCluster (``rayservice_controller.go``: replicas are cleared before the hash, a changed
template only counts when worker groups are appended). Every pod template carries the hash of the
cluster spec it was rendered from; when the active cluster's pods carry another hash, the gate
deletes that RayCluster, and KubeRay, finding neither an active nor a pending cluster, builds a new
one from the RayService's current spec and promotes it once its Serve applications run
(``shouldPrepareNewCluster``: the nil/nil case comes before the upgrade-strategy check). The old
pods go first, so no second set of GPUs is needed.

A pending RayCluster built from another spec is deleted too. That is the rollback: a deploy whose
new cluster never serves leaves it pending, and when CloudFormation rolls the RayService back to
the previous spec, KubeRay 1.4.0 neither replaces nor re-specs a pending cluster whose hash differs
(``rayservice_controller.go`` at v1.4.0: ``shouldUpdateCluster`` lines 631-657 and
``shouldPrepareNewCluster`` 689-711), so the failed spec would keep its GPUs forever. Deleted, it is
recreated under the same name from the current spec (``reconcileRayCluster``, 510-514).

While it waits, the gate fails at once (not at its deadline) when the cluster built from its spec
cannot serve: Serve reports ``DEPLOY_FAILED`` for the pending cluster, or a pod of it waits on its
image or on a node for longer than ``stuck_pod_seconds``. Only pods controlled by the RayCluster's
uid count (:meth:`~.kube.Kube.ray_cluster_pods`): a pod planted with the cluster's labels neither
makes the gate delete a healthy cluster nor passes for one of its pods.

Ready means: the RayService's ``Ready`` condition is True, its active cluster's pods all carry the
expected hash and are Ready, one worker pod per GPU node of each role, and the Serve application
runs the rendered config. The gate learns Serve's state from the RayService, through the
Kubernetes API, never from Ray's dashboard (8265): KubeRay writes each application's status there
(``activeServiceStatus.applicationStatuses``, ``calculateStatus`` in ``rayservice_controller.go``
at v1.4.0 and v1.5.1), so the gate needs neither the head's port nor, with token authentication,
the cluster's Ray token (which KubeRay keeps in a Secret named after a RayCluster whose name it
makes up, so no RBAC rule could name it). What the gate gives up for it: Ray's own copy of the
deployed arguments. Instead the RayService as stored must carry the rendered ``serveConfigV2``
(JSON text, which KubeRay reads as YAML), KubeRay must have observed its generation
(``status.observedGeneration``), and the application's status must hold for
``serve_settle_seconds``: KubeRay reads Serve's status before it submits a changed config in the
same reconcile (``reconcileServe``, v1.5.1 lines 1637-1645), so the first status written for a new
generation is still the previous config's; the next reconcile, ``ServiceDefaultRequeueDuration``
(2 s) later, reads the new one. When KubeRay last submitted the config (its
``UpdatedServeApplications`` Event on the RayService) bounds the worker logs the gate reads.

The rollout below holds for KubeRay 1.4.0 and 1.5.1 alike (``shouldPrepareNewCluster`` and
``shouldUpdateCluster``: v1.5.1 lines 1009-1088 keep the nil/nil case first and, with
``upgradeStrategy: None``, neither replace nor re-spec a pending cluster).
"""

from __future__ import annotations

from typing import Any, Mapping

from . import evidence, objects, reads
from .kube import ApiError, NoClusterAccess
from .shared import wire
from .state import Phase

READY_CONDITION = "Ready"
SERVE_UPDATED_EVENT_REASON = "UpdatedServeApplications"
"""The Event KubeRay records on the RayService each time it submits ``serveConfigV2`` to a
RayCluster (``reconcileServe``, rayservice_controller.go@v1.4.0:1043, @v1.5.1:1649)."""
LOG_SINCE_MARGIN_SECONDS = 5.0
"""Worker log lines are read from the current Serve deployment's time minus this (clock skew)."""


class Rollout(Phase):
    def wait_until_ready(self) -> str | None:
        """The name of the active RayCluster once it runs the expected spec and its Serve application
        runs the expected config; None (with the reason reported) when the deadline passes first.

        Transient API errors (unreachable, 5xx, 429) are retried until the deadline; refused
        credentials end the run at once.
        """
        c = self.config
        deleted: list[str] = []
        self.deleted_uids: set[str] = set()
        self.stuck_since: dict[tuple[str, str], float] = {}
        self.replaced_since: float | None = None
        self.deploy_failed_uid: str | None = None
        self.serve_seen: tuple[tuple[Any, ...], float] | None = None
        """(generation, active cluster, application status) as first read, and when."""
        state = "the RayService does not exist"
        started = self.clock()
        while True:
            try:
                outcome = self._poll_once(deleted)
            except (NoClusterAccess, ApiError) as error:
                if not error.transient:
                    raise
                outcome = f"the API server did not answer ({error})"
            if isinstance(outcome, tuple):
                active, ready_state = outcome
                if ready_state is None:
                    self.report.sections["service"] = {
                        "ready": True, "active_cluster": active, "waited_s": round(self.clock() - started, 1),
                        "rollout": {"recreated": deleted, "cluster_spec_hash": c.cluster_spec_hash},
                    }
                    return active
                state = ready_state
            elif outcome is False:
                return None  # a reason that waiting cannot fix was reported
            else:
                state = outcome
            if self._remaining() <= c.poll_seconds:
                self.report.sections["service"] = {"ready": False, "last_state": state, "rollout": {"recreated": deleted}}
                self.report.fail(f"the RayService {c.namespace}/{c.ray_service} was not ready within "
                                 f"{c.deadline_seconds:.0f} s ({state})")
                return None
            self.sleep(c.poll_seconds)

    def _poll_once(self, deleted: list[str]) -> tuple[str, str | None] | str | bool:
        """One look: (active cluster, None) when ready; (active, why not) or a state string to keep
        waiting; False when the gate must stop."""
        c = self.config
        service = self.kube.ray_service(c.namespace, c.ray_service)
        if service is None:
            return "the RayService does not exist"
        applied = objects.template_hashes(service, c.hash_annotation, missing="(none)")
        if applied != {c.cluster_spec_hash}:
            carried = (f"the RayService {c.namespace}/{c.ray_service} in the cluster carries cluster spec hash "
                       f"{sorted(applied)}, not {c.cluster_spec_hash}")
            if self.replaced_since is None:
                self.replaced_since = self.clock()
            if c.as_deploy_job and self.clock() - self.replaced_since < c.replaced_grace_seconds:
                return (f"{carried}; waiting up to {c.replaced_grace_seconds:.0f} s for it to come back (a rollback "
                        "may apply this gate before the RayService)")
            self.report.fail(f"{carried}: a newer deploy replaced it, or it was edited by hand")
            return False
        self.replaced_since = None
        if c.ray_auth == "token":
            stored = ((service.get("spec") or {}).get("rayClusterConfig") or {}).get("authOptions") or {}
            if stored.get("mode") != "token":
                self.report.fail(
                    f"the RayService {c.namespace}/{c.ray_service} as stored has no authOptions.mode token, so Ray runs "
                    "without authentication: the cluster's RayService CRD predates KubeRay 1.5.1 and the API server "
                    "dropped the field (helm upgrade does not update CRDs; apply the operator version's CRDs)")
                return False
        status = service.get("status") or {}
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName") or ""
        pending_status = status.get("pendingServiceStatus") or {}
        pending = pending_status.get("rayClusterName") or ""
        self.active_cluster = active
        active_object = self._live_cluster(active)  # KubeRay keeps naming a deleted one until it promotes another
        pods = self.kube.ray_cluster_pods(c.namespace, active, found=active_object) if active_object else []
        stale = sorted({objects.annotation(p, c.hash_annotation) or "(none)" for p in pods} - {c.cluster_spec_hash})
        if not c.rollout and active and stale:
            self.report.fail(f"the running pods of {active} carry cluster spec {', '.join(stale)}, the deployed spec is "
                             f"{c.cluster_spec_hash}: the pods were not rolled out (the deploy's gate Job does that; "
                             "this run does not)")
            return False
        if c.rollout and active_object is not None and stale:
            self.log(f"active RayCluster {active} runs cluster spec {stale}; deleting it so KubeRay recreates it "
                     f"from spec {c.cluster_spec_hash}")
            self._delete(active, active_object, deleted)
        pending_object = self._live_cluster(pending)
        failure: list[str] = []
        if pending_object is not None:
            built_from = sorted(objects.cluster_template_hashes(pending_object.get("spec") or {}, c.hash_annotation)
                                or {"(none)"})
            if built_from != [c.cluster_spec_hash]:
                if not c.rollout:
                    self.report.fail(f"the pending RayCluster {pending} was built from cluster spec "
                                     f"{', '.join(built_from)}, the deployed spec is {c.cluster_spec_hash}: a failed "
                                     "deploy's, which KubeRay 1.4.0 never replaces (this run does not roll out)")
                    return False
                self.log(f"pending RayCluster {pending} was built from cluster spec {built_from} (a deploy that did "
                         "not become ready); deleting it so KubeRay rebuilds it from spec "
                         f"{c.cluster_spec_hash}")
                self._delete(pending, pending_object, deleted)
            else:
                failure = self._cannot_serve(pending, pending_object, pending_status)
        elif active_object is not None and not stale:
            failure = self._cannot_serve(active, active_object, None, pods)
        if failure:
            for reason in failure:
                self.report.fail(reason)
            return False
        ready = objects.condition_true(service, READY_CONDITION)
        current = [p for p in pods if objects.annotation(p, c.hash_annotation) == c.cluster_spec_hash]
        enough, counts = self._enough_ready(pods, current)
        state = (f"Ready={ready}, active cluster {active or '(none)'}, pods ready on spec {c.cluster_spec_hash}: "
                 f"{counts}")
        # KubeRay 1.4.0 keeps a deleted cluster as active until it promotes the new one.
        if not (ready and active_object is not None and not stale and enough):
            waiting = self._pods_waiting(c.namespace)
            return active, state + (f"; {waiting}" if waiting else "")
        serve = self._serve_state(service, active)
        if serve is False:
            return False
        if serve is not None:
            return active, f"{state}; {serve}"
        return active, None

    def _live_cluster(self, name: str) -> dict[str, Any] | None:
        """RayCluster ``name`` unless it is missing, unnamed, or one this run deleted (still terminating)."""
        found = self.kube.ray_cluster(self.config.namespace, name) if name else None
        return None if found is None or _uid(found) in self.deleted_uids else found

    def _delete(self, name: str, found: Mapping[str, Any], deleted: list[str]) -> None:
        try:
            self.kube.delete_ray_cluster(self.config.namespace, name)
        except ApiError as error:
            if error.status != 404:
                raise
        self.deleted_uids.add(_uid(found))
        deleted.append(name)

    def _cannot_serve(self, cluster: str, found: Mapping[str, Any], pending_status: Mapping[str, Any] | None,
                      pods: list[dict[str, Any]] | None = None) -> list[str]:
        """Why the RayCluster built from this spec will never serve it (empty while it still may):
        Serve failed on the pending cluster, or a pod has waited on its image or on a node too long."""
        c = self.config
        if pods is None:
            pods = self.kube.ray_cluster_pods(c.namespace, cluster, found=found)
        app = ((pending_status or {}).get("applicationStatuses") or {}).get(c.application) or {}
        # KubeRay fills applicationStatuses only once the cluster's head is ready, and keeps the
        # last ones until then (a recreated pending cluster inherits its predecessor's): believe
        # DEPLOY_FAILED only from a cluster whose own head is ready, on two reads in a row.
        head_ready = any(objects.label(p, wire.RAY_NODE_TYPE_LABEL) == "head" and objects.pod_ready(p) for p in pods)
        failed_twice = app.get("status") == "DEPLOY_FAILED" and head_ready and self.deploy_failed_uid == _uid(found)
        self.deploy_failed_uid = _uid(found) if app.get("status") == "DEPLOY_FAILED" and head_ready else None
        if failed_twice:
            reasons = []
            if c.disaggregated:
                reasons += self._startup_failures(cluster)
            return [*reasons, f"Serve application {c.application!r} failed to deploy on the RayCluster {cluster} "
                              f"built from this spec: {(app.get('message') or '')[:500]}"]
        now, reasons = self.clock(), []
        stuck_keys = set()
        autoscaled = {role for role, expect in c.roles.items() if expect.autoscaled}
        for pod in pods:
            for reason, message in pod_stuck_reasons(pod):
                if reason == "Unschedulable" and objects.label(pod, wire.RAY_GROUP_LABEL) in autoscaled:
                    continue  # Cluster Autoscaler's to place, and the wait counts only the ready pods
                # The kubelet alternates ErrImagePull and ImagePullBackOff: one wait, whichever it shows.
                kind = "image" if reason in IMAGE_WAITS else reason
                key = ((pod.get("metadata") or {}).get("uid") or pod["metadata"]["name"], kind)
                stuck_keys.add(key)
                since = self.stuck_since.setdefault(key, now)
                if reason in NEVER_RESOLVES or now - since >= c.stuck_pod_seconds:
                    waited = f"has been {reason}" if reason in NEVER_RESOLVES else (
                        f"has been waiting for its image for {now - since:.0f} s ({reason})" if kind == "image"
                        else f"has been {reason} for {now - since:.0f} s")
                    reasons.append(f"pod {pod['metadata']['name']} of the RayCluster {cluster} built from this spec "
                                   f"{waited}: {message[:300]}")
        for key in set(self.stuck_since) - stuck_keys:
            del self.stuck_since[key]  # it moved on: a later wait starts its own count
        return reasons

    def _enough_ready(self, pods: list[dict[str, Any]], current: list[dict[str, Any]]) -> tuple[bool, str]:
        """Per role: a fixed role has exactly its pods, all ready; an autoscaled one at least one and
        at most its maximum ready, and a pod still starting (Pending while Cluster Autoscaler adds
        its node) is not waited for. The head: one, ready."""
        c, ok, parts = self.config, True, []
        groups = {"head": [p for p in pods if objects.label(p, wire.RAY_NODE_TYPE_LABEL) == "head"]}
        groups.update({role: [p for p in pods if objects.label(p, wire.RAY_GROUP_LABEL) == role] for role in c.roles})
        for group, members in groups.items():
            low, high = (1, 1) if group == "head" else c.roles[group].pod_range
            fixed = group == "head" or not c.roles[group].autoscaled
            ready = [p for p in members if p in current and objects.pod_ready(p)]
            ok = ok and (low <= len(ready) <= high if not fixed else len(ready) == low and len(members) == low)
            parts.append(f"{group} {len(ready)}/{low if low == high else f'{low} to {high}'}")
        return ok, ", ".join(parts)

    def _serve_state(self, service: Mapping[str, Any], active: str) -> str | bool | None:
        """None when the application runs the rendered config (as the RayService reports it, see the
        module docstring); a state to wait on; False on a failed deploy."""
        c = self.config
        stored = _serve_config_args(service, c.application)
        if stored is None:
            return f"the RayService's serveConfigV2 has no application {c.application!r} in JSON"
        differing = differences(c.serve_args, stored)
        if differing:
            return f"the RayService carries another Serve config (differs at {differing[0]})"
        generation = (service.get("metadata") or {}).get("generation")
        status = service.get("status") or {}
        if generation is not None and status.get("observedGeneration") != generation:
            return (f"KubeRay has not yet observed generation {generation} of the RayService "
                    f"(status.observedGeneration {status.get('observedGeneration')})")
        app = ((status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}).get(c.application)
        if app is None:
            self.serve_seen = None
            return f"Serve application {c.application!r} is not deployed yet"
        reading = (generation, active, app.get("status"))
        now = self.clock()
        if self.serve_seen is None or self.serve_seen[0] != reading:
            self.serve_seen = (reading, now)
        if now - self.serve_seen[1] < c.serve_settle_seconds:
            return (f"Serve application {c.application!r} is {app.get('status')} (KubeRay's status of the "
                    f"current generation, held for {c.serve_settle_seconds:.0f} s before it is believed)")
        self.application = {"status": app.get("status"), "message": app.get("message") or "",
                            "args": stored, "deployments": app.get("serveDeploymentStatuses") or {},
                            "last_deployed_time_s": self._serve_submitted(active)}
        if app.get("status") == "DEPLOY_FAILED":
            # Serve's message names the deployments, not why their engines died: the workers' logs
            # do (a LIBFABRIC plugin that cannot load libfabric, no EFA device for FI_PROVIDER=efa),
            # so their root causes come first (seen on the local twin, docs/twin.md).
            if c.disaggregated:
                for reason in self._startup_failures():
                    self.report.fail(reason)
            self.report.fail(f"Serve application {c.application!r} failed to deploy the spec's config: "
                             f"{(app.get('message') or '')[:500]}")
            return False
        if app.get("status") != "RUNNING":
            return f"Serve application {c.application!r} is {app.get('status')}"
        return None

    def _serve_submitted(self, cluster: str) -> float | None:
        """When KubeRay last submitted the Serve config to ``cluster`` (epoch seconds), from its
        ``UpdatedServeApplications`` Events on the RayService; None when none is left (the API
        server keeps Events an hour by default): the worker logs are then read whole."""
        c = self.config
        try:
            events = self.kube.events(c.namespace, kind="RayService", name=c.ray_service,
                                      reason=SERVE_UPDATED_EVENT_REASON)
        except (ApiError, NoClusterAccess):
            return None
        times = []
        for event in events:
            if str(event.get("message") or "").endswith(f"/{cluster}"):
                try:
                    times.append(objects.epoch(str(event.get("lastTimestamp") or event.get("eventTime") or "")))
                except ValueError:
                    continue  # no readable time: it bounds nothing
        return max(times, default=None)

    def _startup_failures(self, cluster: str | None = None) -> list[str]:
        """What the worker logs of ``cluster`` (default: the active one) say went wrong since the Serve
        deploy: the transport classifier's disqualifying lines only (a log without the startup lines
        proves nothing here, the engines never started)."""
        c = self.config
        deployed = self.application.get("last_deployed_time_s")
        since = objects.rfc3339(float(deployed) - LOG_SINCE_MARGIN_SECONDS) if deployed else None
        try:
            pods = self.kube.ray_cluster_pods(c.namespace, cluster or self.active_cluster,
                                              {wire.RAY_NODE_TYPE_LABEL: "worker"})
            logs = {p["metadata"]["name"]: self.kube.pod_log(c.namespace, p["metadata"]["name"], c.worker_container,
                                                            since=since) for p in pods}
        except (ApiError, NoClusterAccess) as error:
            return [f"cannot read the worker logs to say why the engines did not start: {error}"]
        result = evidence.classify_logs(logs, c.expected_backend, c.expected_provider, require_startup=False)
        return [r for r in result["reasons"] if r != "no worker logs to read"]

    def job_running(self, name: str) -> bool:
        """Whether Job ``name`` exists and has neither completed nor failed."""
        try:
            job = self.kube.job(self.config.namespace, name)
        except ApiError as error:
            if error.status == 404:
                return False  # gone: a later deploy's prune, or never created
            raise
        status = job.get("status") or {}
        finished = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        return not (finished & {"Complete", "Failed"} or status.get("succeeded") or status.get("failed"))

    def _pods_waiting(self, namespace: str) -> str:
        """Why Ray pods of this service are not running yet (Pending, image pull, crash), for the report."""
        try:
            pods = self.kube.pods(namespace, {wire.INSTANCE_LABEL: self.config.ray_service})
        except (ApiError, NoClusterAccess):
            return ""
        reasons = []
        for pod in pods:
            if wire.RAY_CLUSTER_LABEL not in (pod.get("metadata") or {}).get("labels", {}):
                continue  # not a Ray pod (the EFA counter readers carry the instance label too)
            status = pod.get("status") or {}
            why = [f"{w['reason']}" + (f": {w.get('message', '')[:120]}" if w.get("message") else "")
                   for w in ((cs.get("state") or {}).get("waiting") or {} for cs in status.get("containerStatuses") or ())
                   if w.get("reason")]
            why += [f"{cond.get('reason')}: {cond.get('message', '')[:160]}" for cond in status.get("conditions") or ()
                    if cond.get("type") == "PodScheduled" and cond.get("status") == "False"]
            if why:
                reasons.append(f"{pod['metadata']['name']} {status.get('phase', '')} ({'; '.join(why)})")
        return "; ".join(reasons[:4])


IMAGE_WAITS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
"""Container waiting reasons of a kubelet that cannot get the image (kubelet's ``images`` package)."""
NEVER_RESOLVES = frozenset({"InvalidImageName", "ErrImageNeverPull"})
"""Of those, the ones no retry can fix: the name does not parse, or the pull policy forbids pulling."""


def pod_stuck_reasons(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(reason, message) for each way ``pod`` is waiting that only time would tell apart from never:
    a container waiting on its image, or the scheduler finding no node (``Unschedulable``)."""
    status = pod.get("status") or {}
    found = [(w["reason"], w.get("message") or "")
             for w in (((cs.get("state") or {}).get("waiting") or {})
                       for cs in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())])
             if w.get("reason") in IMAGE_WAITS]
    found += [("Unschedulable", cond.get("message") or "") for cond in status.get("conditions") or ()
              if cond.get("type") == "PodScheduled" and cond.get("status") == "False"
              and cond.get("reason") == "Unschedulable"]
    return found


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def differences(expected: Any, actual: Any, path: str = "args") -> list[str]:
    """Paths where ``actual`` differs from ``expected``; keys only in ``actual`` are Ray's defaults and ignored."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [path]
        found: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                found.append(f"{path}.{key}")
            else:
                found.extend(differences(value, actual[key], f"{path}.{key}"))
        return found
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [path]


def _serve_config_args(service: Mapping[str, Any], application: str) -> dict[str, Any] | None:
    """The ``args`` of ``application`` in the RayService's ``serveConfigV2`` as stored (the chart
    writes it as JSON text: the gate has no YAML parser); None when it is not JSON or lacks it."""
    text = (service.get("spec") or {}).get("serveConfigV2")
    try:
        config = reads.json_loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    apps = config.get("applications") if isinstance(config, dict) else None
    for app in apps if isinstance(apps, list) else ():
        if isinstance(app, dict) and app.get("name") == application:
            args = app.get("args")
            return args if isinstance(args, dict) else {}
    return None


"""The admission policy's CEL, evaluated with cel-python (no API server here), and pods as their
controllers would create them from the rendered templates.

Kubernetes evaluates ``variables`` by name and each validation with ``object``, ``oldObject``,
``request`` and ``variables`` bound; :func:`admits` does that with the expressions as rendered, and
picks the bindings by the namespace's ``kubernetes.io/metadata.name`` (:func:`selects`, Kubernetes'
label selector semantics).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import celpy
from celpy import celtypes

OPERATOR = "system:serviceaccount:kuberay:kuberay-operator"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"

DEFAULT_TOLERATION_SECONDS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
"""What the DefaultTolerationSeconds admission plugin adds to every pod (before validation)."""
DAEMONSET_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{condition}", "operator": "Exists", "effect": effect}
    for condition, effect in (("not-ready", "NoExecute"), ("unreachable", "NoExecute"),
                              ("disk-pressure", "NoSchedule"), ("memory-pressure", "NoSchedule"),
                              ("pid-pressure", "NoSchedule"), ("unschedulable", "NoSchedule"))]
"""What the DaemonSet controller adds to its pods (kubernetes ``pkg/controller/daemon/util``,
``AddOrUpdateDaemonPodTolerations``)."""

def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector against a namespace's labels: every matchLabels pair and every expression."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]
        if not ok:
            return False
    return True


class _ShortCircuit(celpy.evaluation.Evaluator):
    """celpy's evaluator, but ``||`` stops at a true left side and ``&&`` at a false one, as cel-go
    (Kubernetes' CEL) does (google/cel-go interpreter/interpretable.go:254-262, 297-305 @v0.28.1).
    celpy 0.5 evaluates both sides, then combines them with ``logical_or``/``logical_and``, which
    return that left side whatever the right one is (celpy/celtypes.py:303-387): the values are the
    same, without the right side's work (most of the policy's disjunctions are one per role)."""

    def conditionalor(self, tree):
        return self._logical(tree, "_||_", True) if len(tree.children) == 2 else super().conditionalor(tree)

    def conditionaland(self, tree):
        return self._logical(tree, "_&&_", False) if len(tree.children) == 2 else super().conditionaland(tree)

    def _logical(self, tree, operator: str, decides: bool):
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and bool(left) is decides:
            return left
        right = self.visit(tree.children[1])
        try:
            return self.activation.resolve_function(operator)(left, right)
        except TypeError as error:
            return celpy.CELEvalError(f"found no matching overload for {operator} applied to "
                                      f"'({type(left)}, {type(right)})'", error.__class__, error.args, tree=tree)


class _ErasedGeneric:
    """Stands for ``typing.Union``, ``Tuple``, ``List``, ``Dict`` and ``Iterable`` inside celpy's
    evaluator, where they only build the first argument of ``typing.cast`` (which returns its second
    unchanged) and annotations of attributes (evaluated, then dropped): celpy 0.5 writes, e.g.,
    ``cast(Union[Result, NameContainer], referent.value)`` on every name and
    ``cast(Tuple[Result, Result], ...)`` on every comparison (celpy/evaluation.py:1304, 1736, 1770,
    1819 @0.5.0), and typing's cache hashes the big ``Result`` union each time: a sixth of the
    evaluation's CPU. ``Sequence`` is left alone (celpy tests ``isinstance`` against it)."""

    def __getitem__(self, item):
        return None


for _name in ("Union", "Tuple", "List", "Dict", "Iterable"):
    setattr(celpy.evaluation, _name, _ErasedGeneric())


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context):
        return _ShortCircuit(ast=self.ast, activation=self.new_activation()).evaluate(context)


_environment = celpy.Environment(runner_class=_Runner)
_programs: dict[str, Any] = {}


def _eval(expression: str, activation: dict):
    if expression not in _programs:
        _programs[expression] = _environment.program(_environment.compile(expression))
    return _programs[expression].evaluate(activation)


def policy_of(objects, *, resource: str = "pods") -> tuple[dict, list[dict]]:
    """The policy matching ``resource`` (``pods``, ``rayclusters`` or ``pods/exec``) and its bindings."""
    objects = list(objects)
    (vap,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
              and resource in o["spec"]["matchConstraints"]["resourceRules"][0]["resources"]]
    return vap, [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                 and o["spec"]["policyName"] == vap["metadata"]["name"]]


def admits(policy_and_bindings, namespace: str, pod: dict, *, operation: str = "CREATE", old: dict | None = None,
           user: str = OPERATOR, **request) -> bool:
    """Whether the policy, through any of its bindings, lets ``pod`` be written in ``namespace``
    by ``user`` (an unbound request is admitted)."""
    return not denials(policy_and_bindings, namespace, pod, operation=operation, old=old, user=user, first=True,
                       **request)


def _resource(obj: dict) -> str:
    return {"Pod": "pods", "RayCluster": "rayclusters", "RayJob": "rayjobs"}.get(obj.get("kind", "Pod"), "pods")


def denials(policy_and_bindings, namespace: str, pod: dict, *, operation: str = "CREATE", old: dict | None = None,
            user: str = OPERATOR, first: bool = False, groups: tuple[str, ...] = (), name: str | None = None,
            sub_resource: str = "") -> list[str]:
    """The messages of the validations that fail (empty: admitted); with ``first``, only the
    first (Kubernetes too stops at a denial). ``request`` as the API server sends it
    (``k8s.io/api/admission/v1`` ``AdmissionRequest``): the resource from ``pod``'s kind,
    ``name`` (default the object's), ``subResource`` and the user's ``groups``."""
    key = json.dumps([policy_and_bindings, namespace, pod, operation, old, user, first, groups, name, sub_resource],
                     sort_keys=True)
    if key not in _denials:  # the same request, evaluated once per process (many tests build the same pods)
        _denials[key] = _denials_of(policy_and_bindings, namespace, pod, operation=operation, old=old, user=user,
                                    first=first, groups=groups, name=name, sub_resource=sub_resource)
    return list(_denials[key])


_denials: dict[str, list[str]] = {}


def _denials_of(policy_and_bindings, namespace: str, pod: dict, *, operation: str, old: dict | None, user: str,
                first: bool, groups: tuple[str, ...], name: str | None, sub_resource: str) -> list[str]:
    vap, bindings = policy_and_bindings
    labels = {"kubernetes.io/metadata.name": namespace}
    if not any(selects(b["spec"]["matchResources"]["namespaceSelector"], labels) for b in bindings):
        return []
    pod = {"metadata": {}, **pod}
    activation = {"object": celpy.json_to_cel(pod), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel({
                      "namespace": namespace, "operation": operation, "name": name or pod["metadata"].get("name", ""),
                      "resource": {"group": "", "version": "v1", "resource": _resource(pod)},
                      "subResource": sub_resource,
                      "userInfo": {"username": user, **({"groups": list(groups)} if groups else {})}})}
    variables = celtypes.MapType({})
    for variable in vap["spec"].get("variables", []):
        value = _eval(variable["expression"], {**activation, "variables": variables})
        assert not isinstance(value, celpy.CELEvalError), (variable["name"], value)
        variables[celtypes.StringType(variable["name"])] = value
    activation["variables"] = variables
    failed = []
    for validation in vap["spec"]["validations"]:
        result = _eval(validation["expression"], activation)
        assert not isinstance(result, celpy.CELEvalError), (validation["message"], result)
        if not bool(result):
            failed.append(validation["message"])
            if first:
                break
    return failed


def connect(policy_and_bindings, namespace: str, pod_name: str, sub_resource: str, *, user: str,
            groups: tuple[str, ...] = ()) -> bool:
    """Whether ``kubectl exec`` (``exec``), ``attach`` or ``port-forward`` (``portforward``) into
    pod ``pod_name`` is admitted: a CONNECT whose object is the connect options and whose name is
    the pod's (k8s.io/apiserver ``pkg/endpoints/handlers/rest.go`` ``ConnectResource``)."""
    kinds = {"exec": "PodExecOptions", "attach": "PodAttachOptions", "portforward": "PodPortForwardOptions"}
    (rule,) = policy_and_bindings[0]["spec"]["matchConstraints"]["resourceRules"]
    if "CONNECT" not in rule["operations"] or f"pods/{sub_resource}" not in rule["resources"]:
        return True
    options = {"apiVersion": "v1", "kind": kinds[sub_resource], "metadata": {}}
    return not denials(policy_and_bindings, namespace, options, operation="CONNECT", user=user, groups=groups,
                       name=pod_name, sub_resource=sub_resource, first=True)


def ray_cluster(cluster_spec: dict, owner: str, *, owner_kind: str = "RayService") -> dict:
    """A RayCluster as the operator creates it for its RayService (or RayJob) ``owner``, which is
    its controller (kuberay ``ray-operator/controllers/ray/rayservice_controller.go``
    ``constructRayClusterForRayService``: ``ctrl.SetControllerReference``, v1.4.0:791, v1.5.1:1180),
    named ``<owner>-<5 random>`` (``utils.GenerateRayClusterName``)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
        "name": f"{owner}-bcdfg", "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": owner_kind, "name": owner,
                                                       "uid": "u", "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(cluster_spec)}


def pod(spec: dict, labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **({"labels": labels} if labels else {})},
            "spec": copy.deepcopy(spec)}


def kuberay_pod(template: dict, node_type: str, *, autoscaler: dict | None = None) -> dict:
    """A Ray pod as KubeRay builds it from a group's template (v1.4.0/v1.5.1
    ``ray-operator/controllers/ray/common/pod.go``): its labels, the workers' ``wait-gcs-ready``
    init container (the Ray container's image, securityContext, env and mounts), the head's
    autoscaler container from ``autoscalerOptions``, and the API server's default tolerations."""
    spec = copy.deepcopy(template["spec"])
    ray = spec["containers"][0]
    if node_type == "worker":
        spec["initContainers"] = [*spec.get("initContainers", []), {
            "name": "wait-gcs-ready", "image": ray["image"], "command": ["/bin/bash", "-lc", "--"],
            "args": ["ray health-check"], "securityContext": copy.deepcopy(ray.get("securityContext", {})),
            "env": copy.deepcopy(ray.get("env", [])), "volumeMounts": copy.deepcopy(ray.get("volumeMounts", [])),
            "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}}}]
    if autoscaler is not None:
        spec["containers"].append({"name": "autoscaler", "image": ray["image"], **copy.deepcopy(autoscaler)})
    spec["tolerations"] = [*spec.get("tolerations", []), *DEFAULT_TOLERATION_SECONDS]
    labels = {**template.get("metadata", {}).get("labels", {}), "ray.io/node-type": node_type,
              "ray.io/cluster": "ray-llm-abcde", "ray.io/is-ray-node": "yes"}
    return pod(spec, labels)


def daemonset_pod(template: dict) -> dict:
    spec = copy.deepcopy(template["spec"])
    spec["tolerations"] = [*spec.get("tolerations", []), *DAEMONSET_TOLERATIONS]
    return pod(spec, template.get("metadata", {}).get("labels"))


def controller_pod(template: dict) -> dict:
    """A Job's or a Deployment's pod: the template and the default tolerations."""
    spec = copy.deepcopy(template["spec"])
    spec["tolerations"] = [*spec.get("tolerations", []), *DEFAULT_TOLERATION_SECONDS]
    return pod(spec, template.get("metadata", {}).get("labels"))


def created_pods(objects, *, autoscaler: dict | None = None) -> list[tuple[str, dict, str, str]]:
    """Every pod the rendered objects make, as its controller creates it:
    ``(what, pod, namespace, requester)``."""
    found = []
    for o in objects:
        kind, namespace, name = o["kind"], o["metadata"].get("namespace"), o["metadata"].get("name")
        if kind == "RayService":
            cluster = o["spec"]["rayClusterConfig"]
            options = cluster.get("autoscalerOptions")
            head_autoscaler = None if options is None else {
                k: options[k] for k in ("securityContext", "volumeMounts", "resources") if k in options}
            found.append((f"{name} head", kuberay_pod(cluster["headGroupSpec"]["template"], "head",
                                                      autoscaler=head_autoscaler), namespace, OPERATOR))
            for group in cluster["workerGroupSpecs"]:
                found.append((f"{name} {group['groupName']}", kuberay_pod(group["template"], "worker"),
                              namespace, OPERATOR))
        elif kind == "DaemonSet":
            found.append((f"DaemonSet {name}", daemonset_pod(o["spec"]["template"]), namespace, DAEMONSET_CONTROLLER))
        elif kind in ("Deployment", "ReplicaSet"):
            found.append((f"{kind} {name}", controller_pod(o["spec"]["template"]), namespace, REPLICASET_CONTROLLER))
        elif kind == "Job":
            found.append((f"Job {name}", controller_pod(o["spec"]["template"]), namespace, JOB_CONTROLLER))
        elif kind == "CronJob":
            found.append((f"CronJob {name}", controller_pod(o["spec"]["jobTemplate"]["spec"]["template"]),
                          namespace, JOB_CONTROLLER))
        elif kind == "Pod":
            found.append((f"Pod {name}", pod(o["spec"], o["metadata"].get("labels")), namespace, "deployer"))
    return found

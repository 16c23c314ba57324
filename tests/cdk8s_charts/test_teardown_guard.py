"""The teardown guard (ray_llm_eks/teardown/guard.py): it holds the RayService manifest's delete
until KubeRay has finished with the RayClusters, and never holds a deploy.

The program runs as the pod runs it (``python -S`` on the file, settings from the environment)
against a loopback stand-in of the API server that answers the two reads it makes, as a real one
would: the RayService (404 once deleted; ``deletionTimestamp`` while being deleted) and the
RayCluster list, whose items carry KubeRay's controller reference to the RayService.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ray_llm_eks.cdk8s_charts import NAMESPACE_CHART_ID, RAYSERVICE_CHART_ID
from ray_llm_eks.cdk8s_charts.teardown_guard import GRACE_MARGIN_SECONDS
from ray_llm_eks.teardown import PROGRAM, PROGRAM_FILE
from ray_llm_eks.teardown.guard import DEFAULT_DEADLINE_SECONDS

NAMESPACE, SERVICE, TOKEN = "inference", "ray-llm", "guard-token"


def ray_cluster(name: str, owner: str) -> dict:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "finalizers": ["ray.io/gcs-ft-redis-cleanup-finalizer"],
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService", "name": owner,
                                              "controller": True, "blockOwnerDeletion": True}]}}


class FakeApi:
    """``service``: the RayService's metadata, or None once it is gone. ``clusters``: a function of
    the number of list calls so far, giving the RayClusters in the namespace."""

    def __init__(self, service: dict | None, clusters, status: int = 200) -> None:
        self.service, self.clusters, self.status = service, clusters, status
        self.lists = 0
        self.paths: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                api.paths.append(self.path)
                base = f"/apis/ray.io/v1/namespaces/{NAMESPACE}"
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.reply(401, {"kind": "Status", "code": 401})
                if api.status != 200:
                    return self.reply(api.status, {"kind": "Status", "code": api.status})
                if self.path == f"{base}/rayservices/{SERVICE}":
                    if api.service is None:
                        return self.reply(404, {"kind": "Status", "reason": "NotFound"})
                    return self.reply(200, {"kind": "RayService", "metadata": api.service})
                if self.path == f"{base}/rayclusters":
                    items = api.clusters(api.lists)
                    api.lists += 1
                    return self.reply(200, {"kind": "RayClusterList", "items": items})
                self.reply(404, {"kind": "Status", "reason": "NotFound"})

            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api_factory(tmp_path):
    made: list[FakeApi] = []
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")

    def make(service, clusters, status: int = 200) -> tuple[FakeApi, dict]:
        api = FakeApi(service, clusters, status)
        made.append(api)
        env = {"GUARD_API_URL": api.url, "GUARD_TOKEN_FILE": str(token), "GUARD_NAMESPACE": NAMESPACE,
               "GUARD_SERVICE": SERVICE, "GUARD_INTERVAL_SECONDS": "0.05", "GUARD_DEADLINE_SECONDS": "20"}
        return api, env

    yield make
    for api in made:
        api.close()


def run_guard(env: dict) -> subprocess.CompletedProcess:
    # As the pod's preStop runs it: the file alone, -S, no site-packages, no package on the path.
    return subprocess.run([sys.executable, "-S", str(PROGRAM)], env={**env, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_a_live_rayservice_means_a_deploy_replaced_the_pod_and_nothing_is_waited_for(api_factory):
    api, env = api_factory({"name": SERVICE}, lambda calls: [ray_cluster("ray-llm-raycluster-a", SERVICE)])
    done = run_guard(env)
    assert done.returncode == 0, done.stderr
    assert "is not being deleted" in done.stderr
    assert api.lists == 0


@pytest.mark.integration
def test_after_the_rayservice_is_deleted_it_waits_until_its_rayclusters_are_gone(api_factory):
    # Two of its clusters (the active one and a pending one) and another RayService's, which it ignores.
    theirs = ray_cluster("other-raycluster-x", "other")
    api, env = api_factory(None, lambda calls: [theirs] + ([ray_cluster("ray-llm-raycluster-a", SERVICE),
                                                            ray_cluster("ray-llm-raycluster-b", SERVICE)]
                                                           if calls < 5 else []))
    done = run_guard(env)
    assert done.returncode == 0, done.stderr
    assert api.lists == 6
    assert "waiting for RayClusters ray-llm-raycluster-a, ray-llm-raycluster-b" in done.stderr
    assert "other-raycluster-x" not in done.stderr
    assert "no RayCluster of inference/ray-llm is left" in done.stderr


@pytest.mark.integration
def test_a_rayservice_being_deleted_is_a_teardown_too(api_factory):
    api, env = api_factory({"name": SERVICE, "deletionTimestamp": "2026-12-03T08:00:00Z"},
                           lambda calls: [ray_cluster("ray-llm-raycluster-a", SERVICE)] if calls < 2 else [])
    done = run_guard(env)
    assert done.returncode == 0, done.stderr
    assert api.lists == 3


@pytest.mark.integration
def test_it_gives_up_at_its_deadline_and_says_what_was_left(api_factory):
    api, env = api_factory(None, lambda calls: [ray_cluster("ray-llm-raycluster-a", SERVICE)])
    done = run_guard({**env, "GUARD_DEADLINE_SECONDS": "0.5"})
    assert done.returncode == 1
    assert "gave up after 0 s: waiting for RayClusters ray-llm-raycluster-a" in done.stderr or \
        "gave up after 1 s: waiting for RayClusters ray-llm-raycluster-a" in done.stderr


@pytest.mark.integration
def test_a_refused_read_is_retried_until_the_deadline_and_reported(api_factory):
    api, env = api_factory(None, lambda calls: [], status=403)
    done = run_guard({**env, "GUARD_DEADLINE_SECONDS": "0.5"})
    assert done.returncode == 1
    assert "cannot read the cluster yet: GET rayservices/ray-llm: HTTP 403" in done.stderr


# --- the objects ----------------------------------------------------------------------------------


def test_the_pod_comes_after_the_rayservice_and_what_it_needs_outlives_it(disaggregated):
    """``kubectl delete -f`` deletes in file order and then waits: the RayService first, then the
    guard. Its account, Role, binding and program are in the namespace's chart, deleted later."""
    kinds = [(o["kind"], o["metadata"]["name"]) for o in disaggregated.objects[RAYSERVICE_CHART_ID]]
    (pod,) = [o for o in disaggregated.objects[RAYSERVICE_CHART_ID] if o["kind"] == "Pod"]
    assert kinds.index(("RayService", SERVICE)) < kinds.index(("Pod", pod["metadata"]["name"]))
    guard = "ray-llm-teardown-guard"
    in_namespace_chart = {(o["kind"], o["metadata"]["name"]) for o in disaggregated.objects[NAMESPACE_CHART_ID]}
    assert {("ServiceAccount", guard), ("Role", guard), ("RoleBinding", guard), ("ConfigMap", guard)} <= in_namespace_chart
    spec = pod["spec"]
    assert spec["serviceAccountName"] == guard
    assert spec["terminationGracePeriodSeconds"] == DEFAULT_DEADLINE_SECONDS + GRACE_MARGIN_SECONDS
    assert spec["nodeSelector"] == disaggregated.config.specs().serving.system.labels
    (container,) = spec["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][-1].endswith(f"-S /opt/rayllmeks-teardown/{PROGRAM_FILE}")
    assert {e["name"]: e["value"] for e in container["env"]}["GUARD_SERVICE"] == SERVICE
    (config_map,) = [o for o in disaggregated.objects[NAMESPACE_CHART_ID]
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"] == guard]
    assert config_map["data"][PROGRAM_FILE] == PROGRAM.read_text()


def test_the_guard_may_read_its_rayservice_and_list_rayclusters_and_nothing_else(disaggregated):
    (role,) = [o for o in disaggregated.objects[NAMESPACE_CHART_ID]
               if o["kind"] == "Role" and o["metadata"]["name"] == "ray-llm-teardown-guard"]
    assert role["rules"] == [
        {"apiGroups": ["ray.io"], "resourceNames": [SERVICE], "resources": ["rayservices"], "verbs": ["get"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list"]},
    ]


def test_a_new_program_renames_the_pod_so_a_deploy_replaces_it(monkeypatch, disaggregated):
    import cdk8s

    from ray_llm_eks.cdk8s_charts import teardown_guard
    from ray_llm_eks.cdk8s_charts.serving import build_serving_charts

    before = disaggregated.charts.rayservice.teardown_guard.pod_name
    monkeypatch.setattr(teardown_guard.TeardownGuardAccess, "__init__", _with_program("# another program\n"))
    after = build_serving_charts(cdk8s.App(), disaggregated.config.specs().serving).rayservice.teardown_guard.pod_name
    assert before != after and before.rsplit("-", 1)[0] == after.rsplit("-", 1)[0]


def _with_program(text: str):
    from ray_llm_eks.cdk8s_charts.teardown_guard import TeardownGuardAccess

    original = TeardownGuardAccess.__init__

    def init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        self.program_text = text

    return init

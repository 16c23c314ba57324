"""Wait, in a pod's preStop hook, until the RayService's RayClusters are gone; then let the pod end.

Why: ``cdk destroy`` deletes the RayService manifest with ``kubectl delete -f``, whose default
``--cascade=background`` removes the RayService at once and leaves its RayClusters to the garbage
collector (an explicit Background policy also strips a ``foregroundDeletion`` finalizer:
apiserver ``registry/generic/registry/store.go``, ``deletionFinalizersForGarbageCollection``).
CloudFormation then goes on to delete what the RayService manifest depends on. With GCS fault
tolerance, KubeRay 1.4.0 keeps each RayCluster until a Redis-cleanup Job it creates in the same
namespace has finished (``raycluster_controller.go``@v1.4.0 lines 198-296: head pod gone first,
then the Job, at most 300 s); that Job needs the namespace (no Job can be created in a
Terminating one), the Redis Service alias, password Secret and egress policy, and the operator.
Deleted before it finishes, the RayCluster's finalizer stays and the namespace sticks in
Terminating: DELETE_FAILED.

This pod is in the RayService's manifest, after the RayService, so ``kubectl delete -f`` deletes it
right after the RayService and waits for it to be gone. Its preStop hook (this program) returns
once no RayCluster the RayService owned is left, or at ``GUARD_DEADLINE_SECONDS``; then the pod
ends, kubectl returns, and CloudFormation deletes the rest. When the RayService is still there and
not being deleted, the pod is being replaced or pruned by a deploy, not torn down: it returns at
once.

Settings (environment): ``GUARD_NAMESPACE``, ``GUARD_SERVICE`` (the RayService),
``GUARD_DEADLINE_SECONDS`` (default 600), ``GUARD_INTERVAL_SECONDS`` (default 2); the API server is
the pod's own (service account token and CA), or ``GUARD_API_URL`` with ``GUARD_TOKEN_FILE``.
Exit 0: nothing left to wait for; 1: the deadline passed with RayClusters left.
Standard library only: it runs with the serving image's Python and ``-S``.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_DEADLINE_SECONDS = 600.0
"""KubeRay's cleanup Job may run 300 s (``activeDeadlineSeconds``) after the head pod has ended; the
kubectl handler's Lambda has 15 minutes for the whole delete."""


def log(message: str) -> None:
    print(f"teardown-guard: {message}", file=sys.stderr, flush=True)


class Api:
    def __init__(self, url: str, token_file: str, context: ssl.SSLContext | None) -> None:
        self.url, self.token_file, self.context = url.rstrip("/"), token_file, context

    @classmethod
    def from_environment(cls) -> Api:
        url = os.environ.get("GUARD_API_URL")
        if url:
            return cls(url, os.environ.get("GUARD_TOKEN_FILE", f"{ACCOUNT_DIR}/token"), None)
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        context = ssl.create_default_context(cafile=f"{ACCOUNT_DIR}/ca.crt")
        return cls(f"https://{host if ':' not in host else f'[{host}]'}:{port}", f"{ACCOUNT_DIR}/token", context)

    def get(self, path: str) -> tuple[int, dict | None]:
        """(HTTP status, body): 404 is an answer (the object is gone), not an error."""
        with open(self.token_file) as handle:
            token = handle.read().strip()
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}",
                                                                   "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, None


def owned_clusters(clusters: list[dict], service: str) -> list[str]:
    """The RayClusters whose controller is the RayService ``service`` (KubeRay sets it:
    ``rayservice_controller.go``@v1.4.0, ``SetControllerReference``)."""
    names = []
    for cluster in clusters:
        meta = cluster.get("metadata") or {}
        if any(ref.get("kind") == "RayService" and ref.get("name") == service
               for ref in meta.get("ownerReferences") or ()):
            names.append(str(meta.get("name")))
    return sorted(names)


def wait(api: Api, namespace: str, service: str, deadline_s: float, interval_s: float) -> int:
    base = f"/apis/ray.io/v1/namespaces/{urllib.parse.quote(namespace)}"
    ends = time.monotonic() + deadline_s
    last = None
    while True:
        try:
            status, body = api.get(f"{base}/rayservices/{urllib.parse.quote(service)}")
            if status == 200 and body is not None and not (body.get("metadata") or {}).get("deletionTimestamp"):
                log(f"RayService {namespace}/{service} is not being deleted: a deploy replaces this pod, "
                    "nothing to wait for")
                return 0
            if status not in (200, 404):
                raise OSError(f"GET rayservices/{service}: HTTP {status}")
            status, body = api.get(f"{base}/rayclusters")
            if status != 200 or body is None:
                raise OSError(f"GET rayclusters: HTTP {status}")
            left = owned_clusters(list(body.get("items") or ()), service)
            if not left:
                log(f"no RayCluster of {namespace}/{service} is left: the teardown may go on")
                return 0
            state = f"waiting for RayClusters {', '.join(left)} (KubeRay's Redis cleanup, the pods' ends)"
        except (OSError, ValueError) as error:
            state = f"cannot read the cluster yet: {error}"
        if state != last:
            log(state)
            last = state
        if time.monotonic() >= ends:
            log(f"gave up after {deadline_s:.0f} s: {state}")
            return 1
        time.sleep(interval_s)


def main() -> int:
    return wait(Api.from_environment(), os.environ["GUARD_NAMESPACE"], os.environ["GUARD_SERVICE"],
                float(os.environ.get("GUARD_DEADLINE_SECONDS", DEFAULT_DEADLINE_SECONDS)),
                float(os.environ.get("GUARD_INTERVAL_SECONDS", "2")))


if __name__ == "__main__":
    sys.exit(main())

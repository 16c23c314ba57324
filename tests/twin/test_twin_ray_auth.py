"""Ray token authentication on the twin (the default, ``serving.ray_auth: token``): real Ray 2.58
refuses its job API on the head's 8265 without the cluster's token, and serves it with it.

The twin runs every Ray node with ``RAY_AUTH_MODE=token`` and the cluster's ``RAY_AUTH_TOKEN``, as
KubeRay 1.5.1 sets them from the cluster's Secret, and submits the Serve config with
``x-ray-authorization: Bearer <token>`` as KubeRay's dashboard client does (ray_llm_eks/twin/cluster.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from ray_llm_eks.twin.twin_profile import DASHBOARD_PORT

pytestmark = pytest.mark.twin


@pytest.fixture(scope="module")
def jobs_url(twin):
    twin.use("disaggregated")
    assert twin.twin.token_auth, "the rendered RayService does not ask for token authentication"
    return f"http://{twin.twin.deployment.head.address}:{DASHBOARD_PORT}/api/jobs/"


def _status(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_job_api_refuses_a_request_without_the_token(jobs_url):
    status, _ = _status(jobs_url, {})
    assert status in (401, 403), status


def test_the_job_api_refuses_a_wrong_token(jobs_url):
    status, _ = _status(jobs_url, {"x-ray-authorization": "Bearer not-the-clusters-token"})
    assert status in (401, 403), status


def test_the_job_api_answers_with_the_clusters_token(twin, jobs_url):
    status, body = _status(jobs_url, twin.twin.auth_headers())
    assert status == 200, body[:500]
    assert isinstance(json.loads(body), list)  # the job list (none submitted)

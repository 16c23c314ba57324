"""The CLI's kubeconfig, read by the ``kubernetes`` client's loader (``ray_llm_eks/kubeconfig.py``):
merging, exec plugins, token files, client certificates, ``tls-server-name`` and ``proxy-url``,
against a loopback HTTPS server (a certificate for ``kube.test`` only) and a loopback CONNECT proxy;
and ``ray-llm-eks verify`` as a user types it, through all of them at once."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
import fake_cluster
from fake_cluster import FakeDeployment, run_cli
from helpers.gate import Deployed
from helpers.loopback_tls import ConnectProxy, Recorder, make_pki

from ray_llm_eks.kubeconfig import load_access
from ray_llm_eks.verification.kube import Kube, NoClusterAccess

EXEC_API = "client.authentication.k8s.io/v1beta1"


def _write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **config}))
    return path


def _one(name: str, cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig with one context ``name`` of one cluster and one user of the same name."""
    return {"clusters": [{"name": name, "cluster": cluster}], "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}


def _plugin(folder: Path, token: str = "plugin-token", expires: str = "2099-01-01T00:00:00Z") -> dict[str, Any]:
    """An ``exec`` user whose plugin is a script written here: it prints an ExecCredential whose
    token is ``<token>-<n>`` for its n-th run, as ``aws eks get-token`` prints one."""
    counter, script = folder / "plugin-runs", folder / "plugin.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"runs = pathlib.Path({str(counter)!r})\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        f"print(json.dumps({{'apiVersion': {EXEC_API!r}, 'kind': 'ExecCredential',\n"
        f"                  'status': {{'token': f'{token}-{{n}}', 'expirationTimestamp': {expires!r}}}}}))\n")
    return {"exec": {"apiVersion": EXEC_API, "command": sys.executable, "args": [str(script)]}}


@pytest.fixture
def pki(tmp_path: Path):
    return make_pki(tmp_path)


@pytest.fixture
def api(pki):
    recorder = Recorder()
    server, port = recorder.start(pki)
    yield recorder, port
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy():
    proxy = ConnectProxy()
    yield proxy
    proxy.stop()


def test_kubeconfig_files_merge_and_the_context_may_be_in_the_second(tmp_path, monkeypatch):
    # a: sets the current context, which only b defines; a's own context is another cluster.
    a = _write(tmp_path / "a", {"current-context": "prod", **_one("dev", {"server": "https://dev.invalid"},
                                                                      {"token": "dev-token"})})
    b = _write(tmp_path / "b", _one("prod", {"server": "https://prod.invalid:6443/"}, {"token": "prod-token"}))
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{tmp_path / 'absent'}{os.pathsep}{b}")
    access = load_access()
    assert access.server == "https://prod.invalid:6443"
    assert access.token() == "prod-token"
    assert load_access(context="dev").server == "https://dev.invalid"
    # The first file to name a context wins, as kubectl merges.
    c = _write(tmp_path / "c", _one("prod", {"server": "https://shadowed.invalid"}, {"token": "other"}))
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}{os.pathsep}{c}")
    assert load_access().server == "https://prod.invalid:6443"


@pytest.mark.integration
def test_an_exec_plugin_gives_the_token_and_runs_again_once_it_expired(tmp_path):
    fresh = _write(tmp_path / "fresh", {"current-context": "eks", **_one("eks", {"server": "https://eks.invalid"},
                                                                           _plugin(tmp_path))})
    access = load_access(fresh)
    assert [access.token(), access.token()] == ["plugin-token-1", "plugin-token-1"]  # valid until 2099
    expired_folder = tmp_path / "expired"
    expired_folder.mkdir()
    expired = _write(tmp_path / "expired.yaml", {"current-context": "eks", **_one(
        "eks", {"server": "https://eks.invalid"}, _plugin(expired_folder, "short", "2000-01-01T00:00:00Z"))})
    access = load_access(expired)
    assert [access.token(), access.token()] == ["short-2", "short-3"]  # the load ran it once


def test_a_token_file_and_client_certificate_paths_are_read_relative_to_the_kubeconfig(tmp_path, pki):
    folder = tmp_path / "kube"
    folder.mkdir()
    (folder / "token").write_text("file-token\n")
    config = _write(folder / "config", {"current-context": "c", **_one(
        "c", {"server": "https://c.invalid", "certificate-authority-data": pki.ca_data},
        {"tokenFile": "token", "client-certificate-data": base64.b64encode(pki.cert_file.read_bytes()).decode(),
         "client-key": "keys/client.key"})})
    (folder / "keys").mkdir()
    (folder / "keys" / "client.key").write_bytes(pki.key_file.read_bytes())
    access = load_access(config)
    assert access.token() == "file-token"  # without the file's newline, as kubectl reads it
    assert Path(access.ca_file).read_bytes() == pki.ca_pem
    assert Path(access.client_cert_file).read_bytes() == pki.cert_file.read_bytes()
    assert access.client_key_file == str(folder / "keys" / "client.key")
    Kube(access)  # the TLS material loads: the certificate and its key match


def test_the_token_reaches_a_tls_server_checked_against_tls_server_name(tmp_path, pki, api):
    recorder, port = api
    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": pki.ca_data,
               "tls-server-name": "kube.test"}
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "s3cret"})})
    answer = Kube(load_access(config)).get("/api/v1/namespaces/inference/configmaps/x")
    assert answer["data"] == {"answered": "yes"}
    assert recorder.requests == [("/api/v1/namespaces/inference/configmaps/x", "Bearer s3cret")]
    assert recorder.server_names == ["kube.test"]  # SNI, and the certificate was checked for it
    # Without tls-server-name the certificate (for kube.test only) does not name 127.0.0.1.
    del cluster["tls-server-name"]
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "s3cret"})})
    with pytest.raises(NoClusterAccess, match="not the one its certificate names") as refused:
        Kube(load_access(config)).get("/api/v1/namespaces/inference/configmaps/x")
    assert not refused.value.transient
    assert len(recorder.requests) == 1
    # A certificate from another CA is refused even under the right name.
    (tmp_path / "other").mkdir()
    other = make_pki(tmp_path / "other")
    cluster.update({"tls-server-name": "kube.test", "certificate-authority-data": other.ca_data})
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "s3cret"})})
    with pytest.raises(NoClusterAccess, match="certificate"):
        Kube(load_access(config)).get("/api/v1/namespaces/inference/configmaps/x")
    # insecure-skip-tls-verify: no check at all (kubectl's meaning).
    cluster = {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "s3cret"})})
    assert Kube(load_access(config)).get("/x")["kind"] == "ConfigMap"


def test_proxy_url_tunnels_every_request_with_the_proxys_credentials(tmp_path, pki, api, proxy, monkeypatch):
    recorder, port = api
    # An environment proxy that does not exist: the kubeconfig's proxy-url replaces it, NO_PROXY too.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    proxy_url = proxy.url.replace("http://", "http://alice:p%40ss@")
    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": pki.ca_data,
               "tls-server-name": "kube.test", "proxy-url": proxy_url}
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "via-proxy"})})
    access = load_access(config)
    assert access.proxy_url == proxy_url
    kube = Kube(access)
    kube.get("/api/v1/nodes")
    kube.get("/api/v1/pods")
    expected = "Basic " + base64.b64encode(b"alice:p@ss").decode()
    assert proxy.tunnels == [(f"127.0.0.1:{port}", expected)] * 2
    assert recorder.requests == [("/api/v1/nodes", "Bearer via-proxy"), ("/api/v1/pods", "Bearer via-proxy")]
    assert recorder.server_names == ["kube.test", "kube.test"]  # TLS end to end, inside the tunnel
    # A proxy that does not answer is no access (worth retrying), and names the proxy without its password.
    cluster["proxy-url"] = "http://alice:p%40ss@127.0.0.1:9"
    config = _write(tmp_path / "config", {"current-context": "c", **_one("c", cluster, {"token": "via-proxy"})})
    with pytest.raises(NoClusterAccess, match=r"through proxy http://127\.0\.0\.1:9") as unreachable:
        Kube(load_access(config)).get("/api/v1/nodes")
    assert unreachable.value.transient and "p%40ss" not in str(unreachable.value)


@pytest.mark.parametrize("case, text, message", [
    ("absent", None, "no kubeconfig at"),
    ("empty", "", "is empty"),
    ("not YAML", "clusters: [", "cannot be used"),
    ("no such context", yaml.safe_dump({"current-context": "gone", **_one("c", {"server": "https://c.invalid"}, {})}),
     "gone"),
    ("no server", yaml.safe_dump({"current-context": "c", **_one("c", {"insecure-skip-tls-verify": True}, {})}),
     "has no server"),
    ("a SOCKS proxy", yaml.safe_dump({"current-context": "c", **_one(
        "c", {"server": "https://c.invalid", "proxy-url": "socks5://127.0.0.1:1080"}, {"token": "t"})}),
     r"proxy-url socks5://\.\.\. is not supported; accepted: an http:// proxy"),
])
def test_a_kubeconfig_that_gives_no_access_says_why(tmp_path, case, text, message):
    path = tmp_path / "config"
    if text is not None:
        path.write_text(text)
    with pytest.raises(NoClusterAccess, match=message):
        load_access(path)


@pytest.mark.integration
def test_a_failing_plugin_is_no_access_with_its_own_words(tmp_path):
    script = tmp_path / "denied.py"
    script.write_text("import sys\nsys.exit('AccessDenied: not authorized')\n")
    config = _write(tmp_path / "config", {"current-context": "c", **_one(
        "c", {"server": "https://c.invalid"}, {"exec": {"apiVersion": EXEC_API, "command": sys.executable,
                                                        "args": [str(script)]}})})
    with pytest.raises(NoClusterAccess, match="credential plugin failed: .*AccessDenied: not authorized"):
        load_access(config)


# --- verify as typed ----------------------------------------------------------------------------

PACE = json.dumps(fake_cluster.PACE)


def _verify(env: dict[str, str], *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """In this process (``run_cli``), or with ``process`` as the program started on its own."""
    if not process:
        return run_cli("verify", "--pace", PACE, *args, env=env)
    return subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "verify", "--pace", PACE, *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})


@pytest.mark.integration
def test_verify_as_typed_with_kubeconfig_merged_over_tls_and_a_proxy(fake: FakeDeployment, disaggregated: Deployed,
                                                                      tmp_path, pki, proxy):
    rendered = disaggregated.settings_config_map
    fake.apply_config_map(rendered["metadata"]["name"], rendered["metadata"]["labels"], dict(rendered["data"]))
    server_names: list[str] = []
    server = fake.serve_api_over_tls(pki.server_context(server_names))
    # ~/.kube/config-like file first, naming the context; the EKS entry (as `aws eks
    # update-kubeconfig --kubeconfig b` writes one, plus a proxy and a TLS name) second.
    a = _write(tmp_path / "a", {"current-context": "eks", **_one("laptop", {"server": "https://laptop.invalid"},
                                                                   {"token": "nope"})})
    b = _write(tmp_path / "b", _one("eks", {"server": server, "certificate-authority-data": pki.ca_data,
                                            "tls-server-name": "kube.test", "proxy-url": proxy.url},
                                    _plugin(tmp_path, token="test-token")))
    done = _verify({"KUBECONFIG": f"{a}{os.pathsep}{b}"}, "--json", "--timeout", "20")
    # The fake API accepts only "Bearer test-token", and the plugin printed "test-token-1": refused, exit 3.
    assert done.returncode == 3, done.stdout + done.stderr
    assert "refused" in json.loads(done.stdout)["error"]
    assert proxy.tunnels and server_names and set(server_names) == {"kube.test"}
    # Now the plugin prints exactly the token the API server accepts.
    (tmp_path / "plugin.py").write_text(
        "import json\n"
        f"print(json.dumps({{'apiVersion': {EXEC_API!r}, 'kind': 'ExecCredential', "
        "'status': {'token': 'test-token', 'expirationTimestamp': '2099-01-01T00:00:00Z'}}))\n")
    proxy.tunnels.clear()
    done = _verify({"KUBECONFIG": f"{a}{os.pathsep}{b}"}, "--json", "--timeout", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and report["probes"]["via_api_server_proxy"] is True
    port = server.rsplit(":", 1)[1]
    assert proxy.tunnels and {target for target, _ in proxy.tunnels} == {f"127.0.0.1:{port}"}
    assert set(server_names) == {"kube.test"}
    # The report's table in a 60-column terminal: every figure whole, nothing cut.
    text = _verify({"KUBECONFIG": f"{a}{os.pathsep}{b}", "COLUMNS": "60"}, "--timeout", "20", process=True)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "…" not in text.stdout and "PASS" in text.stdout
    kv = report["kv"]
    for figure in (f"{report['probes']['ok']}/{report['probes']['count']}", str(kv["predicted_bytes"]),
                   str(kv["efa_moved_bytes"]), str(kv["nixl"]["bytes_transferred"])):
        assert figure in text.stdout, figure


def test_verify_without_a_kubeconfig_exits_3_saying_so(tmp_path):
    done = _verify({"KUBECONFIG": str(tmp_path / "nothing-here")}, "--json")
    assert done.returncode == 3
    error = json.loads(done.stdout)["error"]
    assert error.startswith("no access to the cluster: no kubeconfig at") and "KUBECONFIG" in error

"""Phases 3 to 5 of the gate, on the cluster the rollout found ready.

3. **Nodes, pods, engine.** Allocatable ``vpc.amazonaws.com/efa`` on every GPU node, as many as
   its launch template attaches (``efa_per_node``: one per network card); each pod's
   image (and digest) and worker environment; the Serve application's deployed arguments against
   the rendered Serve config.
4. **Probes.** ``probes`` streamed chat completions through the OpenAI Service (with
   ``min_prompt_tokens``, one short one more, for the decode replicas' own prefill); EFA byte
   counters of every GPU node and NIXL metrics of every worker read before and after (and, for
   continuous verification, kept as the serving window's reading: :mod:`.serving_window`).
5. **Transport** (disaggregated only). NIXL evidence in every worker's log (:mod:`.evidence`);
   EFA bytes moved against the planner's predicted KV bytes (of the remote-prefill probes);
   failed NIXL transfers; with ``min_prompt_tokens``, each path's request count (``paths``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from . import efa, evidence, metrics, objects, probe, reads, rollout, serving_window
from .shared import wire
from .state import Phase, RunState


class Checks(Phase):
    def check_nodes_and_pods(self, cluster: str) -> list[dict[str, Any]]:
        c = self.config
        nodes_report, pods_report, workers = [], [], []
        for role, expect in c.roles.items():
            pods = self._kube(self.kube.ray_cluster_pods, c.namespace, cluster, {wire.RAY_GROUP_LABEL: role})
            nodes = self._kube(self.kube.nodes, expect.node_selector)
            if expect.autoscaled:
                # Pods and nodes come and go: check the ready pods and the nodes they run on (a node
                # Cluster Autoscaler just added may not advertise its GPU and EFA yet, and one it is
                # about to remove runs no worker).
                pods = [p for p in pods if objects.pod_ready(p)]
                hosts = {(p.get("spec") or {}).get("nodeName") for p in pods}
                nodes = [n for n in nodes if n["metadata"]["name"] in hosts]
            for node in nodes:
                allocatable = (node.get("status") or {}).get("allocatable") or {}
                efa_count, gpu_count = _int(allocatable.get(wire.EFA_RESOURCE)), _int(allocatable.get(wire.GPU_RESOURCE))
                name = node["metadata"]["name"]
                nodes_report.append({"name": name, "role": role, "efa_allocatable": efa_count,
                                     "gpu_allocatable": gpu_count})
                if efa_count < 1:
                    self.report.fail(f"{role} node {name} has no allocatable {wire.EFA_RESOURCE} (the EFA device plugin "
                                     "is not running there, or the instance has no EFA interface)")
                elif efa_count < expect.efa_per_node:
                    # The worker pod requests every device and would stay Pending on this node.
                    self.report.fail(f"{role} node {name} has {efa_count} allocatable {wire.EFA_RESOURCE}, expected "
                                     f"{expect.efa_per_node} (one per EFA interface of the launch template: the node "
                                     "was launched without them all, or the device plugin found fewer)")
                if gpu_count < expect.gpus_per_node:
                    self.report.fail(f"{role} node {name} has {gpu_count} allocatable {wire.GPU_RESOURCE}, expected "
                                     f"{expect.gpus_per_node}")
            low, high = expect.pod_range
            if len(nodes) < low:
                self.report.fail(f"{len(nodes)} {role} node(s) found, expected {expect.describe()}")
            if not low <= len(pods) <= high:
                self.report.fail(f"{len(pods)} {role} worker pod(s) in {cluster}, expected {expect.describe()}")
            for pod in pods:
                workers.append(pod)
                pods_report.append(self._check_pod(pod, role))
        for head in self._kube(self.kube.ray_cluster_pods, c.namespace, cluster, {wire.RAY_NODE_TYPE_LABEL: "head"}):
            pods_report.append(self._check_pod(head, "head"))
            if c.autoscaled and not objects.container_running(head, wire.AUTOSCALER_CONTAINER):
                # KubeRay watches only the Ray container; a dead sidecar would stop autoscaling silently.
                self.report.fail(f"the Ray autoscaler container of the head pod {head['metadata']['name']} is not "
                                 "running: the worker groups no longer scale (kubectl logs -c autoscaler)")
        self.report.sections["nodes"] = nodes_report
        self.report.sections["pods"] = pods_report
        return workers

    def _check_pod(self, pod: Mapping[str, Any], role: str) -> dict[str, Any]:
        c = self.config
        name = pod["metadata"]["name"]
        containers = (pod.get("spec") or {}).get("containers") or []
        main = next((x for x in containers if x.get("name") == c.worker_container), containers[0] if containers else {})
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        status = next((s for s in statuses if s.get("name") == main.get("name")), {})
        image_id = status.get("imageID", "")
        digest = image_id.rsplit("@", 1)[1] if "@" in image_id else None
        entry = {"name": name, "role": role, "node": (pod.get("spec") or {}).get("nodeName"),
                 "image": main.get("image"), "image_digest": digest,
                 "cluster_spec_hash": objects.annotation(pod, c.hash_annotation)}
        if main.get("image") != c.image:
            self.report.fail(f"pod {name} runs image {main.get('image')}, the deployed spec says {c.image}")
        if c.image_digest and digest and digest != c.image_digest:
            self.report.fail(f"pod {name} runs image digest {digest}, the deployed spec pins {c.image_digest}")
        if role != "head":
            env = {e.get("name"): e.get("value") for e in main.get("env") or ()}
            wrong = {k: env.get(k) for k, v in c.worker_env.items() if env.get(k) != v}
            entry["env_mismatches"] = wrong
            if wrong:
                self.report.fail(f"pod {name} environment differs from the spec: "
                                 + ", ".join(f"{k}={v!r} (expected {c.worker_env[k]!r})" for k, v in wrong.items()))
        return entry

    def check_engine(self) -> None:
        """Record the Serve application the wait loop found running the spec's config (as the
        RayService reports it: the stored ``serveConfigV2`` args against the rendered ones, and
        KubeRay's status of the application; :mod:`.rollout`)."""
        c = self.config
        app = self.application
        differences = rollout.differences(c.serve_args, app.get("args") or {})
        self.report.sections["engine"] = {
            "application": c.application, "status": app.get("status"), "matches_spec": not differences,
            "differences": differences[:20], "last_deployed_time_s": app.get("last_deployed_time_s"),
            "deployments": {name: (d or {}).get("status") for name, d in (app.get("deployments") or {}).items()},
        }
        if app.get("status") != "RUNNING":
            self.report.fail(f"Serve application {c.application!r} is {app.get('status')}, not RUNNING")
        if differences:
            self.report.fail(f"the deployed engine settings differ from the spec at {', '.join(differences[:5])}")

    def __init__(self, state: RunState) -> None:
        super().__init__(state)
        self.doubled_readers: set[str] = set()
        """Nodes on which the DaemonSet controls more than one reader: failed, and not read."""

    def efa_counter_pods(self) -> list[dict[str, Any]]:
        """The EFA counter readers whose readings count: the pods the deployment's DaemonSet
        (``wire.efa_counters_name``) controls, by the uid the API gives it now, one per node.

        The label selector alone finds any pod that carries the readers' labels, and anyone who may
        create pods in the namespace can serve counters of their choosing from one (the last reading
        of a node used to win). The DaemonSet controller sets itself as the controller of every pod
        it creates (``metav1.NewControllerRef(ds, controllerKind)`` in ``syncNodes``, kubernetes
        pkg/controller/daemon/daemon_controller.go), so a pod controlled by another uid, or by
        none, is not a reader: it is left out with a warning that names it (failing on it would let
        any such pod fail every deploy, while leaving it out keeps the proof to the readers the
        deployment made). The controller keeps one non-terminating pod per node (no ``maxSurge`` in
        the chart), so a second one on a node is a forged controller reference or a controller
        that is not the DaemonSet's: which of them counts the node's bytes cannot be told, so the
        node fails the run and neither is read."""
        c = self.config
        name = wire.efa_counters_name(c.ray_service)
        daemon_set = self._kube(self.kube.daemon_set, c.namespace, name)
        uid = ((daemon_set or {}).get("metadata") or {}).get("uid")
        if not uid:
            self.report.fail(f"the EFA counter DaemonSet {name} is not in namespace {c.namespace}, so no node's EFA "
                             "bytes can be read from a reader the deployment made")
            return []
        by_node: dict[str, list[dict[str, Any]]] = {}
        strangers = []
        for pod in self._kube(self.kube.pods, c.namespace, c.efa_counter_selector):
            meta = pod.get("metadata") or {}
            node = (pod.get("spec") or {}).get("nodeName") or meta.get("name") or "?"
            if not objects.controlled_by(pod, "DaemonSet", uid):
                strangers.append(f"{meta.get('name')} on {node}")
            elif not meta.get("deletionTimestamp"):  # a reader being replaced: its successor counts
                by_node.setdefault(node, []).append(pod)
        if strangers:
            self.report.warnings.append(
                f"ignored {len(strangers)} pod(s) with the EFA counter readers' labels that DaemonSet {name} does not "
                f"control: {', '.join(sorted(strangers))} (a pod someone else created; only the DaemonSet's are read)")
        readers = []
        for node, pods in sorted(by_node.items()):
            if len(pods) == 1:
                readers.append(pods[0])
                continue
            self.doubled_readers.add(node)
            self.report.fail(f"node {node} has {len(pods)} EFA counter readers controlled by DaemonSet {name} "
                             f"({', '.join(sorted(str((p.get('metadata') or {}).get('name')) for p in pods))}), where "
                             "the DaemonSet runs one: which counts the node's bytes cannot be told, so none is read")
        return readers

    def read_efa(self, counter_pods: list[dict[str, Any]]) -> dict[str, efa.Counters]:
        readings: dict[str, efa.Counters] = {}
        for pod in counter_pods:
            node = (pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"]
            try:
                readings[node] = efa.parse_reading(self.endpoints.get(
                    self.endpoints.pod_url(pod, self.config.efa_counter_port, efa.COUNTER_PATH), reads.EFA_COUNTERS,
                    self._read_timeout()))
            except ValueError as error:  # over its limit, or not counts: not the package's reader answering
                self.report.fail(f"the EFA counters of {node} are not a reading: {error}")
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"cannot read EFA counters on {node}: {error}")
        return readings

    def read_metrics(self, workers: list[dict[str, Any]]) -> dict[str, str]:
        """Each worker's ``/metrics`` body (Ray's metrics agent on the node). One that cannot be read
        is a warning (the EFA counters are the proof); one over its limit, or whose series read here
        carry a value that is not a count (``NaN``, infinite, negative), fails the run and is left
        out, so no figure is computed from it: a ``NaN`` failure counter must not read as none."""
        readings = {}
        for pod in workers:
            name = pod["metadata"]["name"]
            try:
                text = self.endpoints.get(self.endpoints.pod_url(pod, self.config.metrics_port, "/metrics"),
                                          reads.METRICS, self._read_timeout()).decode(errors="replace")
                metrics.NixlTotals.of(text), serving_window.read_worker(text)  # read_worker reads the path counter too
            except (reads.TooLarge, metrics.Invalid) as error:
                self.report.fail(f"the metrics of {name} cannot be used: {error}")
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"cannot read metrics of {name}: {error}")
            else:
                readings[name] = text
        return readings

    def _read_timeout(self) -> float:
        """A pod read's deadline: 15 s, or what is left of the run (at least 1 s), so that reads of
        many workers that each drip cannot carry the run past its own deadline."""
        return max(1.0, min(15.0, self._remaining()))

    def record_window(self, workers: list[dict[str, Any]], texts: Mapping[str, str],
                      efa_counters: Mapping[str, efa.Counters]) -> None:
        """Keep this run's reading and report what was served since the previous run's.

        Read before the probes. A run that cannot read or keep its state fails: the serving
        metrics and their alarms would otherwise go quiet with nothing to say why. A previous
        reading that cannot be used (another schema, edited by hand) is replaced, with a warning."""
        c = self.config
        labels = {pod["metadata"]["name"]: (pod["metadata"].get("labels") or {}) for pod in workers}
        roles = {name: pod_labels.get(wire.RAY_GROUP_LABEL, "") for name, pod_labels in labels.items()}
        created = {pod["metadata"]["name"]: objects.created(pod) for pod in workers}
        # EFA only on nodes that run a worker of this cluster: a node Cluster Autoscaler is about
        # to remove, or a surge node of a node group update, moves nothing and proves nothing.
        worker_nodes = {(pod.get("spec") or {}).get("nodeName"): roles[pod["metadata"]["name"]] for pod in workers}
        try:
            state = self._kube(self.kube.config_map, c.namespace, c.state_config_map)
        except Exception as error:  # noqa: BLE001
            self.report.fail(f"cannot read the state ConfigMap {c.state_config_map}, so the serving metrics "
                             f"cannot be computed: {error}")
            return
        previous: Any = None
        previous_text = (state.get("data") or {}).get(wire.MONITOR_STATE_FILE)
        if previous_text:
            try:
                previous = reads.json_loads(previous_text)
                if not isinstance(previous.get("workers"), dict):
                    raise ValueError("no workers")
            except Exception as error:  # noqa: BLE001 - anything unusable is replaced below
                self.report.warnings.append(f"replaced an unusable previous reading in {c.state_config_map}: {error}")
                previous = None
        unread = {name: previous["workers"][name] for name in roles
                  if name not in texts and previous is not None and name in previous["workers"]}
        current = serving_window.snapshot(
            {pod: (roles.get(pod, ""), text, created.get(pod, 0.0)) for pod, text in texts.items()},
            {node: (worker_nodes[node], counters) for node, counters in efa_counters.items() if node in worker_nodes},
            cluster=self.active_cluster, carried=unread)
        if previous is not None:
            try:
                self.report.sections["window"] = serving_window.window(previous, current, c.disaggregated,
                                                                           bool(c.min_prompt_tokens))
            except Exception as error:  # noqa: BLE001
                self.report.warnings.append(f"replaced an unusable previous reading in {c.state_config_map}: {error}")
        try:
            self._kube(self.kube.replace_config_map,
                       {**state, "data": {**(state.get("data") or {}), wire.MONITOR_STATE_FILE: json.dumps(current)}})
        except Exception as error:  # noqa: BLE001
            self.report.fail(f"cannot keep this run's reading in {c.state_config_map}, so the next run cannot "
                             f"compute its serving metrics: {error}")

    def run_probes(self) -> bool:
        """Send the probes, each bounded by the time left; False when the deadline cut them short.

        ``probes`` long prompts (``probe_prompt_words``, at least ``min_prompt_tokens`` words), and
        with ``min_prompt_tokens`` one short prompt more (:func:`.probe.short_prompt`), so that both
        paths of the conditional decode server are taken; each successful probe is then classified by
        the server's own ``usage.prompt_tokens`` (:meth:`probe_paths`)."""
        c = self.config
        url = self.endpoints.service_url(c.openai_url, c.namespace)
        prompts = [lambda: probe.probe_prompt(c.probe_prompt_words)] * c.probes
        if c.min_prompt_tokens:
            prompts.append(probe.short_prompt)
        results = []
        reserve = c.post_probe_reserve_seconds if c.disaggregated else 0.0
        for index, prompt in enumerate(prompts):
            if self._remaining() - reserve <= 1.0:
                self.report.fail(f"the deadline passed after {index} of {len(prompts)} probes")
                break
            timeout = min(300.0, self._remaining() - reserve)
            results.append(probe.chat_probe(url, c.model, prompt(), c.probe_max_tokens,
                                            timeout=timeout, opener=self.endpoints.open))
        ok = [r for r in results if r.ok]
        self.report.sections["probes"] = {
            "count": len(results), "ok": len(ok),
            "ttft_ms_p50": _median([r.ttft_ms for r in ok]), "e2e_ms_p50": _median([r.e2e_ms for r in ok]),
            "via_api_server_proxy": self.endpoints.via_api_proxy,
            "results": [r.to_json() for r in results],
        }
        if c.min_prompt_tokens:
            for index, path in self.probe_paths().items():
                self.report.sections["probes"]["results"][index]["prefill"] = path
        for index, result in enumerate(results):
            if not result.ok:
                self.report.fail(f"probe {index + 1} failed: {result.error}")
        return len(results) == len(prompts)

    def probe_paths(self) -> dict[int, str]:
        """Where each successful probe that reported its ``usage.prompt_tokens`` was prefilled, by
        its index: ``local`` below ``min_prompt_tokens``, ``remote`` from it on, the decode
        server's own rule on the server's own count (:func:`wire.prefill_path`). Every one is remote
        without a threshold."""
        results = self.report.sections.get("probes", {}).get("results", [])
        return {index: wire.prefill_path(r["prompt_tokens"], self.config.min_prompt_tokens)
                for index, r in enumerate(results) if r.get("ok") and r.get("prompt_tokens")}

    def check_paths(self, texts_before: Mapping[str, str], texts_after: Mapping[str, str],
                    workers: list[dict[str, Any]]) -> None:
        """With ``min_prompt_tokens``: the decode workers' requests per path
        (:data:`.metrics.PD_COUNTER`), per series read before and after the probes, must count at
        least the probes of each class (more: other traffic during continuous verification). No
        decode worker exporting the counter means the conditional decode server is not what runs."""
        c = self.config
        paths = self.probe_paths()
        sent = {path: sum(1 for p in paths.values() if p == path) for path in metrics.PATHS}
        decode = sorted(pod["metadata"]["name"] for pod in workers
                        if objects.label(pod, wire.RAY_GROUP_LABEL) == "decode" and pod["metadata"]["name"] in texts_after)
        after = {pod: metrics.path_series(metrics.parse(texts_after[pod])) for pod in decode}
        by_pod: dict[str, dict[str, float]] = {}
        for pod, series in after.items():
            # A delta needs both readings: counting from zero would credit every request since boot.
            if series is not None and pod in texts_before:
                before = metrics.path_series(metrics.parse(texts_before[pod])) or {}
                by_pod[pod] = {path: metrics.series_delta(before.get(path, {}), series.get(path, {}))
                               for path in metrics.PATHS}
        counted = {path: sum(d[path] for d in by_pod.values()) for path in metrics.PATHS} if by_pod else None
        self.report.sections["paths"] = {
            "min_prompt_tokens": c.min_prompt_tokens, "counter": metrics.PD_COUNTER,
            "probes": {path: [i + 1 for i, p in sorted(paths.items()) if p == path] for path in metrics.PATHS},
            "counted": counted, "by_pod": by_pod,
        }
        if all(series is None for series in after.values()):  # none read, or none exports it
            self.report.fail(f"no decode worker exports {metrics.PD_COUNTER} ({', '.join(decode) or 'none read'}) "
                             f"with disaggregation.min_prompt_tokens {c.min_prompt_tokens}: the conditional decode "
                             f"server is not running (the Serve application must import {wire.PD_IMPORT_PATH})")
            return
        if not sent[wire.PD_LOCAL]:
            self.report.warnings.append(f"no probe had fewer than {c.min_prompt_tokens} prompt tokens: the decode "
                                        "replicas' own prefill was not probed")
        if counted is None:
            self.report.fail(f"{metrics.PD_COUNTER} was not read before the probes, so their paths are unknown")
            return
        for path, what in ((wire.PD_LOCAL, "under"), (wire.PD_REMOTE, "at least")):
            if counted[path] < sent[path]:
                self.report.fail(f'{metrics.PD_COUNTER}{{prefill="{path}"}} grew by {counted[path]:.0f} on the decode '
                                 f"workers during the probes, fewer than the {sent[path]} probe(s) of {what} "
                                 f"{c.min_prompt_tokens} prompt tokens (disaggregation.min_prompt_tokens)")

    def check_transport_logs(self, workers: list[dict[str, Any]]) -> None:
        c = self.config
        # Only what the current replicas printed: after an in-place Serve redeploy the container log
        # still holds the previous replicas' lines (an old UCX warning, or an old EFA line that
        # would vouch for replicas that printed none). Since when: KubeRay's last submission of the
        # config to this cluster (rollout._serve_submitted).
        deployed = self.application.get("last_deployed_time_s")
        since = objects.rfc3339(float(deployed) - rollout.LOG_SINCE_MARGIN_SECONDS) if deployed else None
        if c.log_window_seconds is not None:
            window_start = time.time() - c.log_window_seconds
            since = objects.rfc3339(max(window_start, float(deployed) - rollout.LOG_SINCE_MARGIN_SECONDS) if deployed else window_start)
        logs = {}
        for pod in workers:
            name = pod["metadata"]["name"]
            try:
                logs[name] = self._kube(self.kube.pod_log, c.namespace, name, c.worker_container, since=since)
            except Exception as error:  # noqa: BLE001
                self.report.fail(f"cannot read the log of {name}: {error}")
        result = evidence.classify_logs(logs, c.expected_backend, c.expected_provider,
                                        require_startup=c.log_window_seconds is None)
        backends = {e["backend"] for e in result["by_source"].values()}
        providers = {e["provider"] for e in result["by_source"].values()}
        self.report.sections["transport"] = {
            "verdict": result["verdict"], "backend": _one(backends), "provider": _one(providers),
            "log_since": since, "by_pod": result["by_source"],
        }
        for reason in result["reasons"]:
            self.report.fail(reason, cause=True)

    def check_kv(self, efa_before: Mapping[str, efa.Counters], efa_after: Mapping[str, efa.Counters],
                 nixl_before: Mapping[str, metrics.NixlTotals], nixl_after: Mapping[str, metrics.NixlTotals],
                 workers: list[dict[str, Any]]) -> None:
        """The EFA bytes against the prediction (the verdict), and vLLM's NIXL figures (failed
        transfers fail; the rest corroborate). NIXL's transfer series live on decode, which pulls the
        KV cache: prefill exports none, and a decode worker exports them from its first transfer."""
        c = self.config
        probes_json = self.report.sections.get("probes", {}).get("results", [])
        # Only the remote class moves KV bytes: a prompt shorter than min_prompt_tokens is prefilled
        # on the decode replica (ray_llm_eks.pd.conditional), with no NIXL read.
        remote = [probes_json[i] for i, path in sorted(self.probe_paths().items()) if path == wire.PD_REMOTE]
        uncounted = [i + 1 for i, r in enumerate(probes_json) if r.get("ok") and not r.get("prompt_tokens")]
        if uncounted:
            # Counting them as 0 tokens would lower the bar to the sequence state alone.
            self.report.fail(f"probe(s) {', '.join(map(str, uncounted))} reported no usage.prompt_tokens (the server "
                             "ignored stream_options.include_usage), so the KV bytes they moved cannot be predicted")
        predicted = sum(wire.kv_transfer_bytes(r["prompt_tokens"], bytes_per_token=c.kv_bytes_per_token,
                                               bytes_per_sequence=c.kv_bytes_per_sequence,
                                               block_tokens=c.kv_block_tokens, tokens_withheld=c.kv_tokens_withheld)
                        for r in remote)
        role_of_node = {}
        for entry in self.report.sections.get("nodes", []):
            role_of_node[entry["name"]] = entry["role"]
        # A delta needs both readings: counting from zero would credit every byte since boot.
        read_twice = sorted(set(efa_before) & set(efa_after))
        by_node = {node: {"role": role_of_node.get(node), **efa.node_delta(efa_before[node], efa_after[node])}
                   for node in read_twice}
        sent = sum(d["sent_bytes"] for d in by_node.values() if d["role"] == "prefill")
        received = sum(d["received_bytes"] for d in by_node.values() if d["role"] == "decode")
        moved = min(sent, received)
        # Per series, never absolute totals: after a Serve redeploy the replaced replicas' series
        # stay exported, frozen, beside the new ones (metrics module docstring).
        roles = {pod["metadata"]["name"]: objects.label(pod, wire.RAY_GROUP_LABEL) or "" for pod in workers}
        read_twice_pods = sorted(set(nixl_before) & set(nixl_after))
        nixl_by_pod = {pod: {"role": roles.get(pod, ""), "exports_transfers": nixl_after[pod].transfers_exported,
                             **metrics.nixl_delta(nixl_before[pod], nixl_after[pod])} for pod in read_twice_pods}
        nixl: dict[str, Any] = {**metrics.sum_deltas(nixl_by_pod.values()), "by_pod": nixl_by_pod}
        fraction = moved / predicted if predicted else None
        self.report.sections["kv"] = {
            "predicted_bytes": predicted,
            "kv_bytes_per_token": c.kv_bytes_per_token,
            "kv_bytes_per_sequence": c.kv_bytes_per_sequence,
            "kv_block_tokens": c.kv_block_tokens, "kv_tokens_withheld": c.kv_tokens_withheld,
            "efa_prefill_sent_bytes": sent, "efa_decode_received_bytes": received,
            "efa_moved_bytes": moved, "efa_fraction_of_predicted": round(fraction, 4) if fraction is not None else None,
            "min_fraction": c.min_kv_fraction,
            "efa_by_node": by_node,
            "nixl": nixl,
            "nixl_fraction_of_predicted": (round(nixl["bytes_transferred"] / predicted, 4)
                                           if predicted and nixl["bytes_transferred"] is not None else None),
        }
        if c.min_prompt_tokens:
            self.report.sections["kv"]["predicted_probes"] = len(remote)
        prefill_nodes = {n for n, r in role_of_node.items() if r == "prefill"}
        decode_nodes = {n for n, r in role_of_node.items() if r == "decode"}
        missing = sorted((prefill_nodes | decode_nodes) - set(read_twice) - self.doubled_readers)
        if missing:
            self.report.fail(f"no EFA counter reading before and after the probes from {', '.join(missing)} "
                             "(is the efa-counters DaemonSet running there?)")
        if not predicted and self.probe_paths():
            self.report.fail(f"no successful probe had {c.min_prompt_tokens} prompt tokens or more "
                             "(disaggregation.min_prompt_tokens), so none took the prefill leg")
        elif not predicted:
            self.report.fail("no successful probe reported its prompt tokens, so the KV bytes cannot be predicted")
        elif fraction is not None and fraction < c.min_kv_fraction:
            self.report.fail(f"EFA counters moved {moved} bytes (prefill sent {sent}, decode received {received}) "
                             f"across the probes, {fraction:.1%} of the {predicted} KV bytes predicted; at least "
                             f"{c.min_kv_fraction:.0%} must cross EFA")
        if nixl["failed_transfers"]:
            self.report.fail(f"vLLM counted {nixl['failed_transfers']:.0f} failed NIXL transfer(s) during the probes")
        if nixl["failed_notifications"]:
            self.report.warnings.append(
                f"vLLM counted {nixl['failed_notifications']:.0f} failed NIXL notification(s) during the probes: decode "
                "read the KV cache but could not tell prefill, which holds those blocks until their lease expires "
                "(the side-channel ports and the EFA security group between the pods)")
        if nixl["kv_expired_reqs"]:
            self.report.warnings.append(
                f"prefill freed the KV cache of {nixl['kv_expired_reqs']:.0f} request(s) at its lease's end during the "
                "probes (vllm:nixl_num_kv_expired_reqs): decode never confirmed reading it, a lost notification or a "
                "request decode did not pull (possibly from before the probes)")
        self._warn_missing_nixl(nixl_by_pod, roles)

    def _warn_missing_nixl(self, nixl_by_pod: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str]) -> None:
        """vLLM's NIXL byte count corroborates the EFA counters, which are the proof: its absence is a
        warning. Decode pulls the KV cache, so only decode workers export it (prefill's silence is
        expected), and only from their first transfer; after successful probes, no decode worker
        exporting it means the KV cache was not counted by NIXL (or Ray's agent does not export it)."""
        ok = self.report.sections.get("probes", {}).get("ok") or 0
        decode = sorted(pod for pod, role in roles.items() if role == "decode")
        unread = [pod for pod in decode if pod not in nixl_by_pod]
        silent = [pod for pod in decode if pod in nixl_by_pod and not nixl_by_pod[pod]["exports_transfers"]]
        # A decode worker that was not read is already a warning ("cannot read metrics of ..."); one
        # that exports the series while another does not may simply have served every probe.
        if ok and silent and len(silent) + len(unread) == len(decode):
            self.report.warnings.append(
                f"no decode worker exports ray_vllm_nixl_bytes_transferred after {ok} successful probe(s) "
                f"({', '.join(silent)}): NIXL's own count of the KV bytes is missing (the EFA counters are the proof; "
                "check the worker's metrics on port 8080 and that the engines run the NixlConnector)")


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _median(values: list[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    middle = len(present) // 2
    value = present[middle] if len(present) % 2 else (present[middle - 1] + present[middle]) / 2
    return round(value, 1)


def _one(values: set[Any]) -> Any:
    present = values - {None}
    return next(iter(present)) if len(present) == 1 else (sorted(present) if present else None)

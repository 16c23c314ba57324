"""``python -m <package> run|efa-counters|classify``: the gate's entry points in the cluster.

Exit codes of ``run`` (the same as ``ray-llm-eks verify``): 0 pass, 1 fail, 3 no cluster access.
Whatever happens in ``run`` (bad settings, a crash, no API access), the wait condition is
signalled, with retries, so a deploy never waits out its timeout for a gate that has already ended.
With no wait condition (``kubernetes_owner: gitops``: the Job has neither ``GATE_SIGNAL_URL`` nor
``GATE_SIGNAL_SECRET``) the exit code is the signal: the Job (``backoffLimit: 0``) fails with the
gate, which fails the Argo CD sync whose PostSync hook it is, or the Flux Kustomization that waits
for it; the report is on stdout and in the report ConfigMap either way.

``run`` takes its settings from the rendered ``gate.json`` (``--config``); ``--set`` overrides any
of them with a JSON object, and ``--expect-provider`` the libfabric provider the worker logs must
prove (``expected_provider``, default ``efa``; ``tcp`` where no EFA device exists and libfabric's
tcp provider is the intended path). ``classify`` (the same as ``ray-llm-eks verify-logs``, and the
same ``--expect-provider``) exits 0 when every log proves it, 1 otherwise, 2 when a file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import aws_secret, cfn_signal, efa, evidence, publish
from .gate import Gate
from .kube import Endpoints, Kube, KubeAccess, NoClusterAccess
from .report import Report
from .shared import wire

EXIT_PASS, EXIT_FAIL, EXIT_UNREADABLE, EXIT_NO_ACCESS = 0, 1, 2, 3
SIGNAL_URL_ENV = "GATE_SIGNAL_URL"
"""The wait condition's URL itself: for a gate run by hand outside a deploy (the tests, a twin)."""
SIGNAL_SECRET_ENV = "GATE_SIGNAL_SECRET"
"""The ARN of the Secrets Manager secret holding the URL: what the deploy's Job gets, so the URL is in
no manifest, event or log; read with the gate's own Pod Identity role when the verdict is known."""
SIGNAL_ATTEMPTS = 3
SIGNAL_TIMEOUT_SECONDS = 20.0
SECRET_TIMEOUT_SECONDS = 5.0
"""3 attempts of at most 5 + 5 s (the credentials and the secret, until read once) and 20 s (the
PUT), 2 and 4 s apart: at most 96 s, inside the 120 s the gate keeps between its deadline and the
wait condition's timeout, less the report's 10 s write."""


def _log(message: str) -> None:
    print(f"[gate] {message}", file=sys.stderr, flush=True)


class _Unconfigured:
    """Stands in for the settings when they cannot be read, so the failure can still be reported."""

    run_id = job_name = namespace = ray_service = topology = ""


def _signal(url: str | None, secret: str | None, success: bool, reason: str, unique_id: str, data: Any) -> None:
    for attempt in range(1, SIGNAL_ATTEMPTS + 1):
        try:
            if url is None:
                # Read at the end, with fresh credentials; the URL is never printed.
                url = aws_secret.get_secret_string(secret or "", timeout=SECRET_TIMEOUT_SECONDS)
            status = cfn_signal.send(url, success, reason, unique_id, data, timeout=SIGNAL_TIMEOUT_SECONDS)
            _log(f"signalled CloudFormation: {'SUCCESS' if success else 'FAILURE'} (HTTP {status})")
            return
        except Exception as error:  # noqa: BLE001 - retried, then reported
            _log(f"signal attempt {attempt} of {SIGNAL_ATTEMPTS} failed: {error}")
            if attempt < SIGNAL_ATTEMPTS:
                time.sleep(2 ** attempt)
    _log("could not signal CloudFormation; the deploy will fail when the wait condition times out")


def _keep_report(kube: Kube, config: wire.GateSettings, report: Report) -> None:
    """A copy in a ConfigMap the deploy does not manage: a rollback prunes the Job (and its log), not this."""
    try:
        kube.put_config_map(config.namespace, report.report_config_map,
                               {wire.INSTANCE_LABEL: config.ray_service, wire.COMPONENT_LABEL: wire.GATE_REPORT_COMPONENT},
                               {wire.GATE_REPORT_FILE: json.dumps(report.to_json(), indent=2)})
    except Exception as error:  # noqa: BLE001 - the Job log still has it
        _log(f"could not keep the report in ConfigMap {report.report_config_map}: {error}")


def _check_rendered_hash(settings: Any) -> None:
    """Refuse settings other than the ones rendered beside this pod: continuous verification's pod
    carries their hash (``wire.SETTINGS_SHA256_ENV``), and a ConfigMap replaced since (deleted and
    created again by whoever may, with other thresholds) hashes otherwise. Nothing is checked or
    published on such settings: the run fails, and the silent period trips the alarm."""
    expected = os.environ.get(wire.SETTINGS_SHA256_ENV)
    if not expected:
        return  # the deploy's Job and `ray-llm-eks verify`: their settings come with them
    found = wire.settings_sha256(settings)
    if found != expected:
        raise ValueError(f"their SHA-256 is {found}, not {expected}, the hash rendered into this pod "
                         f"({wire.SETTINGS_SHA256_ENV}): the settings ConfigMap was replaced after the deploy; "
                         "refusing to verify against it (deploy again to restore it)")


def run(args: argparse.Namespace) -> int:
    signal_url = os.environ.get(SIGNAL_URL_ENV) or None
    signal_secret = os.environ.get(SIGNAL_SECRET_ENV) or None
    code, kube = EXIT_FAIL, None
    try:
        settings = json.loads(Path(args.config).read_text())
        _check_rendered_hash(settings)
        overrides = json.loads(args.set) if args.set else {}
        if args.expect_provider:
            overrides["expected_provider"] = args.expect_provider
        config: Any = wire.GateSettings.from_json({**settings, **overrides})
    except Exception as error:  # noqa: BLE001
        config = _Unconfigured()
        report = Report(config)  # type: ignore[arg-type]
        report.fail(f"cannot read the gate settings {args.config}: {error}")
    else:
        report = Report(config)
        try:
            access = KubeAccess.with_token_file(args.kube_api, args.kube_token_file) if args.kube_api \
                else KubeAccess.in_cluster()
            kube = Kube(access)
            gate = Gate(config, kube, Endpoints(kube, via_api_proxy=args.via_api_proxy), log=_log)
            report = gate.report  # what was found so far survives a crash below
            report = gate.run()
            code = EXIT_PASS if report.verdict in ("pass", "skipped") else EXIT_FAIL
        except NoClusterAccess as error:
            report.fail(f"no cluster access: {error}")
            code = EXIT_NO_ACCESS
        except Exception as error:  # noqa: BLE001 - the deploy must hear about any crash, not time out
            report.fail(f"the gate crashed: {type(error).__name__}: {error}")
            traceback.print_exc(file=sys.stderr)
    report.finish()
    print(json.dumps(report.to_json(), indent=2), flush=True)
    if args.report_file:
        Path(args.report_file).write_text(json.dumps(report.to_json(), indent=2))
    if kube is not None and isinstance(config, wire.GateSettings) and config.as_deploy_job and config.job_name:
        _keep_report(kube, config, report)
    if args.publish and isinstance(config, wire.GateSettings) and report.verdict != "skipped":
        try:
            names = publish.publish(args.publish, config.namespace, config.ray_service, code == EXIT_PASS,
                                    report.sections.get("window"))
            _log(f"published {wire.TRANSPORT_VERIFIED}={1 if code == EXIT_PASS else 0} and {len(names) - 1} serving "
                 f"figure(s) to CloudWatch ({args.publish})")
        except Exception as error:  # noqa: BLE001 - a run that cannot report is a failed run
            _log(f"could not publish {wire.TRANSPORT_VERIFIED}: {type(error).__name__}: {error}")
            code = EXIT_FAIL if code == EXIT_PASS else code
    if signal_url or signal_secret:
        reason = "; ".join(report.reasons) or "the endpoint answered and the KV cache crossed EFA"
        _signal(signal_url, signal_secret, code == EXIT_PASS, reason, f"gate-{config.run_id}", report.summary())
    else:
        _log(f"no wait condition to signal: the verdict is this Job's exit status ({code}: "
             f"{'the Job succeeds' if code == EXIT_PASS else 'the Job fails'})")
    _log(f"verdict: {report.verdict}" + "".join(f"\n  - {r}" for r in report.reasons))
    return code


def classify(args: argparse.Namespace) -> int:
    try:
        # As the gate reads a pod's log (kube.pod_log): bytes decoded, no newline translation.
        logs = {name: Path(name).read_bytes().decode(errors="replace") for name in args.files}
    except OSError as error:
        print(f"cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_UNREADABLE
    result = evidence.classify_logs(logs, provider=args.expect_provider)
    print(json.dumps(result, indent=2))
    return EXIT_PASS if result["verdict"] == "pass" else EXIT_FAIL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gate", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="roll out, wait, probe and verify; print the JSON report")
    run_parser.add_argument("--config", required=True, help="the gate settings (JSON) the chart rendered")
    run_parser.add_argument("--set", help="JSON object of settings overriding --config's")
    run_parser.add_argument("--expect-provider", metavar="PROVIDER",
                            help="the libfabric provider the worker logs must prove (overrides expected_provider, "
                                 f"default {evidence.EXPECTED_PROVIDER!r})")
    run_parser.add_argument("--kube-api", help="API server URL (default: the in-cluster service account)")
    run_parser.add_argument("--kube-token-file", help="bearer token file for --kube-api")
    run_parser.add_argument("--via-api-proxy", action="store_true",
                            help="reach pods and Services through the API server proxy (from outside the cluster)")
    run_parser.add_argument("--report-file", help="also write the JSON report here")
    run_parser.add_argument("--publish", metavar="METRIC_NAMESPACE",
                            help=f"put {wire.TRANSPORT_VERIFIED} (1 pass, 0 fail) and the serving figures since the previous run "
                                 f"to CloudWatch with boto3, into this deployment's own namespace "
                                 f"({wire.METRIC_NAMESPACE}/<stack>/<namespace>/<service>)")
    run_parser.set_defaults(handler=run)
    counters = commands.add_parser("efa-counters", help="serve this node's EFA byte counters over HTTP")
    counters.add_argument("--sysfs", default="/sys")
    counters.add_argument("--port", type=int, default=efa.COUNTER_PORT)
    counters.add_argument("--host", default="0.0.0.0", help="the address to listen on (default: every interface, "
                          "as the DaemonSet's pod has its own; a twin's nodes sharing one host take one each)")
    counters.set_defaults(handler=lambda a: efa.serve(a.sysfs, a.port, a.host) or 0)
    classify_parser = commands.add_parser("classify", help="classify saved worker logs")
    classify_parser.add_argument("files", nargs="+")
    classify_parser.add_argument("--expect-provider", metavar="PROVIDER", default=evidence.EXPECTED_PROVIDER,
                                 help=f"the libfabric provider the logs must prove (default {evidence.EXPECTED_PROVIDER!r})")
    classify_parser.set_defaults(handler=classify)
    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

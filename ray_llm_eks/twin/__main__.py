"""``make twin``: run the exact serving app of a configuration on this machine, then the gate.

``python -m ray_llm_eks.twin [--config FILE] [--topology disaggregated|colocated|both] [--keep]``
renders the configuration as ``make synth`` does, starts the twin (docs/twin.md), deploys each
topology's Serve app, sends one chat completion, runs the deployment gate with the provider the
twin offers (``tcp``), and stops, removing everything it made. ``--keep`` leaves it serving
until Ctrl-C and prints how to reach it. Exit code 0 when every gate passed, 1 when one failed,
2 when the twin could not start.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

from . import render, twin_profile
from .cluster import TwinError
from .run import DEFAULT_CONFIG, ROOT, TwinRun, terminate_gracefully


def chat(url: str, model: str, prompt: str, max_tokens: int = 16) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_llm_eks.twin", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--topology", choices=[*render.TOPOLOGIES, "both"], default="both")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".twin" / "run")
    parser.add_argument("--keep", action="store_true", help="keep serving until Ctrl-C")
    args = parser.parse_args(argv)
    terminate_gracefully()
    print("The twin profile changes these rendered values (docs/twin.md):")
    for what, why in twin_profile.CHANGES:
        print(f"  - {what}: {why}")
    topologies = render.TOPOLOGIES if args.topology == "both" else (args.topology,)
    failed = False
    started = time.monotonic()
    try:
        with TwinRun(args.workdir, args.config) as twin:
            for topology in topologies:
                twin.use(topology)
                settings = twin.settings(topology)
                answer = chat(twin.openai_url, settings["model"], "Say hello to the twin.")
                print(f"{topology}: {json.dumps(answer['choices'][0]['message']['content'])} "
                      f"({answer['usage']['prompt_tokens']} prompt tokens)")
                result = twin.gate(settings)
                summary = {k: result.report.get(k) for k in ("verdict", "reasons")}
                summary.update({k: result.report.get("kv", {}).get(k)
                                for k in ("predicted_bytes", "efa_moved_bytes", "efa_fraction_of_predicted")})
                print(f"{topology}: gate {json.dumps(summary)}")
                failed = failed or result.verdict != "pass"
            print(f"twin: done in {time.monotonic() - started:.0f} s; logs in {args.workdir / 'logs'}")
            if args.keep:
                assert twin.network is not None
                client = twin.network.namespace("client")
                print(f"serving {twin.topology} until Ctrl-C:\n  sudo ip netns exec {client} curl -s "
                      f"{twin.openai_url}/v1/models")
                while True:
                    time.sleep(3600)
    except TwinError as error:
        print(f"twin: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("twin: stopped; everything it started is gone", file=sys.stderr)
        return 0 if args.keep and not failed else 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

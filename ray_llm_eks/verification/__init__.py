"""The deployment gate: proof, after each deploy, that the endpoint answers and the KV cache crossed EFA.

This package runs in three places with the same code:

- in the cluster, as the Job the serving construct applies after every change to the serving
  spec (``python -m rayllmeks_gate run``; its files travel in a ConfigMap, see :mod:`.bundle`),
  signalling the deploy's CloudFormation wait condition;
- on the GPU nodes, as the DaemonSet that serves the EFA byte counters (:mod:`.efa`);
- on a workstation, as ``ray-llm-eks verify`` (through the API server) and
  ``ray-llm-eks verify-logs`` (the log classifier alone, on saved logs).

It imports only the standard library and its own modules, relatively, so the in-cluster copy
needs nothing from the image but a Python 3.9+ interpreter (a test checks both); the modules it
shares with the rest of the project travel with it (:mod:`.shared`).
"""

from .evidence import TransportEvidence, classify, classify_logs
from .gate import Gate
from .report import Report
from .shared import wire

GateSettings = wire.GateSettings

__all__ = ["Gate", "GateSettings", "Report", "TransportEvidence", "classify", "classify_logs"]

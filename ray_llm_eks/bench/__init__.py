"""Benchmark a deployment's OpenAI endpoint and turn the load generator's figures into money.

``ray-llm-eks bench`` drives NVIDIA AIPerf (the optional extra ``bench``) once per concurrency
level and writes ``summary.json`` (one entry per level: latency percentiles, accepted responses
within the SLOs, KV-transfer time from the servers' metrics, cost per accepted response, hourly
or per token, and the nodes' GPU and EFA utilization, :mod:`.utilization`),
the greedy completions of a fixed prompt set (``agreement.json``) and AIPerf's raw output.
``ray-llm-eks compare`` puts two runs side by side and gives the verdict. ``docs/benchmark.md``
explains the method.

Everything except the plots (:mod:`.compare` imports matplotlib when it draws) is standard
library, with relative imports only: the same files run in a Kubernetes Job next to the service
(:mod:`.bundle`), where AIPerf is installed at start and the package is mounted from a ConfigMap.
"""

"""`plan`'s node budget (ray_llm_eks.planning.node_budgets, printed by the CLI): every line from
capacity down to the margin the worker leaves, in text and in --json."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ray_llm_eks import cli
from ray_llm_eks.base import sizing
from ray_llm_eks.base.instance_types import INSTANCE_TYPES
from ray_llm_eks.planning import node_budgets
from helpers.pins import unpinned_config

runner = CliRunner()
LINES = ("capacity", "kube-reserved", "eviction threshold", "huge pages", "allocatable", "DaemonSets",
         "worker request", "margin")


def test_plan_json_carries_each_worker_nodes_budget_line_by_line():
    result = runner.invoke(cli.app, ["plan", "--json"])
    assert result.exit_code == 0, result.output
    budget = json.loads(result.stdout)["node_budget"]
    assert sorted(budget) == ["decode", "prefill"]
    for role in ("prefill", "decode"):
        line = budget[role]
        assert line["instance_type"] == "g6.8xlarge"
        assert line["huge_pages"] == {"cpu_millis": 0, "memory_mib": 10_256}
        assert line["eviction"] == {"cpu_millis": 0, "memory_mib": 100}
        assert line["worker"] == {"cpu_millis": 30_000, "memory_mib": 108 * 1024}
        # the lines add up: allocatable is capacity less the three reservations, margin what is left
        for unit in ("cpu_millis", "memory_mib"):
            assert line["allocatable"][unit] == (line["capacity"][unit] - line["kube_reserved"][unit]
                                                 - line["eviction"][unit] - line["huge_pages"][unit])
            assert line["margin"][unit] == line["allocatable"][unit] - line["daemonsets"][unit] - line["worker"][unit]
            assert line["margin"][unit] >= getattr(sizing.WORKER_MARGIN, unit)


def test_plan_text_prints_the_node_budget_with_the_huge_pages_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    result = runner.invoke(cli.app, ["plan"])
    assert result.exit_code == 0, result.output
    assert "Node budget per GPU node" in result.output
    table = result.output[result.output.index("Node budget"):result.output.index("GPU memory per worker GPU")]
    for name in LINES:
        assert name in table, name
    assert "- / 10,256 MiB" in table and "30,000m / 110,592 MiB" in table and "750m / 1,156 MiB" in table


def test_node_budgets_follow_each_roles_instance_type():
    deployment = unpinned_config({"prefill": {"instance_type": "g6e.12xlarge"},
                                  "decode": {"instance_type": "p5.48xlarge"},
                                  "model": {"tensor_parallel_size": 4}})
    budgets = node_budgets(deployment)
    assert budgets["prefill"] == sizing.node_budget(INSTANCE_TYPES["g6e.12xlarge"])
    assert budgets["decode"] == sizing.node_budget(INSTANCE_TYPES["p5.48xlarge"])
    assert budgets["decode"].kube_reserved.memory_mib == 11 * 100 + 255  # p5: 2 ENIs on its default card

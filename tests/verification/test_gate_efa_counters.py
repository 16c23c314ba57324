"""The gate's KV verdict, pinned by figures written out here, and the EFA counter readers it trusts.

The fake deployment moves the bytes of the reference model's shape (``fake_cluster.kv_bytes_moved``:
68,812,800 B for each probe of the default 300 words, one KV block), not what the gate predicts: the
gate's figures are checked against these literals. Each scenario sits on or one byte either side of
the threshold (``min_kv_fraction`` 0.5 of the prediction), or has the two nodes disagree, so that
a change to the threshold, its comparison or how the two nodes' counts are combined fails here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_cluster import (DECODE_NODE, KV_BYTES_PER_COMPLETION, PREFILL_NODE, FakeDeployment, Scenario, kv_bytes_moved,
                          run_gate)

pytestmark = pytest.mark.integration

PREDICTED = 206_438_400
"""3 probes of 312 tokens (300 words and the chat template's 12) of Qwen3.5-9B: 311 sent, in one
528-token block each, 528 x 32,768 B + 51,511,296 B = 68,812,800 B a probe (docs/verification.md,
"Thresholds")."""
HALF = 34_406_400
"""Bytes per probe that make exactly half the prediction over 3 probes (103,219,200 B)."""


def _report(result: Any) -> dict[str, Any]:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_the_fakes_bytes_are_the_literal_figures_the_gate_is_held_to():
    assert KV_BYTES_PER_COMPLETION * 3 == PREDICTED and HALF * 2 * 3 == PREDICTED
    # docs/verification.md's figures: a 2,048-word probe (2,080 tokens, 4 blocks) and the planner's 4,096 tokens.
    assert (kv_bytes_moved(312), kv_bytes_moved(2_080), kv_bytes_moved(4_096)) == (
        68_812_800, 120_717_312, 189_923_328)


def test_a_healthy_run_predicts_and_counts_the_models_bytes(in_cluster_copy, fake: FakeDeployment):
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    kv = report["kv"]
    assert report["verdict"] == "pass", report["reasons"]
    assert (kv["predicted_bytes"], kv["min_fraction"]) == (PREDICTED, 0.5)
    assert (kv["efa_prefill_sent_bytes"], kv["efa_decode_received_bytes"], kv["efa_moved_bytes"]) == (PREDICTED,) * 3
    assert kv["efa_by_node"][PREFILL_NODE]["by_device"]["rdmap0s6"]["tx_bytes"] == PREDICTED
    assert kv["efa_by_node"][DECODE_NODE]["by_device"]["rdmap0s6"]["rx_bytes"] == PREDICTED
    assert kv["nixl"]["bytes_transferred"] == PREDICTED


@pytest.mark.parametrize(
    ("sent", "received", "moved", "fraction", "passes"),
    [
        (HALF, HALF, 103_219_200, 0.5, True),  # on the threshold: at least half passes
        (HALF, HALF - 1, 103_219_197, 0.5, False),  # decode one byte a probe short (rounds to 0.5; still short)
        (HALF - 1, HALF, 103_219_197, 0.5, False),  # prefill one byte a probe short
        # Prefill's device also carries other traffic (another peer): twice the KV bytes out of it,
        # while decode received 0.4 of them. The smaller side is what crossed between the two.
        (2 * KV_BYTES_PER_COMPLETION, 27_525_120, 82_575_360, 0.4, False),
        (27_525_120, 2 * KV_BYTES_PER_COMPLETION, 82_575_360, 0.4, False),  # and the other way round
        (27_525_120, 27_525_120, 82_575_360, 0.4, False),  # under half, over a quarter
        # The share NIXL moved of the gate's prediction on the H100 twin run (dense tiny Llama,
        # 20,971,520 B, 0.6504: docs/twin.md "Runs on record"): an honest run below the prediction passes.
        (44_755_845, 44_755_845, 134_267_535, 0.6504, True),
    ],
    ids=["exactly-half", "decode-one-byte-short", "prefill-one-byte-short", "prefill-busy-decode-short",
         "decode-busy-prefill-short", "four-tenths", "twin-measured-share"],
)
def test_the_kv_verdict_on_either_side_of_its_threshold(in_cluster_copy, fake: FakeDeployment, sent: int,
                                                        received: int, moved: int, fraction: float, passes: bool):
    fake.scenario = Scenario(efa_sent_bytes=sent, efa_received_bytes=received)
    result = run_gate(in_cluster_copy, fake, fake.gate_settings())
    report = _report(result)
    kv = report["kv"]
    assert (kv["efa_prefill_sent_bytes"], kv["efa_decode_received_bytes"]) == (3 * sent, 3 * received)
    assert (kv["efa_moved_bytes"], kv["efa_fraction_of_predicted"]) == (moved, fraction)
    if passes:
        assert (result.returncode, report["verdict"]) == (0, "pass"), report["reasons"]
        return
    assert (result.returncode, report["verdict"]) == (1, "fail")
    assert report["reasons"] == [
        f"EFA counters moved {moved} bytes (prefill sent {3 * sent}, decode received {3 * received}) across the "
        f"probes, {moved / PREDICTED:.1%} of the {PREDICTED} KV bytes predicted; at least 50% must cross EFA"]


# --- which pods are the readers ----------------------------------------------------------------------------


def test_readers_the_daemonset_does_not_control_are_ignored_and_named(in_cluster_copy, fake: FakeDeployment):
    """The KV cache went over TCP (the EFA devices moved nothing), and someone runs readers of their
    own with the readers' labels, listed after the DaemonSet's, whose counters grow by 1 TB a read:
    one with no controller, one claiming another DaemonSet. Neither is read."""
    fake.scenario = Scenario(efa_fraction=0.0)
    fake.plant_reader("efa-counters-spare-p", PREFILL_NODE, "127.0.0.6", controller_uid=None)
    fake.plant_reader("efa-counters-spare-d", DECODE_NODE, "127.0.0.7", controller_uid="uid-of-another-daemonset")
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    kv = report["kv"]
    assert report["verdict"] == "fail"
    assert (kv["efa_prefill_sent_bytes"], kv["efa_decode_received_bytes"]) == (0, 0)
    assert any(r.startswith("EFA counters moved 0 bytes") for r in report["reasons"]), report["reasons"]
    assert (f"ignored 2 pod(s) with the EFA counter readers' labels that DaemonSet ray-llm-efa-counters does not "
            f"control: efa-counters-spare-d on {DECODE_NODE}, efa-counters-spare-p on {PREFILL_NODE} (a pod someone "
            "else created; only the DaemonSet's are read)") in report["warnings"]


def test_a_second_reader_claiming_the_daemonset_fails_its_node(in_cluster_copy, fake: FakeDeployment):
    """A pod may name any controller in its ownerReferences: one naming the DaemonSet's uid beside the
    DaemonSet's own reader on the decode node makes two, where the DaemonSet runs one."""
    uid = fake.counter_daemon_set["metadata"]["uid"]
    fake.plant_reader("ray-llm-efa-counters-x7k2p", DECODE_NODE, "127.0.0.7", controller_uid=uid)
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "fail"
    assert report["reasons"][0] == (
        f"node {DECODE_NODE} has 2 EFA counter readers controlled by DaemonSet ray-llm-efa-counters "
        "(ray-llm-efa-counters-decode, ray-llm-efa-counters-x7k2p), where the DaemonSet runs one: which counts "
        "the node's bytes cannot be told, so none is read")
    # Neither is read: the node is not reported as merely missing a reading.
    assert set(report["kv"]["efa_by_node"]) == {PREFILL_NODE}
    assert not any("no EFA counter reading" in r for r in report["reasons"]), report["reasons"]


def test_a_reader_being_replaced_is_not_a_second_one(in_cluster_copy, fake: FakeDeployment):
    uid = fake.counter_daemon_set["metadata"]["uid"]
    fake.plant_reader("ray-llm-efa-counters-old", DECODE_NODE, "127.0.0.7", controller_uid=uid)
    fake.planted_readers[-1]["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "pass", report["reasons"]
    assert report["kv"]["efa_decode_received_bytes"] == PREDICTED  # the DaemonSet's live reader's


def test_without_the_daemonset_no_counter_is_trusted(in_cluster_copy, fake: FakeDeployment):
    fake.counter_daemon_set = None
    report = _report(run_gate(in_cluster_copy, fake, fake.gate_settings()))
    assert report["verdict"] == "fail"
    assert report["reasons"][0] == ("the EFA counter DaemonSet ray-llm-efa-counters is not in namespace inference, "
                                    "so no node's EFA bytes can be read from a reader the deployment made")
    assert report["kv"]["efa_by_node"] == {}

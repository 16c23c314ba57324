"""The wire contract (``ray_llm_eks.base.wire``): the gate's settings are typed, and the gate refuses
settings it cannot read with a message that names every problem."""

from __future__ import annotations

import json

import pytest

from ray_llm_eks.base import wire

ROLE = {"nodes": 1, "node_selector": {"role": "prefill"}, "gpus_per_node": 1}


def settings(**changes):
    values = {
        "namespace": "inference", "ray_service": "ray-llm", "topology": "disaggregated", "model": "qwen",
        "application": "llm", "openai_url": "http://ray-llm-openai.inference.svc:8000",
        "image": "ray:2.58", "image_digest": None,
        "cluster_spec_hash": "0123abcd", "hash_annotation": wire.CLUSTER_SPEC_HASH_ANNOTATION,
        "worker_container": wire.WORKER_CONTAINER, "worker_env": {"FI_PROVIDER": "efa"}, "serve_args": {"a": [1]},
        "roles": {"prefill": dict(ROLE), "decode": {**ROLE, "node_selector": {"role": "decode"},
                                                    "min_nodes": 1, "max_nodes": 3}},
        "metrics_port": wire.METRICS_PORT, "efa_counter_port": wire.EFA_COUNTER_PORT,
        "efa_counter_selector": {wire.INSTANCE_LABEL: "ray-llm"}, "kv_bytes_per_token": 100,
        "kv_bytes_per_sequence": 10, "kv_block_tokens": 16, "kv_tokens_withheld": 0, "min_kv_fraction": 0.9, "probes": 3, "probe_prompt_words": 200,
        "probe_max_tokens": 16, "deadline_seconds": 3480, "expected_backend": wire.EXPECTED_BACKEND,
        "expected_provider": wire.EXPECTED_PROVIDER, "ray_auth": "disabled",
    }
    values.update(changes)
    return values


def test_settings_round_trip_through_json_and_leave_out_the_options_at_their_default():
    data = settings(run_id="1a2b3c4d", job_name="ray-llm-gate-1a2b3c4d")
    parsed = wire.GateSettings.from_json(json.loads(json.dumps(data)))
    assert parsed.to_json() == data  # every spec field, the run's identity, no option at its default
    assert wire.GateSettings.from_json(parsed.to_json()) == parsed
    assert parsed.roles["decode"] == wire.RoleExpectation(1, {"role": "decode"}, 1, min_nodes=1, max_nodes=3)
    assert parsed.roles["decode"].autoscaled and not parsed.roles["prefill"].autoscaled
    assert "min_nodes" not in parsed.to_json()["roles"]["prefill"]
    assert (parsed.rollout, parsed.as_deploy_job, parsed.log_window_seconds) == (True, True, None)


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown gate settings: colour, probez \(a newer or older deploy"):
        wire.GateSettings.from_json(settings(probez=4, colour="red"))


def test_a_missing_setting_is_refused_by_name():
    data = settings()
    del data["probes"], data["ray_auth"]
    with pytest.raises(ValueError, match=r"missing gate settings: probes, ray_auth$"):
        wire.GateSettings.from_json(data)


def test_a_value_of_the_wrong_type_is_refused():
    with pytest.raises(ValueError, match=r"gate settings probes must be int, not str \('3'\)"):
        wire.GateSettings.from_json(settings(probes="3"))
    with pytest.raises(ValueError, match=r"gate settings rollout must be bool, not int"):
        wire.GateSettings.from_json(settings(rollout=0))
    with pytest.raises(ValueError, match=r"gate settings probes must be int, not bool"):
        wire.GateSettings.from_json(settings(probes=True))
    # A JSON integer is a float setting's value; None is one only where the field allows it.
    assert wire.GateSettings.from_json(settings(deadline_seconds=60, log_window_seconds=None)).deadline_seconds == 60
    with pytest.raises(ValueError, match="deadline_seconds must be float, not NoneType"):
        wire.GateSettings.from_json(settings(deadline_seconds=None))


def test_a_role_s_settings_are_checked_too():
    roles = {"prefill": {**ROLE, "gpus": 1}, "decode": {"nodes": 1}}
    with pytest.raises(ValueError, match="unknown gate settings of role prefill: gpus"):
        wire.GateSettings.from_json(settings(roles=roles))
    with pytest.raises(ValueError, match="missing gate settings of role decode: node_selector, gpus_per_node"):
        wire.GateSettings.from_json(settings(roles={"decode": {"nodes": 1}}))


def test_the_read_only_run_is_one_set_of_overrides():
    overrides = wire.read_only_run(300.0, probes=2)
    assert overrides == {"rollout": False, "as_deploy_job": False, "deadline_seconds": 300.0, "probes": 2}
    run = wire.GateSettings.from_json(settings()).with_overrides(overrides)
    assert (run.rollout, run.as_deploy_job, run.deadline_seconds, run.probes) == (False, False, 300.0, 2)
    with pytest.raises(ValueError, match="unknown gate settings: probe"):
        wire.read_only_run(300.0, probe=2)


def test_the_label_keys_share_one_prefix():
    keys = [wire.INSTANCE_LABEL, wire.COMPONENT_LABEL, wire.RAY_ROLE_LABEL, wire.SERVES_HTTP_LABEL,
            wire.GATE_RUN_LABEL, wire.SERVING_INSTANCE_NAMESPACE_LABEL, wire.CLUSTER_SPEC_HASH_ANNOTATION]
    assert wire.LABEL_PREFIX == "ray-llm-eks/" and all(k.startswith(wire.LABEL_PREFIX) for k in keys)
    assert wire.report_config_map("ray-llm-gate-1a2b3c4d") == "ray-llm-gate-1a2b3c4d-report"


def test_the_threshold_is_left_out_at_zero_and_read_back_above():
    assert "min_prompt_tokens" not in wire.GateSettings.from_json(settings()).to_json()  # gate.json as before it
    parsed = wire.GateSettings.from_json(settings(min_prompt_tokens=1024))
    assert parsed.min_prompt_tokens == 1024 and parsed.to_json()["min_prompt_tokens"] == 1024
    with pytest.raises(ValueError, match="min_prompt_tokens must be int"):
        wire.GateSettings.from_json(settings(min_prompt_tokens="1024"))


@pytest.mark.parametrize(("tokens", "threshold", "path"), [
    (1023, 1024, wire.PD_LOCAL), (1024, 1024, wire.PD_REMOTE), (1025, 1024, wire.PD_REMOTE),
    (1, 0, wire.PD_REMOTE),  # no threshold: every prompt through the prefill leg
])
def test_a_prompt_of_exactly_the_threshold_takes_the_prefill_leg(tokens, threshold, path):
    assert wire.prefill_path(tokens, threshold) == path


def test_the_gate_names_the_import_path_the_serve_config_renders():
    from ray_llm_eks.pd import bundle as pd_bundle

    assert wire.PD_IMPORT_PATH == pd_bundle.IMPORT_PATH

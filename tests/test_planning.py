"""`planning`, `pricing` and the architecture table: the reference figures of docs/plan.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers.pins import unpinned, unpinned_config
from ray_llm_eks.base import instance_types
from ray_llm_eks.base.deployment import Deployment
from ray_llm_eks.config import ConfigError
from ray_llm_eks.base.models import KNOWN_ARCHITECTURES, ModelArchitecture, known_architecture
from ray_llm_eks.planning import GIB, PlanError, make_plan
from ray_llm_eks.base.memory import memory_budget
from ray_llm_eks.base import pricing
from ray_llm_eks.base.pricing import PriceBasis, PriceError, load_price_table

REQUIRED_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-northeast-1", "sa-east-1")

# A Llama-3-70B-shaped dense model (80 layers, 64 heads, 8 KV heads, head_dim 128).
DENSE_70B = {
    "parameter_count": 70_553_706_496,
    "num_hidden_layers": 80,
    "full_attention_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def _config(**overrides) -> Deployment:
    return unpinned_config(overrides)


# --- the architecture table ------------------------------------------------------------------

def test_qwen35_9b_facts_from_its_config_json():
    arch = known_architecture("qwen/qwen3.5-9b")  # case-insensitive like the HF hub
    assert arch is not None
    assert (arch.num_hidden_layers, arch.full_attention_layers, arch.linear_attention_layers) == (32, 8, 24)
    assert (arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim) == (16, 4, 256)
    assert (arch.linear_num_key_heads, arch.linear_num_value_heads) == (16, 32)
    assert (arch.linear_key_head_dim, arch.linear_value_head_dim, arch.linear_conv_kernel_dim) == (128, 128, 4)
    assert arch.parameter_count * 2 == 19_306_216_416  # the BF16 checkpoint's total_size


def test_hybrid_kv_cache_counts_only_full_attention_layers():
    arch = KNOWN_ARCHITECTURES["qwen/qwen3.5-9b"]
    # 8 full-attention layers x (K and V) x 4 KV heads x 256 x 2 bytes
    assert arch.kv_cache_bytes_per_token(2) == 8 * 2 * 4 * 256 * 2 == 32_768
    # 24 linear layers x (32 x 128 x 128 x 4 B recurrent + 3 x (2 x 16 x 128 + 32 x 128) x 2 B conv)
    assert arch.linear_state_bytes_per_sequence(2) == 24 * (2_097_152 + 49_152) == 51_511_296


def test_tensor_parallel_splits_heads_but_never_below_one():
    arch = KNOWN_ARCHITECTURES["qwen/qwen3.5-9b"]
    assert arch.kv_cache_bytes_per_token(2, tensor_parallel_size=4) == 32_768 // 4
    # 8 GPUs for 4 KV heads: vLLM replicates, each GPU still holds one head.
    assert arch.kv_cache_bytes_per_token(2, tensor_parallel_size=8) == 8 * 2 * 1 * 256 * 2


def test_dense_model_has_no_linear_state():
    dense = ModelArchitecture(name="x/dense", source="test", **DENSE_70B)
    assert not dense.is_hybrid
    assert dense.linear_state_bytes_per_sequence(2) == 0
    assert dense.kv_cache_bytes_per_token(2) == 80 * 2 * 8 * 128 * 2


def test_layer_counts_must_add_up():
    with pytest.raises(ValueError, match="must equal num_hidden_layers"):
        ModelArchitecture(name="x/bad", source="test", **{**DENSE_70B, "full_attention_layers": 79})


# --- the reference deployment (docs/plan.md, "Worked example") -------------------------------

def test_reference_plan_matches_the_hand_calculation():
    summary = make_plan(unpinned()).summary()
    assert summary["fits"] is True
    text_model = 8_953_803_264  # Qwen3.5-9B less its vision tower and MTP head (language_model_only)
    assert summary["weights_gib"] == pytest.approx(text_model * 2 / GIB, abs=1e-4)  # 16.6778
    assert summary["checkpoint_gib"] == pytest.approx(19_306_216_416 / GIB, abs=1e-4)  # 17.9803
    assert summary["kv_cache_bytes_per_token"] == 32_768
    # 22.03 GiB CUDA-visible x 0.9 - 16.6778 GiB - 1.36 GiB profile reserve
    assert summary["kv_pool_gib"] == pytest.approx(22.03 * 0.9 - text_model * 2 / GIB - 1.36, abs=1e-4)
    assert summary["kv_pool_gib"] == pytest.approx(1.7892, abs=1e-4)
    # Blocks of 528 tokens x 4,096 B x a group of 8 layers = 17,301,504 B: 111 in the pool; a
    # 4,096-token request takes 8 attention blocks + 3 GDN blocks = 11.
    assert summary["kv_block_tokens"] == 528
    assert summary["max_concurrency"] == pytest.approx(111 / 11, abs=1e-4)
    assert summary["max_concurrent_sequences"] == 10 == 111 // 11
    assert summary["cold_start_seconds"] == pytest.approx(19_306_216_416 / (1000 * 2**20), abs=1e-3)  # 18.41
    # Prefill sends 4,095 tokens: 8 whole blocks of 528 x 32,768 B, + 24 GDN layers' state.
    assert summary["kv_transfer_bytes_per_request"] == 8 * 528 * 32_768 + 51_511_296 == 189_923_328
    assert summary["kv_transfer_seconds_per_request"] == pytest.approx(189_923_328 * 8 / 25e9, abs=1e-6)
    assert summary["kv_transfer_seconds_per_request_tcp_fallback"] == pytest.approx(189_923_328 * 8 / 10e9, abs=1e-6)
    # EKS 0.10 + m7i.xlarge 0.2016 + 2 x g6.8xlarge 2.0144 + NAT 0.045 + IPv4 0.005
    # + gp3 (2 x (200 x 0.08 + 875 x 0.04 + 13000 x 0.005) + 50 x 0.08) / 730
    # + CloudWatch (a dashboard 3.00 + 9 alarms on 10 metrics x 0.10 + 15 custom metrics x 0.30) / 730
    expected_hourly = 0.10 + 0.2016 + 2 * 2.0144 + 0.045 + 0.005 + (2 * 116.0 + 4.0) / 730 + (3.00 + 1.00 + 4.50) / 730
    assert summary["hourly_cost_usd"] == pytest.approx(expected_hourly, abs=1e-6)
    assert summary["hourly_cost_usd"] == pytest.approx(4.715332, abs=1e-6)
    assert summary["monthly_cost_usd"] == pytest.approx(expected_hourly * 730, abs=1e-3)


def test_cold_start_follows_root_volume_throughput():
    slow = _config(prefill={"root_volume": {"throughput_mibps": 125, "iops": 3000}},
                   decode={"root_volume": {"throughput_mibps": 125, "iops": 3000}})
    plan = make_plan(slow)
    # 18 GiB at gp3's 125 MiB/s baseline: about 147 s (the sample measured ~145 s).
    assert plan.cold_start.seconds == pytest.approx(19_306_216_416 / (125 * 2**20))
    assert 145 < plan.cold_start.seconds < 150


def test_slowest_leg_sets_the_cold_start():
    mixed = _config(prefill={"root_volume": {"throughput_mibps": 250, "iops": 3000}})
    plan = make_plan(mixed)
    assert plan.cold_start.by_role["decode"] < plan.cold_start.by_role["prefill"]
    assert plan.cold_start.seconds == plan.cold_start.by_role["prefill"]


def test_tcp_fallback_is_slower_outside_a_placement_group():
    plan = make_plan(_config(prefill={"placement_group": False}))
    assert plan.kv_transfer.tcp_fallback_gbps == 5.0
    assert plan.kv_transfer.tcp_fallback_seconds == pytest.approx(189_923_328 * 8 / 5e9)


def test_colocated_topology_moves_no_kv_cache():
    summary = make_plan(_config(topology="colocated")).summary()
    assert summary["kv_transfer_bytes_per_request"] == 0
    assert summary["kv_transfer_seconds_per_request"] == 0


def test_cost_per_million_output_tokens():
    plan = make_plan(unpinned(), tokens_per_second=500)
    expected = plan.cost.hourly_usd / (500 * 3600) * 1_000_000
    assert plan.summary()["cost_per_million_output_tokens_usd"] == pytest.approx(expected, abs=1e-6)
    with pytest.raises(PlanError, match="positive"):
        make_plan(unpinned(), tokens_per_second=0)


def test_more_nodes_cost_more():
    base = make_plan(unpinned()).cost.hourly_usd
    bigger = make_plan(_config(decode={"min_size": 2, "desired_size": 2, "max_size": 2})).cost.hourly_usd
    gp3_per_node = (200 * 0.08 + 875 * 0.04 + 13000 * 0.005) / 730
    assert bigger - base == pytest.approx(2.0144 + gp3_per_node)


# --- models that do not fit, and missing facts -----------------------------------------------

def _refusal(**overrides) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        _config(**overrides)
    return caught.value


def test_70b_model_on_one_l4_does_not_fit_and_says_what_to_change():
    model = ModelArchitecture(name="example/dense-70b", source="test", **DENSE_70B)
    decode = memory_budget("decode", instance_types.INSTANCE_TYPES["g6.8xlarge"], 1, model,
                           max_model_len=4096, gpu_memory_utilization=0.9, dtype="bfloat16")
    assert not decode.fits and decode.weights_do_not_fit
    assert "do not fit" in decode.problem and "short by" in decode.problem
    assert decode.max_concurrent_sequences == 0
    # 131.4 GiB of BF16 weights: 4 or 8 x L40S (44.7 GiB each) or 8 x A100/H100/H200 can hold them.
    assert decode.fixes == ("use a larger GPU instance type for decode: g6e.12xlarge with tensor_parallel_size 4, "
                            "g6e.24xlarge with tensor_parallel_size 4, g6e.48xlarge with tensor_parallel_size 8, "
                            "p4d.24xlarge with tensor_parallel_size 8, p4de.24xlarge with tensor_parallel_size 8, "
                            "p5.48xlarge with tensor_parallel_size 8, p5e.48xlarge with tensor_parallel_size 8, "
                            "p5en.48xlarge with tensor_parallel_size 8",)
    # The configuration (so synth and plan alike) refuses it, naming the instance type to change.
    error = _refusal(model={"source": "example/dense-70b", "served_name": "dense-70b", "architecture": DENSE_70B})
    assert error.does_not_fit
    assert {e.field for e in error.errors} == {"prefill.instance_type", "decode.instance_type"}
    assert decode.fixes[0] in str(error)


def test_model_too_big_for_every_known_instance_suggests_quantization():
    # 700B x 2 B = 1,304 GiB: more than 8 x H200 (8 x 141 GiB x 0.9), the largest node known.
    huge = ModelArchitecture(name="example/dense-700b", source="test",
                             **{**DENSE_70B, "parameter_count": 700_000_000_000})
    decode = memory_budget("decode", instance_types.INSTANCE_TYPES["g6.8xlarge"], 1, huge,
                           max_model_len=4096, gpu_memory_utilization=0.9, dtype="bfloat16")
    assert not decode.fits
    assert any("quantized" in fix for fix in decode.fixes)


def test_model_that_fits_only_on_bigger_gpus_names_them():
    # Qwen3.5-9B with a 64k context: weights fit on an L4, the KV of one sequence does not.
    error = _refusal(model={"max_model_len": 65536})
    assert error.does_not_fit
    assert {e.field for e in error.errors} == {"model.max_model_len"}
    message = str(error)
    assert "less than one request" in message
    assert "lower model.max_model_len to" in message
    assert "g6e.8xlarge" in message


def test_unknown_model_without_architecture_is_refused_like_synth_refuses_it():
    error = _refusal(model={"source": "someone/unknown-model", "served_name": "unknown"})
    assert not error.does_not_fit
    assert "model.architecture: model.source 'someone/unknown-model' is not in the package's" in str(error)


def test_config_architecture_overrides_the_table():
    supplied = {**DENSE_70B, "parameter_count": 1_000_000_000, "num_hidden_layers": 16,
                "full_attention_layers": 16, "num_key_value_heads": 2, "head_dim": 64}
    plan = make_plan(_config(model={"architecture": supplied}))
    assert plan.model.parameter_count == 1_000_000_000
    assert plan.summary()["kv_cache_bytes_per_token"] == 16 * 2 * 2 * 64 * 2


# --- P-series: the worked example of docs/plan.md ("The reference model on p5.48xlarge") ------

def _on(instance_type: str, region: str = "us-east-1", tp: int = 8, **overrides) -> Deployment:
    azs = {"us-east-1": ["us-east-1a", "us-east-1b"], "us-west-2": ["us-west-2a", "us-west-2b"]}[region]
    return _config(region=region, data_plane_az=azs[0], control_plane_azs=azs,
                   prefill={"instance_type": instance_type}, decode={"instance_type": instance_type},
                   model={"tensor_parallel_size": tp}, **overrides)


def test_reference_model_on_p5_within_the_hand_checked_bounds():
    # Every bound is the hand calculation of docs/plan.md, rounded outwards in its last digit.
    summary = make_plan(_on("p5.48xlarge")).summary()
    budget = next(m for m in summary["memory"] if m["role"] == "decode")
    assert budget["tensor_parallel_size"] == 8
    assert 2.0847 <= budget["weights_gib"] <= 2.0848          # 8,953,803,264 x 2 B / 8 / 2^30
    assert budget["usable_gib"] == pytest.approx(71.199)      # 79.11 GiB CUDA-visible x 0.9
    assert 67.7542 <= summary["kv_pool_gib"] <= 67.7544       # 71.199 - 2.0847 - 1.36
    assert budget["kv_cache_bytes_per_token"] == 8192         # 8 x 2 x 1 (replicated) x 256 x 2
    # TP 8: a GDN layer's state is 4 x 128 x 128 x 4 + 3 x (2 x 2 x 128 + 4 x 128) x 2 = 268,288 B
    # per GPU, one replicated KV head 1,024 B a token: blocks of 16 x cdiv(268,288, 16 x 1,024) = 272.
    assert summary["kv_block_tokens"] == 272
    assert budget["bytes_per_max_length_sequence"] == (16 + 3) * 272 * 1024 * 8 == 42_336_256
    assert summary["max_concurrent_sequences"] == 32_649 // 19 == 1718
    transfer = summary["kv_transfer"]
    assert summary["kv_transfer_bytes_per_request"] == 16 * 272 * 32_768 + 51_511_296 == 194_117_632
    assert (transfer["efa_gbps"], transfer["node_efa_gbps"], transfer["efa_devices_per_replica"]) == (3200, 3200, 32)
    assert 0.000485 <= summary["kv_transfer_seconds_per_request"] <= 0.000486   # x 8 / 3.2e12
    assert 0.1552 <= summary["kv_transfer_seconds_per_request_tcp_fallback"] <= 0.1553
    assert "GPUDirect RDMA" in transfer["assumption"]
    assert 110.766 <= summary["hourly_cost_usd"] <= 110.767
    node = {line["item"]: line for line in summary["cost_lines"]}["decode node p5.48xlarge"]
    assert (node["usd_per_hour"], node["basis"]) == (55.04, "price_list")


@pytest.mark.parametrize("instance_type, tp, devices, gbps", [
    ("p5.48xlarge", 1, 4, 400),      # a single GPU reaches the 4 EFA devices of its PCIe root
    ("p5.48xlarge", 2, 8, 800),
    ("p5en.48xlarge", 8, 16, 3200),  # 16 cards of 200 Gbps
    ("p4d.24xlarge", 8, 4, 400),
    ("p4d.24xlarge", 1, 1, 100),
    ("g6e.48xlarge", 8, 4, 400),
    ("g6e.48xlarge", 1, 1, 100),     # two L40S share one device
    ("g6e.12xlarge", 1, 1, 100),     # one device for four GPUs: each uses all of it
])
def test_kv_transfer_rate_is_the_efa_devices_a_replica_reaches(instance_type, tp, devices, gbps):
    plan = make_plan(_on(instance_type, tp=tp))
    assert (plan.kv_transfer.efa_devices_per_replica, plan.kv_transfer.efa_gbps) == (devices, gbps)
    assert plan.kv_transfer.node_efa_gbps == instance_types.INSTANCE_TYPES[instance_type].efa_gbps


def test_reference_kv_transfer_is_unchanged_on_one_efa_device():
    transfer = make_plan(unpinned()).kv_transfer
    assert (transfer.efa_gbps, transfer.node_efa_gbps, transfer.efa_devices_per_replica) == (25, 25, 1)
    assert "no GPUDirect RDMA" in transfer.assumption


def test_p_series_in_us_west_2_is_priced_as_an_estimate_and_plan_says_so():
    # p5.48xlarge is offered in us-west-2 (ec2_offerings.json); prices.yaml has its figure for us-east-1
    # only, so the figure is us-east-1's times us-west-2's ratio in the table (1: every us-west-2 figure
    # is us-east-1's, basis us_parity), labelled an estimate.
    plan = make_plan(_on("p5.48xlarge", region="us-west-2"))
    lines = {line.item: line for line in plan.cost.lines}
    assert lines["decode node p5.48xlarge"].usd_per_hour == pytest.approx(55.04)
    assert lines["decode node p5.48xlarge"].basis is PriceBasis.estimate
    assert plan.cost.unknown_reason is None and plan.cost.has_estimates
    assert {"prefill node p5.48xlarge", "decode node p5.48xlarge"} <= set(plan.cost.estimated_items)
    assert "p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5en.48xlarge: us-east-1 GPU x 1" in plan.cost.estimate_note
    summary = plan.summary()
    assert summary["price_includes_estimates"] is True
    assert {"item": "decode node p5.48xlarge", "basis": "estimate"}.items() <= next(
        line for line in summary["cost_lines"] if line["item"] == "decode node p5.48xlarge").items()
    p4d = make_plan(_on("p4d.24xlarge", region="us-west-2"))
    assert {line.item: line for line in p4d.cost.lines}["decode node p4d.24xlarge"].usd_per_hour == \
        pytest.approx(21.957642, abs=1e-5)


def test_an_offered_type_without_a_figure_to_scale_makes_the_cost_unknown_not_an_error():
    # The table with no us-east-1 figure for p5.48xlarge: nothing to scale, so no price and a reason.
    raw = yaml.safe_load((Path(pricing.__file__).parents[1] / "data" / "prices.yaml").read_text())
    del raw["regions"]["us-east-1"]["instances"]["p5.48xlarge"]
    plan = make_plan(_on("p5.48xlarge", region="us-west-2"), price_table=pricing.parse_price_table(raw))
    assert plan.cost.hourly_usd is None and "p5.48xlarge" in plan.cost.unknown_reason
    lines = {line.item: line for line in plan.cost.lines}
    assert lines["decode node p5.48xlarge"].usd_per_hour is None
    assert lines["EKS control plane"].usd_per_hour == 0.10   # the other lines keep their prices
    assert plan.kv_transfer.efa_gbps == 3200


def test_every_region_of_the_offerings_prices_every_type_it_offers_with_a_basis():
    table = load_price_table()
    for region, offered in instance_types.offerings()["instance_types"].items():
        for name in offered:
            price = table.region(region).instance(name)
            assert price.usd_per_hour > 0 and isinstance(price.basis, PriceBasis), (region, name)
        prices = table.regions.get(region)
        if offered:
            assert prices.nat_gateway.usd_per_hour > 0 and prices.gp3.usd_per_gb_month > 0, region
            assert set(prices.cache_nodes) == set(table.region("us-east-1").cache_nodes), region


def test_an_estimate_is_the_us_east_1_figure_times_a_ratio_the_table_states():
    table = load_price_table()
    base = table.region("us-east-1")
    # A region the table has figures for: its own ratio, by family (Tokyo's g6e 1.4503, multiplier_note).
    tokyo = table.region("ap-northeast-1")
    assert tokyo.instance("g6e.48xlarge") == pricing.Price(round(30.13118 * 1.4503, 5), PriceBasis.estimate)
    assert tokyo.instance("g6e.8xlarge").basis is PriceBasis.estimate  # the table's own, unchanged
    assert tokyo.instance("g6e.8xlarge").usd_per_hour == 6.5678
    # A region it has none for: the highest ratio of any (sa-east-1's GPU 1.60), figures never below it.
    frankfurt = table.region("eu-central-1")
    assert frankfurt.instance("g6.xlarge") == pricing.Price(round(0.8048 * 1.6, 5), PriceBasis.estimate)
    assert frankfurt.nat_gateway == pricing.Price(0.093, PriceBasis.estimate)
    assert frankfurt.eks_cluster_hour == base.eks_cluster_hour and "highest ratio" in frankfurt.multiplier_note
    with pytest.raises(PriceError, match="not offered in eu-central-1"):
        frankfurt.instance("p5.48xlarge")
    # A type with no us-east-1 figure: its stand-in's (pricing.STAND_INS).
    assert table.region("us-west-2").instance("p5e.48xlarge") == pricing.Price(63.296, PriceBasis.estimate)
    # What the table gives is kept as given.
    assert table.region("us-west-2").instance("g6.8xlarge").basis is PriceBasis.us_parity


# --- the price table ------------------------------------------------------------------------

@pytest.mark.parametrize("region", REQUIRED_REGIONS)
def test_price_table_covers_every_known_instance_type(region):
    prices = load_price_table().region(region)
    for name in instance_types.known_names():
        if name in prices.unavailable:
            with pytest.raises(PriceError, match="not offered"):
                prices.instance(name)
        elif name in prices.instances:
            assert prices.instance(name).usd_per_hour > 0
        else:
            assert prices.instance(name).usd_per_hour > 0  # offered, so priced (an estimate at worst)
    assert prices.eks_cluster_hour == 0.10


def test_price_table_is_dated_and_sourced():
    table = load_price_table()
    assert table.as_of == "2026-11-30"
    assert table.hours_per_month == 730
    assert {"eks", "nat_gateway", "ebs_gp3", "instances_us_east_1"} <= set(table.sources)


def test_a_region_without_prices_gets_every_other_figure_and_an_unknown_price():
    # ap-east-2: a region with zones in ec2_offerings.json and no offerings record, so no estimate either.
    unpriced = make_plan(_config(region="ap-east-2", control_plane_azs=["ap-east-2a", "ap-east-2b"],
                                 data_plane_az="ap-east-2a"), tokens_per_second=500)
    priced = make_plan(_config(), tokens_per_second=500)
    assert unpriced.cost.unknown_reason.startswith("the price table (as of 2026-11-30) has no prices for region "
                                                   "'ap-east-2'; covered regions: af-south-1")
    assert unpriced.cost.hourly_usd is None and unpriced.cost.monthly_usd is None
    assert unpriced.cost.usd_per_million_output_tokens(500) is None
    assert unpriced.cost_range == {"min": None, "max": None}
    # The same items and quantities, each with no price (never 0).
    assert [(line.item, line.quantity) for line in unpriced.cost.lines] == \
        [(line.item, line.quantity) for line in priced.cost.lines]
    assert all(line.usd_per_hour is None and line.basis is None for line in unpriced.cost.lines)
    summary, reference = unpriced.summary(), priced.summary()
    for key in ("hourly_cost_usd", "monthly_cost_usd", "hourly_cost_usd_min", "hourly_cost_usd_max",
                "monthly_cost_usd_min", "monthly_cost_usd_max", "cost_per_million_output_tokens_usd",
                "price_includes_estimates"):
        assert summary[key] is None, key
    assert summary["price_unknown"] == unpriced.cost.unknown_reason and reference["price_unknown"] is None
    # Every figure that does not depend on the region is the priced region's.
    for key in ("fits", "kv_cache_bytes_per_token", "linear_state_bytes_per_sequence", "weights_gib", "kv_pool_gib",
                "max_concurrent_sequences", "cold_start_seconds", "kv_transfer_bytes_per_request",
                "kv_transfer_seconds_per_request", "kv_transfer_seconds_per_request_tcp_fallback", "memory",
                "kv_transfer", "cold_start", "nodes", "max_model_len", "hours_per_month"):
        assert summary[key] == reference[key], key


def test_instance_type_not_offered_in_region_is_refused_before_pricing_and_the_prices_agree():
    # The deployment itself is refused (as make synth refuses it), by the one offerings table.
    with pytest.raises(ConfigError, match=r"prefill.instance_type: not offered in eu-west-1 .*\(got 'g6.8xlarge'\); "
                                          r"accepted: a type eu-west-1 offers: g5.12xlarge, g5.8xlarge"):
        _config(region="eu-west-1", control_plane_azs=["eu-west-1a", "eu-west-1b"], data_plane_az="eu-west-1a")
    # The price table reads the same table: no second list of what a region lacks.
    with pytest.raises(PriceError, match="g6.8xlarge is not offered in eu-west-1"):
        load_price_table().region("eu-west-1").instance("g6.8xlarge")


def test_estimated_prices_are_flagged():
    plan = make_plan(_config(region="ap-northeast-1", control_plane_azs=["ap-northeast-1a", "ap-northeast-1c"],
                             data_plane_az="ap-northeast-1a"))
    assert plan.cost.has_estimates
    assert plan.summary()["price_includes_estimates"] is True
    # The reference deployment's one estimate is CloudWatch's monthly charges (recalled, not re-fetched).
    reference = make_plan(unpinned()).cost
    assert [line.item for line in reference.lines if line.basis is PriceBasis.estimate] == [
        "CloudWatch: 1 dashboard, 9 alarms, 15 custom metrics"]
    assert not make_plan(_config(observability={"enabled": False})).cost.has_estimates


def test_plan_prices_the_minimum_and_the_maximum_of_each_range():
    fixed = make_plan(unpinned()).summary()
    assert fixed["hourly_cost_usd_min"] == fixed["hourly_cost_usd"] == fixed["hourly_cost_usd_max"]
    ranged = make_plan(unpinned_config({"prefill": {"min_size": 1, "desired_size": 1, "max_size": 3},
                                     "decode": {"min_size": 1, "desired_size": 2, "max_size": 4}})).summary()
    # A g6.8xlarge node is 2.0144/h and its root volume 116.00/730 a month, per node added.
    per_node = 2.0144 + 116.0 / 730
    assert ranged["hourly_cost_usd_min"] == pytest.approx(fixed["hourly_cost_usd"], abs=1e-6)  # 1 + 1 nodes
    assert ranged["hourly_cost_usd"] == pytest.approx(fixed["hourly_cost_usd"] + per_node, abs=1e-6)  # 1 + 2
    assert ranged["hourly_cost_usd_max"] == pytest.approx(fixed["hourly_cost_usd"] + 5 * per_node, abs=1e-6)  # 3 + 4
    assert ranged["monthly_cost_usd_max"] == pytest.approx(ranged["hourly_cost_usd_max"] * 730, abs=1e-3)


def test_the_planners_ratio_for_the_worked_example_in_docs_scaling():
    """docs/scaling.md works this by hand: Qwen3.5-9B on g6.8xlarge (one L4: 121 dense TFLOPS,
    300 GB/s), 2 requests/s of 2048 prompt and 256 answer tokens."""
    from ray_llm_eks.planning import DECODE_MBU, PREFILL_MFU, Workload, capacity_plan

    spec = unpinned().specs().serving
    plan = capacity_plan(spec, Workload(isl=2048, osl=256, rate=2.0))
    n = 9_653_108_208
    flops = 2 * n * 2048 + 2 * 8 * 2048 ** 2 * (16 * 256)
    assert plan.prefill.per_replica["flops_per_request"] == flops == 39_814_009_126_912
    prefill_seconds = flops / (121e12 * PREFILL_MFU)
    assert plan.prefill.per_replica["seconds_per_request"] == pytest.approx(0.658083, abs=1e-6)
    assert plan.prefill.nodes_needed == pytest.approx(2 * prefill_seconds, abs=1e-4)  # 1.3162
    # Decode: the KV pool's 111 blocks hold 13 requests of 2304 tokens (5 attention blocks of 528 + 3
    # GDN blocks each); a step reads 17.91 GB of weights (the language model) and
    # 13 x (2176 x 32 KiB + 2 x 49.1 MiB).
    text = 8_953_803_264
    assert plan.decode.per_replica["batch"] == 13 == 111 // (5 + 3)
    step = (2 * text + 13 * (2176 * 32_768 + 2 * 51_511_296)) / (300e9 * DECODE_MBU)
    assert plan.decode.per_replica["step_ms"] == pytest.approx(step * 1000, abs=1e-3) == pytest.approx(112.077, abs=1e-3)
    assert plan.decode.nodes_needed == pytest.approx(2 * 256 / (13 / step), abs=1e-4)  # 4.4141
    assert plan.recommended_prefill_decode_ratio == pytest.approx(1.3162 / 4.4141, abs=1e-4) == 0.2982
    assert (plan.prefill.nodes_recommended, plan.decode.nodes_recommended) == (2, 5)


def test_plan_refuses_a_workload_the_deployment_cannot_take():
    from ray_llm_eks.planning import PlanError, Workload, capacity_plan

    spec = unpinned().specs().serving
    with pytest.raises(PlanError, match=r"--isl 4000 \+ --osl 200 exceeds model.max_model_len 4096"):
        capacity_plan(spec, Workload(isl=4000, osl=200, rate=1.0))
    with pytest.raises(PlanError, match=r"--rate: not a request rate"):
        Workload(isl=100, osl=100, rate=0)

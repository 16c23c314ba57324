"""Facts about model families that change how they must be served.

Hybrid (Gated-DeltaNet linear attention + full attention) models keep a per-sequence
SSM/conv state beside the paged KV cache. vLLM's NIXL P/D path asserts
``VLLM_SSM_CONV_STATE_LAYOUT=DS`` for them and needs the same tensor-parallel size and
block size on both legs (vLLM PR #41869). This is the one place that list lives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Collector, problem

# Hugging Face organisation/name prefixes, matched case-insensitively against model_source.
HYBRID_GATED_DELTANET_FAMILIES: tuple[str, ...] = (
    "Qwen/Qwen3.5-",
    "Qwen/Qwen3-Next-",
)


def is_hybrid_gated_deltanet(model_source: str) -> bool:
    source = model_source.lower()
    return any(source.startswith(prefix.lower()) for prefix in HYBRID_GATED_DELTANET_FAMILIES)


# Hugging Face organisations whose model repositories are gated: the Hub serves their files only
# to an account that accepted the repository's terms, with that account's token (anonymous
# downloads get 401). A documented rule, matched case-insensitively against model_source:
# - meta-llama/: every Llama repository asks "You need to agree to share your contact information
#   to access this model" above its license (huggingface.co/meta-llama/Llama-3.1-8B-Instruct,
#   huggingface.co/meta-llama/Meta-Llama-3.1-8B);
# - mistralai/: their model cards carry ``extra_gated_description`` front matter, which is what
#   gates a repository on the Hub (huggingface.co/mistralai/Mistral-7B-Instruct-v0.3 README.md).
# A repository outside these organisations may be gated too: the rule finds these, and a token
# is always accepted.
GATED_HUB_ORGANISATIONS: tuple[str, ...] = ("meta-llama/", "mistralai/")


def is_gated(model_source: str) -> bool:
    """Whether the Hub gates this repository, by the rule above (a local path never is)."""
    source = model_source.lower() if isinstance(model_source, str) else ""
    return any(source.startswith(organisation) for organisation in GATED_HUB_ORGANISATIONS)


# ---------------------------------------------------------------------------------------------
# Architecture facts that size GPU memory, KV cache and KV transfer (used by `ray-llm-eks plan`).
# ---------------------------------------------------------------------------------------------



@dataclass(frozen=True, kw_only=True)
class ModelArchitecture:
    """What a model's config.json says about its memory, in the units the planner needs.

    Full-attention layers keep a KV cache that grows with every token. Linear-attention
    (Gated-DeltaNet) layers instead keep a fixed per-sequence state: a recurrent matrix per
    value head plus a short causal-convolution window. A dense transformer has
    ``linear_attention_layers == 0``.
    """

    __pydantic_config__ = {"extra": "forbid"}

    name: str = ""
    """Hugging Face repository id; empty: the ``model.source`` it describes."""
    source: str = "model.architecture in the configuration"
    """Where every figure below was read, so it can be re-checked."""
    parameter_count: int
    """Total parameters in the checkpoint vLLM loads, with a vision-language model's vision tower (weights bytes = parameters x dtype bytes)."""
    num_hidden_layers: int
    """Decoder layers (config.json ``num_hidden_layers``)."""
    full_attention_layers: int
    """Layers with full attention: only these hold a per-token KV cache."""
    num_attention_heads: int
    """Query heads of a full-attention layer."""
    num_key_value_heads: int
    """KV heads of a full-attention layer (GQA)."""
    head_dim: int
    """Dimension of one attention head."""
    linear_attention_layers: int = 0
    """Linear-attention (Gated-DeltaNet) layers; 0 for dense models."""
    linear_num_key_heads: int = 0
    """Key heads of a linear-attention layer."""
    linear_num_value_heads: int = 0
    """Value heads of a linear-attention layer."""
    linear_key_head_dim: int = 0
    """Key head dimension of a linear-attention layer."""
    linear_value_head_dim: int = 0
    """Value head dimension of a linear-attention layer."""
    linear_conv_kernel_dim: int = 0
    """Short-convolution kernel size of a linear-attention layer."""
    linear_state_dtype_bytes: int = 4
    """Bytes per element of the per-sequence linear-attention state (config.json ``mamba_ssm_dtype``; float32 = 4)."""

    def __post_init__(self) -> None:
        found = Collector()
        for name in ("parameter_count", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                found.add(problem(name, value, "not a positive count", "a whole number >= 1"))
        for name in ("full_attention_layers", "linear_attention_layers", "linear_num_key_heads",
                     "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                found.add(problem(name, value, "not a count", "a whole number >= 0"))
        state = self.linear_state_dtype_bytes
        if not isinstance(state, int) or isinstance(state, bool) or not 1 <= state <= 8:
            found.add(problem("linear_state_dtype_bytes", state, "not a dtype size", "1 to 8 bytes"))
        if not found.errors and self.full_attention_layers + self.linear_attention_layers != self.num_hidden_layers:
            found.add(problem("full_attention_layers", self.full_attention_layers,
                              f"full_attention_layers ({self.full_attention_layers}) + linear_attention_layers "
                              f"({self.linear_attention_layers}) must equal num_hidden_layers ({self.num_hidden_layers})",
                              f"{self.num_hidden_layers - self.linear_attention_layers}"))
        found.raise_if_any(self)

    @property
    def is_hybrid(self) -> bool:
        return self.linear_attention_layers > 0

    def kv_cache_bytes_per_token(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """K and V of every full-attention layer, for one token, on one GPU of a TP group.

        With more GPUs than KV heads, vLLM replicates heads, so each GPU keeps at least one.
        """
        kv_heads_per_gpu = max(1, self.num_key_value_heads // tensor_parallel_size)
        return self.full_attention_layers * 2 * kv_heads_per_gpu * self.head_dim * dtype_bytes

    def linear_state_bytes_per_sequence(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """The fixed state one sequence holds in all linear-attention layers, on one GPU.

        Recurrent state: value heads x key dim x value dim, in ``linear_state_dtype_bytes``.
        Convolution state: the last (kernel - 1) inputs of the q, k and v projections, in the
        model dtype. Heads are split across a tensor-parallel group.
        """
        if not self.is_hybrid:
            return 0
        value_heads = max(1, self.linear_num_value_heads // tensor_parallel_size)
        key_heads = max(1, self.linear_num_key_heads // tensor_parallel_size)
        recurrent = value_heads * self.linear_key_head_dim * self.linear_value_head_dim * self.linear_state_dtype_bytes
        conv_channels = 2 * key_heads * self.linear_key_head_dim + value_heads * self.linear_value_head_dim
        conv = (self.linear_conv_kernel_dim - 1) * conv_channels * dtype_bytes
        return self.linear_attention_layers * (recurrent + conv)

    def weight_bytes(self, dtype_bytes: int) -> int:
        return self.parameter_count * dtype_bytes


KNOWN_ARCHITECTURES: dict[str, ModelArchitecture] = {
    arch.name.lower(): arch
    for arch in (
        ModelArchitecture(
            name="Qwen/Qwen3.5-9B",
            # text_config of https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json
            # (a vision-language class: the text facts nest under text_config): 32 layers,
            # layer_types = 3 x linear_attention then 1 x full_attention, repeated 8 times
            # (full_attention_interval 4); 16 attention heads, 4 KV heads, head_dim 256;
            # Gated-DeltaNet: 16 key heads, 32 value heads, key/value head dim 128, conv kernel 4;
            # mamba_ssm_dtype float32. Parameter count = model.safetensors.index.json
            # metadata.total_size 19,306,216,416 bytes / 2 (all tensors BF16), revision
            # c202236235762e1c871ad0ccb60c8ee5ba337b9a; it includes the vision tower and the
            # MTP head. Read from public copies of both files, 2026-11-30.
            source="huggingface.co/Qwen/Qwen3.5-9B config.json (text_config) and "
            "model.safetensors.index.json (total_size 19306216416 B, BF16), read 2026-11-30",
            parameter_count=19_306_216_416 // 2,
            num_hidden_layers=32,
            full_attention_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            head_dim=256,
            linear_attention_layers=24,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_conv_kernel_dim=4,
            linear_state_dtype_bytes=4,
        ),
        ModelArchitecture(
            name="meta-llama/Llama-3.1-8B-Instruct",
            # config.json of meta-llama/Llama-3.1-8B-Instruct: 32 layers, hidden_size 4096,
            # 32 attention heads (head_dim 4096 / 32 = 128), 8 KV heads; a dense transformer.
            # 8,030,261,248 parameters (model.safetensors.index.json total_size 16,060,522,496 B in
            # BF16; the same count keras-hub gives its llama3_8b_en preset).
            source="huggingface.co/meta-llama/Llama-3.1-8B-Instruct config.json and "
            "model.safetensors.index.json (total_size 16060522496 B, BF16)",
            parameter_count=8_030_261_248,
            num_hidden_layers=32,
            full_attention_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
        ),
    )
}


def known_architecture(model_source: str) -> ModelArchitecture | None:
    """The table's facts for a Hugging Face id (case-insensitive), or None when not listed."""
    return KNOWN_ARCHITECTURES.get(model_source.lower())

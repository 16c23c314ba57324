"""Does the model fit on one GPU of a worker? The one memory check ``plan`` prints and synthesis enforces.

vLLM 0.26.0 sizes its KV pool as ``CUDA-visible total x gpu_memory_utilization - weights - peak
activations - non-torch memory`` (``v1/worker/gpu_worker.py:448-545``, ``determine_available_memory``:
a profiling pass at startup), cuts it into whole blocks (``v1/core/kv_cache_utils.py:975-1007``) and
refuses to start when the blocks cannot hold one request of ``max_model_len``. This module estimates
the same figures before anything is deployed, in the same whole blocks; ``docs/plan.md`` works the
reference deployment by hand and sets the estimate beside what vLLM measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import instance_types
from .instance_types import InstanceType
from .models import ModelArchitecture

from .units import GIB

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "auto": 2}
"""Bytes per weight / KV element. ``auto`` means the checkpoint's own dtype; every model in the
table (and any model supplied in the config) is assumed to ship 16-bit weights, except the
parameters its architecture declares quantized (``quantized_parameter_count``, e.g. gpt-oss's
MXFP4 experts), which count at their own width."""

PROFILE_RESERVE_GIB = 1.36
"""What vLLM's profile takes beyond the weights' parameters and the KV pool, for the language model:
the activation peak of its dummy forward pass (``max_num_batched_tokens``, vLLM's default 2,048 here)
and sampler run (``max_num_seqs`` 256), non-torch memory (NCCL, cuBLAS and Triton workspaces), and what
vLLM's "Model loading took" counts beyond the parameters. Measured, not modelled: vLLM 0.26.0 profiled
Qwen3.5-9B text-only (``language_model_only``, ``enforce_eager``, dummy weights) in an L4's budget on an
H100 and left a 2.21 GiB pool from 0.9 x 23,034 MiB = 20.25 GiB; its language model's parameters
are 16.68 GiB, so 20.25 - 16.68 - 2.21 = 1.36 GiB. For any other model, TP size or batch budget it is
an estimate (a larger vocabulary, hidden size or ``max_num_batched_tokens`` raises the activation
peak); vLLM's startup line "Available KV cache memory" is the figure to compare. A multimodal model
serving images adds its vision tower's own peak (``ModelArchitecture.vision_profile_peak_gib``)."""


@dataclass(frozen=True)
class KvLayout:
    """How vLLM 0.26.0 lays one GPU's KV pool out in blocks for a model.

    Layers are grouped by kind (full attention, sliding window, linear attention) into groups of
    ``group_size`` layers: the fewest layers of any kind, or the most when no kind has 1.5 times the
    fewest (``v1/core/kv_cache_utils.py:1195-1235``, ``_get_kv_cache_groups_uniform_page_size``); a
    model of one kind is one group of all its layers. One block id spans a page in every layer of a
    group, so a block costs ``page_bytes x group_size`` and the pool holds
    ``pool // (page_bytes x group_size)`` blocks (``get_num_blocks``, ``:996-1007``). A request of
    ``n`` tokens takes ``cdiv(n, block_tokens)`` blocks in each full-attention group, at most its
    window's worth in each sliding-window group, and one block in each linear-attention group (its
    state, padded to the attention page: ``v1/kv_cache_interface.py:709-718``, ``MambaSpec`` with
    ``mamba_cache_mode`` ``none``, vLLM's default without prefix caching)."""

    block_tokens: int
    page_bytes: int
    group_size: int
    full_groups: int
    sliding_groups: int
    linear_groups: int
    sliding_window: int

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.group_size

    def blocks_per_request(self, tokens: int) -> int:
        full = self.full_groups * -(-tokens // self.block_tokens)
        sliding = self.sliding_groups * -(-min(tokens, self.sliding_window) // self.block_tokens)
        return full + sliding + self.linear_groups

    def request_bytes(self, tokens: int) -> int:
        return self.blocks_per_request(tokens) * self.block_bytes

    def blocks(self, pool_bytes: float) -> int:
        return max(0, int(pool_bytes // self.block_bytes))

    def longest_request(self, blocks: int) -> int:
        """The most tokens one request can hold in ``blocks`` blocks (full attention grows; the
        rest is fixed once past the window)."""
        fixed = self.linear_groups + self.sliding_groups * -(-self.sliding_window // self.block_tokens)
        if not self.full_groups:
            return 0 if blocks < fixed else 1 << 62
        return max(0, (blocks - fixed) // self.full_groups) * self.block_tokens


def kv_layout(model: ModelArchitecture, dtype_bytes: int, tensor_parallel_size: int = 1) -> KvLayout:
    """The block layout vLLM 0.26.0 gives ``model`` on one GPU of a TP group (:class:`KvLayout`)."""
    block = model.kv_block_tokens(dtype_bytes, tensor_parallel_size)
    page = block * model.kv_bytes_per_layer_token(dtype_bytes, tensor_parallel_size)
    kinds = {"full": model.full_attention_layers, "sliding": model.sliding_window_layers,
             "linear": model.linear_attention_layers}
    counts = [count for count in kinds.values() if count]
    group = min(counts)
    if max(counts) < group * 1.5:
        group = max(counts)
    groups = {kind: -(-count // group) for kind, count in kinds.items()}
    return KvLayout(block_tokens=block, page_bytes=page, group_size=group, full_groups=groups["full"],
                    sliding_groups=groups["sliding"], linear_groups=groups["linear"],
                    sliding_window=model.sliding_window)


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU of one worker of a leg (prefill or decode)."""

    role: str
    instance_type: str
    tensor_parallel_size: int
    gpu_memory_gib: float
    """The GPU's CUDA-visible memory (``InstanceType.gpu_cuda_visible_gib``), what vLLM multiplies."""
    gpu_memory_utilization: float
    usable_gib: float
    weights_gib: float
    """What vLLM loads on this GPU: no MTP head, and the vision tower only when images are served."""
    reserve_gib: float
    """:data:`PROFILE_RESERVE_GIB` plus the vision tower's profiling peak when images are served."""
    kv_pool_gib: float
    kv_cache_bytes_per_token: int
    linear_state_bytes_per_sequence: int
    bytes_per_max_length_sequence: int
    """The whole blocks one ``max_model_len`` request takes (:meth:`KvLayout.request_bytes`)."""
    max_concurrent_sequences: int
    """Whole ``max_model_len`` requests the pool's blocks hold."""
    problem: str | None = None
    fixes: tuple[str, ...] = ()
    weights_do_not_fit: bool = False
    sliding_window_bytes_per_sequence: int = 0
    """What the sliding-window layers hold for one max-length sequence (their window, not the length)."""
    kv_block_tokens: int = 0
    kv_block_bytes: int = 0
    """One block id's pages across a layer group (:attr:`KvLayout.block_bytes`)."""
    kv_blocks: int = 0
    max_concurrency: float = 0.0
    """vLLM's own "Maximum concurrency for N tokens per request" figure: blocks / blocks per request."""
    vision_weights_gib: float = 0.0
    vision_profile_peak_gib: float = 0.0
    serve_images: bool = False

    @property
    def fits(self) -> bool:
        return self.problem is None


def memory_budget(role: str, instance: InstanceType, tensor_parallel_size: int, model: ModelArchitecture, *,
                  max_model_len: int, gpu_memory_utilization: float, dtype: str,
                  serve_images: bool = False) -> MemoryBudget:
    dtype_bytes = DTYPE_BYTES[dtype]
    total = instance.gpu_memory_for_vllm_gib
    usable = total * gpu_memory_utilization
    images = serve_images and model.is_multimodal
    # Tensor parallelism splits the weights across the GPUs of one worker. A MoE's experts are
    # all resident (vLLM shards every expert across the TP group, or places whole experts with
    # expert parallelism: either way 1/TP of the total per GPU); only compute follows the
    # active parameters.
    weights = model.weight_bytes(dtype_bytes, vision=images) / tensor_parallel_size / GIB
    vision_weights = model.vision_parameter_count * dtype_bytes / tensor_parallel_size / GIB if images else 0.0
    vision_peak = model.vision_profile_peak_gib if images else 0.0
    reserve = PROFILE_RESERVE_GIB + vision_peak
    kv_per_token = model.kv_cache_bytes_per_token(dtype_bytes, tensor_parallel_size)
    state = model.linear_state_bytes_per_sequence(dtype_bytes, tensor_parallel_size)
    window = model.sliding_window_bytes_per_sequence(dtype_bytes, max_model_len, tensor_parallel_size)
    layout = kv_layout(model, dtype_bytes, tensor_parallel_size)
    per_sequence = layout.request_bytes(max_model_len)
    pool = usable - weights - reserve
    blocks = layout.blocks(pool * GIB) if pool > 0 else 0
    per_request_blocks = layout.blocks_per_request(max_model_len)
    sequences = blocks // per_request_blocks

    problem = None
    fixes: list[str] = []
    share = (f"vLLM may use {usable:.2f} GiB ({total:.2f} GiB CUDA-visible x gpu_memory_utilization "
             f"{gpu_memory_utilization}), less a {reserve:.2f} GiB profile reserve (activations and non-torch "
             f"memory{f', {vision_peak:.2f} GiB of it the vision tower profiling one maximal image' if images else ''})")
    if pool <= 0:
        problem = (
            f"{role}: the weights ({weights:.2f} GiB per GPU{' with the vision tower' if images else ''}) do not fit "
            f"on one {instance.gpu_model} of {instance.name}: {share}, leaving {usable - reserve:.2f} GiB: short by "
            f"{-pool:.2f} GiB"
        )
    elif sequences < 1:
        longest = layout.longest_request(blocks)
        problem = (
            f"{role}: after the weights ({weights:.2f} GiB per GPU), the KV pool is {pool:.2f} GiB per GPU "
            f"({blocks} blocks of {layout.block_tokens} tokens), less than one request of max_model_len "
            f"{max_model_len} needs ({per_request_blocks} blocks, {per_sequence / GIB:.2f} GiB): {share}. "
            f"vLLM refuses to start. The longest request that fits is about {longest} tokens"
        )
        if longest > 0:
            fixes.append(f"lower model.max_model_len to {longest} or less")
    if problem:
        if images:
            fixes.append("set model.serve_images false (vLLM's language_model_only: no vision tower, no image "
                         f"profile; frees {vision_weights + vision_peak:.2f} GiB per GPU)")
        fixes.extend(bigger_instances(role, model, gpu_memory_utilization=gpu_memory_utilization,
                                      dtype_bytes=dtype_bytes, max_model_len=max_model_len, serve_images=images))
        needed_utilization = (weights + reserve + per_sequence / GIB) / total
        if needed_utilization <= 0.98:
            fixes.append(f"raise model.gpu_memory_utilization to at least {math.ceil(needed_utilization * 100) / 100:.2f}")
    return MemoryBudget(
        role=role, instance_type=instance.name, tensor_parallel_size=tensor_parallel_size, gpu_memory_gib=total,
        gpu_memory_utilization=gpu_memory_utilization, usable_gib=usable, weights_gib=weights,
        reserve_gib=reserve, kv_pool_gib=max(pool, 0.0),
        kv_cache_bytes_per_token=kv_per_token, linear_state_bytes_per_sequence=state,
        bytes_per_max_length_sequence=per_sequence, max_concurrent_sequences=sequences,
        problem=problem, fixes=tuple(fixes), weights_do_not_fit=pool <= 0, sliding_window_bytes_per_sequence=window,
        kv_block_tokens=layout.block_tokens, kv_block_bytes=layout.block_bytes, kv_blocks=blocks,
        max_concurrency=round(blocks / per_request_blocks, 4), vision_weights_gib=vision_weights,
        vision_profile_peak_gib=vision_peak, serve_images=images,
    )


def bigger_instances(role: str, model: ModelArchitecture, *, gpu_memory_utilization: float, dtype_bytes: int,
                     max_model_len: int, serve_images: bool = False) -> list[str]:
    """EFA GPU instance types on which one max-length request would fit, using all their GPUs."""
    fits = []
    reserve = PROFILE_RESERVE_GIB + (model.vision_profile_peak_gib if serve_images else 0.0)
    for name in instance_types.efa_gpu_names():
        instance = instance_types.INSTANCE_TYPES[name]
        tp = instance.gpus
        usable = instance.gpu_memory_for_vllm_gib * gpu_memory_utilization
        pool = usable - model.weight_bytes(dtype_bytes, vision=serve_images) / tp / GIB - reserve
        layout = kv_layout(model, dtype_bytes, tp)
        if pool > 0 and layout.blocks(pool * GIB) >= layout.blocks_per_request(max_model_len):
            fits.append(f"{name} with tensor_parallel_size {tp}" if tp > 1 else name)
    if fits:
        return [f"use a larger GPU instance type for {role}: {', '.join(fits)}"]
    return [
        "no instance type the library knows can hold this model in 16-bit; use a quantized checkpoint "
        "or a smaller model"
    ]

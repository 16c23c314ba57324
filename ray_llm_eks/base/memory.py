"""Does the model fit on one GPU of a worker? The one memory check ``plan`` prints and synthesis enforces.

vLLM sizes its KV pool as ``total x gpu_memory_utilization - weights - peak activations -
non-torch memory`` (measured by a profiling pass at startup) and refuses to start when the pool
cannot hold one sequence of ``max_model_len``. This module estimates the same figures before
anything is deployed; ``docs/plan.md`` works the reference deployment by hand.
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

ACTIVATION_AND_RUNTIME_RESERVE_GIB = 1.5
"""Peak activations plus non-torch memory (CUDA context, cuBLAS/NCCL workspaces). vLLM measures
this at startup; we cannot, so this is a deliberately cautious round figure for a ~9B model with
enforce_eager (no CUDA graphs) and vLLM's default batched-token budget. vLLM's startup line
"Available KV cache memory" is the ground truth to compare against."""


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU of one worker of a leg (prefill or decode)."""

    role: str
    instance_type: str
    tensor_parallel_size: int
    gpu_memory_gib: float
    gpu_memory_utilization: float
    usable_gib: float
    weights_gib: float
    reserve_gib: float
    kv_pool_gib: float
    kv_cache_bytes_per_token: int
    linear_state_bytes_per_sequence: int
    bytes_per_max_length_sequence: int
    max_concurrent_sequences: int
    problem: str | None = None
    fixes: tuple[str, ...] = ()
    weights_do_not_fit: bool = False
    sliding_window_bytes_per_sequence: int = 0
    """What the sliding-window layers hold for one max-length sequence (their window, not the length)."""

    @property
    def fits(self) -> bool:
        return self.problem is None


def memory_budget(role: str, instance: InstanceType, tensor_parallel_size: int, model: ModelArchitecture, *,
                  max_model_len: int, gpu_memory_utilization: float, dtype: str) -> MemoryBudget:
    dtype_bytes = DTYPE_BYTES[dtype]
    total = instance.gpu_memory_gib
    usable = total * gpu_memory_utilization
    # Tensor parallelism splits the weights across the GPUs of one worker. A MoE's experts are
    # all resident (vLLM shards every expert across the TP group, or places whole experts with
    # expert parallelism: either way 1/TP of the total per GPU); only compute follows the
    # active parameters.
    weights = model.weight_bytes(dtype_bytes) / tensor_parallel_size / GIB
    kv_per_token = model.kv_cache_bytes_per_token(dtype_bytes, tensor_parallel_size)
    state = model.linear_state_bytes_per_sequence(dtype_bytes, tensor_parallel_size)
    window = model.sliding_window_bytes_per_sequence(dtype_bytes, max_model_len, tensor_parallel_size)
    per_sequence = model.sequence_bytes(dtype_bytes, max_model_len, tensor_parallel_size)
    pool = usable - weights - ACTIVATION_AND_RUNTIME_RESERVE_GIB
    sequences = max(0, math.floor(pool * GIB / per_sequence)) if pool > 0 else 0

    problem = None
    fixes: list[str] = []
    if pool <= 0:
        problem = (
            f"{role}: the weights ({weights:.2f} GiB per GPU) do not fit on one {instance.gpu_model} of "
            f"{instance.name}: vLLM may use {usable:.2f} GiB ({total:.2f} GiB x gpu_memory_utilization "
            f"{gpu_memory_utilization}), minus a {ACTIVATION_AND_RUNTIME_RESERVE_GIB} GiB activation/runtime "
            f"reserve, leaving {usable - ACTIVATION_AND_RUNTIME_RESERVE_GIB:.2f} GiB: short by {-pool:.2f} GiB"
        )
    elif sequences < 1:
        longest = math.floor((pool * GIB - state - window) / kv_per_token) if pool * GIB > state + window else 0
        problem = (
            f"{role}: after the weights, the KV pool is {pool:.2f} GiB per GPU, less than one sequence of "
            f"max_model_len {max_model_len} needs ({per_sequence / GIB:.2f} GiB); "
            f"vLLM refuses to start. The longest sequence that fits is about {longest} tokens"
        )
        if longest > 0:
            fixes.append(f"lower model.max_model_len to {longest} or less")
    if problem:
        fixes.extend(bigger_instances(role, model, gpu_memory_utilization=gpu_memory_utilization,
                                      dtype_bytes=dtype_bytes, max_model_len=max_model_len))
        needed_utilization = (weights + ACTIVATION_AND_RUNTIME_RESERVE_GIB + per_sequence / GIB) / total
        if needed_utilization <= 0.98:
            fixes.append(f"raise model.gpu_memory_utilization to at least {needed_utilization:.2f}")
    return MemoryBudget(
        role=role, instance_type=instance.name, tensor_parallel_size=tensor_parallel_size, gpu_memory_gib=total,
        gpu_memory_utilization=gpu_memory_utilization, usable_gib=usable, weights_gib=weights,
        reserve_gib=ACTIVATION_AND_RUNTIME_RESERVE_GIB, kv_pool_gib=max(pool, 0.0),
        kv_cache_bytes_per_token=kv_per_token, linear_state_bytes_per_sequence=state,
        bytes_per_max_length_sequence=per_sequence, max_concurrent_sequences=sequences,
        problem=problem, fixes=tuple(fixes), weights_do_not_fit=pool <= 0, sliding_window_bytes_per_sequence=window,
    )


def bigger_instances(role: str, model: ModelArchitecture, *, gpu_memory_utilization: float, dtype_bytes: int,
                     max_model_len: int) -> list[str]:
    """EFA GPU instance types on which one max-length sequence would fit, using all their GPUs."""
    fits = []
    for name in instance_types.efa_gpu_names():
        instance = instance_types.INSTANCE_TYPES[name]
        tp = instance.gpus
        usable = instance.gpu_memory_gib * gpu_memory_utilization
        pool = usable - model.weight_bytes(dtype_bytes) / tp / GIB - ACTIVATION_AND_RUNTIME_RESERVE_GIB
        need = model.sequence_bytes(dtype_bytes, max_model_len, tp)
        if pool * GIB >= need:
            fits.append(f"{name} with tensor_parallel_size {tp}" if tp > 1 else name)
    if fits:
        return [f"use a larger GPU instance type for {role}: {', '.join(fits)}"]
    return [
        "no instance type the library knows can hold this model in 16-bit; use a quantized checkpoint "
        "or a smaller model"
    ]

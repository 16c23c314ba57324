"""Check ``count_parameters`` against transformers' own models, built on the meta device (no memory).

Run with a Python that has torch and transformers (the twin's virtualenv has both):
``/work/main/.venv-twin/bin/python tools/check_parameter_counts.py`` (or any such interpreter).
Every config.json in tests/data/model_configs is instantiated with ``AutoModelForCausalLM.from_config``
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


def main() -> int:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    differ = 0
    for path in sorted((ROOT / "tests" / "data" / "model_configs").glob("*.json")):
        config = json.loads(path.read_text())
        fields = {k: v for k, v in config.items()
                  if k not in ("model_type", "architectures", "transformers_version", "quantization_config")}
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))
        real = sum(p.numel() for p in model.parameters())
        ours = count_parameters(config)[0]
        differ += real != ours
        print(f"{path.stem}: transformers {real:,}, count_parameters {ours:,}: {'same' if real == ours else 'DIFFERENT'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

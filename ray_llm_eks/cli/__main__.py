"""``python -m ray_llm_eks.cli``: the same command line as the ``ray-llm-eks`` script."""

from . import main

main()

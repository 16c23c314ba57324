#!/usr/bin/env python3
"""`cdk synth [-c config=path/to.yaml]`: the default app. Offline: no lookups, no credentials."""

import sys

from ray_llm_eks.app import main

if __name__ == "__main__":
    sys.exit(main())

"""The benchmark suite from a source checkout: ``python benchmarks/run.py [options]``.

The suite itself lives in the package (jitops/bench/), so ``python -m jitops bench`` runs it
from an installed jitops too; from a checkout both write ``benchmarks/results/``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jitops.bench.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

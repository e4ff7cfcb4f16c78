"""The benchmark suite (SPEC section 5), shipped with the package so ``python -m jitops bench``
runs from an installed jitops too; ``benchmarks/run.py`` in a checkout runs the same code and
keeps its results under ``benchmarks/results/``."""

"""The threads: the pool, the OpenMP team borrowed beside PyTorch, and the thread-count
policy over Numba's threading layers."""

"""The Numba-free core: planner, dtype rules, scalar table, device selection and the call
pipeline every backend (jitops.cpu, jitops.cuda, jitops.dask) launches from."""

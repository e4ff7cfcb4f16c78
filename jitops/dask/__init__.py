"""The Dask backend: lazy Dask arrays whose chunks run the CPU path."""

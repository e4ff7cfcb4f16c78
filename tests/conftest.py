import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from . import backends

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(params=backends.selected())
def be(request):
    """Each backend a shared test runs on (tests/backends.py; ``JITOPS_TEST_BACKENDS``)."""
    if request.param == "cuda":
        from jitops.core.device import cuda_unavailable_reason

        if cuda_unavailable_reason() is not None:
            pytest.skip("neither a GPU nor the CUDA simulator is available")
    return backends.ALL[request.param]()

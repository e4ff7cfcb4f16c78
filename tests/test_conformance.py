"""The public conformance sample (../shared/conformance), answered by the real references."""

import os
import subprocess
import sys

import pytest

RUN = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "conformance", "run.py")


@pytest.mark.skipif(not os.path.exists(RUN), reason="../shared/conformance is not beside the repo")
def test_conformance_sample_all_pass():
    res = subprocess.run([sys.executable, RUN, "jitops", "--strict-nan-payload", "--show", "10"],
                         capture_output=True, text=True, timeout=1200)
    last = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 0 and last.endswith(" 0 failed"), res.stdout[-3000:] + res.stderr

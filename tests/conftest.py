import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest
from hypothesis import HealthCheck, settings

# Property tests decide nothing by the wall clock and give the same outcome on every run: no
# per-example deadline and no too-slow health check (both time the example on a machine whose load
# is not the code's), examples drawn from a seed fixed per test, and no example database written into
# the checkout. GPUDOCTOR_HYPOTHESIS_PROFILE=explore draws new examples each run, for a fuzzing session.
settings.register_profile(
    "suite",
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("GPUDOCTOR_HYPOTHESIS_PROFILE", "suite"))


@pytest.fixture(autouse=True)
def _no_saved_machine_profiles(tmp_path_factory, monkeypatch):
    """Tests see datasheet ceilings, never a profile `gpudoctor bench` saved on this machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(autouse=True)
def _work_in_a_tmp_path(tmp_path, monkeypatch):
    """Every test runs in its own temporary folder: what a program, a CLI call or a library writes
    into its working directory lands there, never in the checkout (which may be read-only). Tests
    name the repository's files by absolute paths (``ROOT / ...``)."""
    monkeypatch.chdir(tmp_path)

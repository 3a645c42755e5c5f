import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest


@pytest.fixture(autouse=True)
def _no_saved_machine_profiles(tmp_path_factory, monkeypatch):
    """Tests see datasheet ceilings, never a profile `gpudoctor bench` saved on this machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))

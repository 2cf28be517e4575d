"""The results scripts (scripts/reference.sh, replication.sh, scale.sh) check every part they are
given before running the first: a typo in the last part must not surface hours later."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["reference.sh", "replication.sh", "scale.sh"])
def test_an_unknown_part_stops_the_script_before_any_part_runs(script):
    done = subprocess.run(["bash", str(ROOT / "scripts" / script), "findings", "no_such_part"],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert "unknown part 'no_such_part'" in done.stderr and "findings" in done.stderr
    assert "== " not in done.stdout  # no part started, not even the valid one before it

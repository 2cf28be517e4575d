"""The suite's xdist groups are in effect: a module whose tests share trained runs goes to one
worker (setup.cfg's --dist loadgroup), or each worker trains the runs again. pytest 9 ignores
the nodeid suffix pytest-xdist 3.8 marks a group with, which split every group silently and cost
the suite about a minute; setup.cfg pins pytest below 9 for it."""

from __future__ import annotations

import os

import pytest


@pytest.mark.xdist_group("xdist_check")
def test_a_grouped_test_carries_its_group_under_loadgroup(request):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not run under pytest-xdist (-n)")
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not run with --dist loadgroup")
    assert request.node.nodeid.endswith("@xdist_check"), request.node.nodeid

# SPDX-License-Identifier: MIT
"""wcd against the reference: every rank of every layout the reference
plans (tp 1, 2, 4, 8; ep 2, 4 for MoE) is started on the host backend, and
its manifest must equal the reference's: the same names (checkpoint names
and fused views), dtypes, shapes, padded row counts and XXH3-128 of every
tensor. A layout the reference refuses must be refused by wcd (it exits
before it is ready). Models: the wcgen presets (test_layout_daemon.py: the
transformers checkpoints of test/data/layouts)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import checks  # noqa: E402
import models  # noqa: E402

CASES = [(k, n) for k, n in models.ALL if k == "wcgen"]


@pytest.mark.parametrize("kind,name", CASES)
def test_served_equals_reference(kind, name):
    checks.served_equals_reference(kind, name)


@pytest.mark.parametrize("kind,name", CASES)
def test_views_share_bytes_and_pads_are_zero(kind, name):
    checks.views_share_bytes_and_pads_are_zero(kind, name)

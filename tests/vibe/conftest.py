"""Fixtures for vibe tests: client folders made from the offline templates, edited per test."""

from __future__ import annotations

import pytest

from vibe.data import write_data
from vibe.layout import ClientDir
from vibe.templates import Family, copy_template


@pytest.fixture
def qa_client(tmp_path):
    """A fresh copy of the qa template with its data written; tests edit its files to break it."""
    root = tmp_path / "client"
    copy_template(Family.QA, root)
    write_data(ClientDir.open(root))
    return root

"""The copied fixtures are the shared ones, byte for byte (where the shared folder exists)."""

from __future__ import annotations

import pytest

from receipts.builders import FIXTURES, SHARED


@pytest.mark.parametrize("name", ["handoff_receipts.ndjson", "handoff_receipts.expected.json"])
def test_the_copied_fixture_is_the_shared_one(name: str) -> None:
    if not (SHARED / name).exists():
        pytest.skip("../shared/fixtures is not beside this checkout")
    assert (FIXTURES / name).read_bytes() == (SHARED / name).read_bytes()

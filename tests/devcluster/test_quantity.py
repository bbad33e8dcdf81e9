"""Quantity parsing and the canonical form a real server stores (apimachinery `resource.Quantity`)."""

from __future__ import annotations

import pytest

from devcluster.machinery.quantity import FORMAT_WRONG, SUFFIX_WRONG, QuantityError, canonical


@pytest.mark.parametrize(("given", "stored"), [
    pytest.param("1000m", "1", id="milli-to-whole"),
    pytest.param("0.5", "500m", id="fraction-to-milli"),
    pytest.param(".5", "500m", id="leading-dot"),
    pytest.param("1.", "1", id="trailing-dot"),
    pytest.param("1000", "1k", id="thousand-to-k"),
    pytest.param("128974848", "128974848", id="no-exact-suffix"),
    pytest.param("1024Mi", "1Gi", id="binary-up"),
    pytest.param("1536Mi", "1536Mi", id="binary-kept"),
    pytest.param("1.5Gi", "1536Mi", id="binary-fraction"),
    pytest.param("0.5Ki", "512", id="binary-below-1024-is-decimal"),
    pytest.param("1e3", "1e3", id="exponent-kept"),
    pytest.param("12e2", "1200", id="exponent-normalised"),
    pytest.param("0.1m", "100u", id="micro"),
    pytest.param("-1000m", "-1", id="negative"),
    pytest.param("0Gi", "0", id="zero"),
    pytest.param(" 2 ", "2", id="spaces-trimmed"),
    pytest.param(1, "1", id="json-integer"),
    pytest.param(0.25, "250m", id="json-number"),
])
def test_canonical(given, stored) -> None:
    assert canonical(given) == stored


@pytest.mark.parametrize(("given", "message"), [
    pytest.param("lots", FORMAT_WRONG, id="word"),
    pytest.param("1.2.3", FORMAT_WRONG, id="two-dots"),
    pytest.param("Gi", FORMAT_WRONG, id="suffix-only"),
    pytest.param("", FORMAT_WRONG, id="empty"),
    pytest.param("1 Gi", FORMAT_WRONG, id="inner-space"),
    pytest.param("32MMi", SUFFIX_WRONG, id="double-suffix"),
    pytest.param("1Mie", SUFFIX_WRONG, id="bad-suffix"),
    pytest.param(True, FORMAT_WRONG, id="boolean"),
])
def test_rejected_with_the_server_message(given, message) -> None:
    with pytest.raises(QuantityError) as info:
        canonical(given)
    assert str(info.value) == message

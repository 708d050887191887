"""Tests of the payments service."""

from payments import app


def test_charge_returns_an_id():
    assert app.charge("cus_1", 500) > 0

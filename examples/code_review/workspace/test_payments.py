"""Tests of the payments service."""

import payments as app


def test_charge_returns_an_id():
    assert app.charge("cus_1", 500) > 0

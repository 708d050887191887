"""Tests of the retinue command (retinue.cli), run as a user runs it."""

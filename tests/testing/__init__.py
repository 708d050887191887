"""Tests of retinue.testing: the chaos model, the invariant checker, what shutdowns leave."""

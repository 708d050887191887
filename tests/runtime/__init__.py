"""Tests of the supervised actor runtime: real pykka actors on a real LMDB store."""

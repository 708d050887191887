"""Tests of the supervisor's parts (retinue.actors): real pykka actors on a real LMDB store."""

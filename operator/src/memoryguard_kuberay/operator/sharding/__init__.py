"""Sharing the guards among replicas: the shards' plan (shardplan.py, pure),
the Leases held for them (shards.py, leader.py)."""

"""The pure core: sample types, policy settings, the decision policy and the
offline commands built on them (simulate, bench, trace generation).

Nothing here imports kopf, kubernetes, aiohttp or ray, and nothing reads the
clock: time is always an argument. ``tests/test_contracts.py`` checks both.
"""

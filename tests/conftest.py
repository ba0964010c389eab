"""Test-wide settings. Hypothesis' per-example deadline is off: on a loaded
2-core machine a slow example is not a failure of the code under test."""

from hypothesis import settings

settings.register_profile("memoryguard", deadline=None)
settings.load_profile("memoryguard")

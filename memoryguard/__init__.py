"""MemoryGuard: keeps KubeRay workers from dying of slow memory growth.

The distribution maps three source folders to subpackages (see pyproject):
``core/`` -> ``memoryguard.core`` (pure policy, sample and trace formats,
offline commands), ``sidecar/`` -> ``memoryguard.sidecar`` and
``operator/`` -> ``memoryguard.operator``. This package itself only holds the
command-line entry point.
"""

__version__ = "0.1.0"

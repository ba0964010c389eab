"""MemoryGuard: keeps KubeRay workers from dying of slow memory growth.

The distribution maps three source folders to subpackages (see pyproject):
``core/`` -> ``memoryguard.core`` (pure policy, sample and trace formats,
offline commands), ``sidecar/`` -> ``memoryguard.sidecar`` and
``operator/`` -> ``memoryguard.operator``. In the checkout, ``memoryguard/``
holds symlinks to the three, so the package imports the same from the source
tree, an editable install or a wheel. ``operator/`` has no ``__init__.py``
on purpose: with the checkout's root on ``sys.path`` (``python -m ...`` run
there) a regular package of that name would shadow the standard library's
``operator``; a namespace folder never does. This package itself only holds
the command-line entry point.
"""

__version__ = "0.1.0"

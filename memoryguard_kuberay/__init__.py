"""MemoryGuard: keeps KubeRay workers from dying of slow memory growth.

The distribution maps three source folders to subpackages (see pyproject):
``core/`` -> ``memoryguard_kuberay.core`` (pure policy, sample and trace formats,
offline commands), ``sidecar/`` -> ``memoryguard_kuberay.sidecar`` and
``operator/`` -> ``memoryguard_kuberay.operator``. In the checkout,
``memoryguard_kuberay/`` holds symlinks to the three, so the package imports the same from the source
tree, an editable install or a wheel. ``operator/`` has no ``__init__.py``
on purpose: with the checkout's root on ``sys.path`` (``python -m ...`` run
there) a regular package of that name would shadow the standard library's
``operator``; a namespace folder never does. This package itself only holds
the command-line entry point (``memoryguard-kuberay``).

Why not ``memoryguard``: an unrelated project owns that name on the package
registry, and its import package is ``memoryguard`` too (with a
``memoryguard.core`` module); installed beside ours it would shadow every
import. Our distributions, import package and command are all named
``memoryguard-kuberay``/``memoryguard_kuberay`` (tests/deploy/test_names.py).
"""

__version__ = "0.1.0"

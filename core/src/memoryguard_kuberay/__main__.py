"""``python -m memoryguard_kuberay``: the same as the ``memoryguard-kuberay`` command."""

from memoryguard_kuberay.cli import main

raise SystemExit(main())

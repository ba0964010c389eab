"""``python -m memoryguard``: the same as the ``memoryguard`` command."""

from memoryguard.cli import main

raise SystemExit(main())

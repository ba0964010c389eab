"""The operator's commands: ``operator`` (main.py), ``top`` (top.py,
topview.py) and ``uninstall`` (uninstall.py)."""

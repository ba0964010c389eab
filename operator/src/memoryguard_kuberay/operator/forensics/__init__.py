"""The evidence kept before a rotation: collected (collect.py, the rayprobe
process), stored in ConfigMaps (evidence.py), compared (diff.py) and printed
(cli.py: ``memoryguard-kuberay forensics``)."""

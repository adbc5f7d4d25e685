"""Console commands (see setup.py entry points)."""

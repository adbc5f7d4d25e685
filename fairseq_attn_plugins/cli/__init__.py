"""Console commands (the entry points of pyproject.toml)."""

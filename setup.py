"""The conventional ``setup.py`` beside ``pyproject.toml``: every piece of metadata (name, version,
dependencies, console scripts, packages) is in pyproject.toml, which setuptools reads; this file
only lets tools that look for a setup.py (``python setup.py develop``, older pip) find one."""

from setuptools import setup

setup()

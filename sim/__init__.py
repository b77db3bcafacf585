"""Simulator backends, system runner, experiments and the CLI."""

__version__ = "0.1.0"

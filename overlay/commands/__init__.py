"""Subcommands of the ``overlay`` command line; each module has ``register(subparsers)``."""

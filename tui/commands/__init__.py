"""One module per CLI subcommand group; each exposes ``register(subparsers)``."""

"""The `gdv` subcommands, one module per group (see gdv.cli.COMMAND_MODULES)."""

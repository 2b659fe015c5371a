"""The described system's ``accelerate.commands.config`` package: its config-file classes."""

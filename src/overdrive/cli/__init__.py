"""The `overdrive` command."""

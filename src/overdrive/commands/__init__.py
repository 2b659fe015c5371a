"""The described system's ``accelerate.commands`` modules, for scripts that import them."""

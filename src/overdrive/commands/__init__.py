"""Hugging Face Accelerate's ``accelerate.commands`` modules, for scripts that import them."""

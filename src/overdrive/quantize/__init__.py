"""Weight quantization of whole models (bitsandbytes 8-bit and 4-bit layers), on the
big-model engine's loading and placement. ``overdrive.utils.bnb`` is its face."""

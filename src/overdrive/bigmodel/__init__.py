"""The big-model engine: build a model without memory, measure it, place it over GPUs, the
CPU and the disk (device maps), move weights in and out around each forward (hooks), and
load checkpoints straight to where each weight belongs.

The faces at Hugging Face Accelerate's paths (``overdrive.big_modeling``, ``overdrive.hooks``,
``overdrive.utils.modeling``, ``overdrive.utils.offload``) re-export these modules' names;
nothing here imports a face.
"""

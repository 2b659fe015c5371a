"""Hugging Face Accelerate's lowest versions for its beta tensor and context parallelism.
Torch-free, and importing nothing, so the faces that name them (``utils.constants``,
``parallel_handlers``) can load in either order."""

BETA_TP_AVAILABLE_PYTORCH_VERSION = "2.3.0"
BETA_TP_AVAILABLE_TRANSFORMERS_VERSION = "4.52.0"
BETA_CP_AVAILABLE_PYTORCH_VERSION = "2.6.0"

"""The objects a script passes to ``Accelerator(...)``: backend plugins, keyword-argument and
parallelism handlers, and Hugging Face Accelerate's enumerations."""

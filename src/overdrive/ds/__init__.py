"""DeepSpeed support: the config built from the settings (``config``), the placeholders for an
optimizer and scheduler defined in a DeepSpeed JSON (``dummies``), and the engine's state in
overdrive's own checkpoint format (``state``). ``overdrive.strategies.deepspeed`` uses them.

Everything here but ``state`` and ``engine`` imports without torch or DeepSpeed.
"""

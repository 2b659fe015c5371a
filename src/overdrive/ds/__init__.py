"""DeepSpeed support: the config built from the settings (``config``, ``finish``), the
placeholders for an optimizer and scheduler defined in a DeepSpeed JSON (``dummies``), the
loss scaling of accumulation windows (``window``), starting the engine (``engine``) and its
state in overdrive's own checkpoint format (``state``). ``overdrive.strategies.deepspeed``
uses them.

``config``, ``finish`` and ``dummies`` import neither torch nor DeepSpeed (the CLI uses them).
"""

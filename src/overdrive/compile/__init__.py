"""``torch.compile`` as the ``dynamo_config`` settings ask: the whole model, or its repeated
blocks (regional compilation)."""

"""The training loop's pieces: accumulation windows, the prepared optimizer and scheduler, the
registry of prepared objects and where the loop stands in its dataloader."""

"""Simulate a launch: run the unchanged script as chosen ranks of the planned world, one
process each, on a fake process group with tensors that hold no storage, and report what each
rank holds and sends per step (``overdrive launch --simulate``; docs/simulate.md)."""

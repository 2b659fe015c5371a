"""Who am I among the processes (rank, world, device, group), the collectives between them,
and their random number generators."""

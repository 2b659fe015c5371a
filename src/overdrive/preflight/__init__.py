"""Every check a launch makes before any worker starts, the backends this version can run
among them."""

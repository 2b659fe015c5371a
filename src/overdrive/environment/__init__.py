"""What the launcher handed this process: rank and world from the environment, and the
logger that knows them."""

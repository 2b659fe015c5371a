"""Building an ``Accelerator`` from its arguments, and saying the settings then in force."""

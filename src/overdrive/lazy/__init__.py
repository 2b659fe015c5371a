"""Module attributes loaded on first use, so importing a module stays cheap."""

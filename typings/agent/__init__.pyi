"""Hermes's agent package, typed by the kit's stand-ins."""

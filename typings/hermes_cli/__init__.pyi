"""Hermes's hermes_cli package, typed by the kit's stand-ins."""

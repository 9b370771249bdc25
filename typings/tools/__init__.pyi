"""Hermes's tools package, typed by the kit's stand-ins."""

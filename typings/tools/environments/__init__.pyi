"""Hermes's tools.environments package, typed by the kit's stand-ins."""

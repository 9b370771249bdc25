"""hermes-backend-kit: the conformance suite for Hermes Agent terminal backends."""

__version__ = "0.1.0"

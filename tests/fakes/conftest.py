"""Fixtures shared by the fake services' tests."""

from .upstash_fixtures import fake, upstash_server  # noqa: F401

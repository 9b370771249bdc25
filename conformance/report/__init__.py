"""The certification report: build it, print its per-group table, compare two."""

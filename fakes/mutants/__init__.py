"""Deliberately broken variants of tempdir_box that the suite must catch.

Each module exposes ``provider`` (select it with
``--backend fakes.mutants.<name>:provider --fake tempdir``), ``BREAKS``: the
clauses it must fail, exactly, and ``WHAT``: the breakage in one line.
tests/test_mutants.py runs the suite against every mutant and compares.
"""

MUTANTS = (
    "exit_code_key",
    "stdin_never_closed",
    "no_group_kill",
    "leaky_env",
    "output_cap",
    "ignores_cwd",
    "cleanup_raises_twice",
    "silent_recreate",
    "deletes_by_task",
    "local_fallback",
    "bad_config_schema",
    "stops_sandbox_on_timeout",
)

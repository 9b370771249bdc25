"""Deliberately broken backends that the suite must catch.

Most are tempdir_box with its environment class swapped.  Transport-fault
mutants are a reference backend with one function patched (in the suite's own
process only), run against that backend's fake: ``FAKE`` names it.  Each
module exposes ``provider`` (select it with ``--backend
fakes.mutants.<name>:provider --fake <FAKE or tempdir>``), ``BREAKS``: the
clauses it must fail, exactly, ``WHAT``: the breakage in one line, and
``SCOPE``: a ``-k`` expression that limits its run to the checks the breakage
can reach (every check of its BREAKS, tests/test_mutant_scopes.py makes sure,
and the neighbouring checks it could plausibly break too).
tests/test_mutants.py runs the suite against every mutant, within its scope,
and compares.
"""

MUTANTS = (
    "exit_code_key",
    "stdin_never_closed",
    "no_group_kill",
    "leaves_processes",
    "leaky_env",
    "output_cap",
    "ignores_cwd",
    "cleanup_raises_twice",
    "silent_recreate",
    "deletes_by_task",
    "local_fallback",
    "bad_config_schema",
    "stops_sandbox_on_timeout",
    "wipes_home_on_timeout",
    "resends_commands",
    "no_rate_limit_retry",
    "blocking_finalizer",
    "open_without_deadline",
    "raises_after_start",
    "timeout_word_in_error",
    "thread_local_state",
    "misnamed_persistent",
    "kernel_runner_killed",
    "force_remove_ignored",
    "stdin_error_swallowed",
    "binding_unchecked",
    "binding_mounts",
    "config_probe_raises",
    "config_resolve_not_mapping",
    "config_rejects_backend_config",
    "sync_in_finalizer",
    "sync_drops_new_dirs",
    "skills_synced_back",
    "quiet_sync_back",
    "ignores_passthrough",
    "passthrough_never_unsets",
    "passthrough_values_dropped",
    "guards_off_on_host",
    "unconfigured_probe_raises",
    "environ_fallback",
    "replaces_refused_sandbox",
    "quiet_replacement",
    "cleanup_ends_every_command",
    "slow_register",
    "root_cwd_literal",
)

"""The kit's world view of Box Lite boxes: the box manager's own files, read from outside.

box_lite makes its boxes itself, on this machine, through the box manager of
reference/box_lite; there is no vendor service to fake.  What the kit needs is
a second channel: which boxes exist and in which state, and a way to stop,
remove or break one behind the backend's back.  ``world.BoxLiteWorld`` reads
the manager's registry and box directories under a temporary HERMES_BOX_HOME
and disturbs boxes through the ``hermes-box`` command (as a user would) or by
killing a box's daemon.  It imports nothing of reference/ (the kit never does).
"""

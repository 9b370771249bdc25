"""A box remembers only the commands it may still have to signal.

The soak (10,000 commands per backend) found the Cloudflare and DeepInfra
fakes growing by one Popen, its pipes and its argv per command: nothing on
their paths pruned ``Box.processes``.  Ended groups are dropped when the next
command starts; a group that a detached job keeps alive stays, so deleting the
box still kills that job.
"""

from __future__ import annotations

import time

from fakes.world import World


def test_ended_commands_are_forgotten(tmp_path):
    world = World(tmp_path / "world", namespaces=False)
    try:
        box = world.create()
        for _ in range(30):
            world.spawn(box, cmd="true", login=False).wait(10)
        assert len(box.processes) <= 2, box.processes  # the last one (and at most one not yet pruned)
    finally:
        world.close()


def test_detached_jobs_stay_tracked_until_delete(tmp_path):
    world = World(tmp_path / "world", namespaces=False)
    try:
        box = world.create()
        job = world.spawn(box, cmd="sleep 30 >/dev/null 2>&1 &", login=False)
        assert job.wait(10) == 0
        for _ in range(5):
            world.spawn(box, cmd="true", login=False).wait(10)
        assert job in box.processes and job.group_alive()
        world.delete(box)
        end = time.monotonic() + 5
        while job.group_alive() and time.monotonic() < end:
            time.sleep(0.05)
        assert not job.group_alive()
    finally:
        world.close()

"""The box world's own figure: spawn-to-exit of ``true`` in a box against a plain ``bash -c true``.

Both sides run in this process, interleaved sample by sample, so load from
anything else on the machine falls on both alike.  The box side is what every
fake pays per command: ``World.spawn(box, cmd="true", login=False)`` (bash -c in
the box, with pipes) until its exit status is known; the baseline is
``subprocess.run(["bash", "-c", "true"])``.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance.bench.measure import percentile

DEFAULT_ROUNDS = 200


def measure(rounds: int = DEFAULT_ROUNDS, root: Path | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """({"spawn_p50_ms", "bash_c_p50_ms", "ratio"}, details); the world is isolated where it can be."""
    from fakes.world import World

    with tempfile.TemporaryDirectory(prefix="kit-bench-world-", dir=root) as tmp:
        world = World(Path(tmp) / "world")
        try:
            box = world.create(name="bench")

            def spawn() -> None:
                proc = world.spawn(box, cmd="true", login=False)
                proc.wait(60)
                proc.popen.communicate()  # close its pipes

            def bash_c() -> None:
                subprocess.run(["bash", "-c", "true"], check=True)

            for _ in range(5):  # warm up: the box's init, caches, the first fork of each kind
                spawn()
                bash_c()
            boxed: list[float] = []
            plain: list[float] = []
            for _ in range(rounds):
                for call, samples in ((spawn, boxed), (bash_c, plain)):
                    started = time.perf_counter()
                    call()
                    samples.append((time.perf_counter() - started) * 1000)
            details = {
                "rounds": rounds,
                "isolated": world.isolated,
                "paths_note": world.paths_note,
                "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "spawn_p95_ms": round(percentile(boxed, 95), 3),
                "bash_c_p95_ms": round(percentile(plain, 95), 3),
            }
        finally:
            world.close()
    spawn_p50, bash_p50 = percentile(boxed, 50), percentile(plain, 50)
    figure = {
        "spawn_p50_ms": round(spawn_p50, 3),
        "bash_c_p50_ms": round(bash_p50, 3),
        "ratio": round(spawn_p50 / bash_p50, 3),
    }
    return figure, details


def markdown(data: dict[str, Any]) -> list[str]:
    """The results.md lines for the world figure (none when it was not measured)."""
    world, detail = data.get("world"), data.get("world_detail") or {}
    if not world:
        return []
    boxes = "isolated boxes" if detail.get("isolated", True) else f"UNISOLATED boxes ({detail.get('paths_note')})"
    lines = [
        "## Box world",
        "",
        f"Spawn-to-exit of `true` in the fakes' box world ({boxes}: World.spawn, bash -c with pipes) "
        'against `subprocess.run(["bash", "-c", "true"])`, interleaved in one process'
        + (f", {detail['rounds']} rounds each" if detail.get("rounds") else "")
        + "; target: ratio at most 2.",
        "",
        "| figure | box world | bash -c | ratio |",
        "| --- | --- | --- | --- |",
        f"| spawn-to-exit of `true`, p50 | {world['spawn_p50_ms']:.2f} ms | {world['bash_c_p50_ms']:.2f} ms "
        f"| {world['ratio']:.2f}x |",
    ]
    if detail.get("spawn_p95_ms") is not None:
        lines.append(
            f"| spawn-to-exit of `true`, p95 | {detail['spawn_p95_ms']:.2f} ms | {detail['bash_c_p95_ms']:.2f} ms | - |"
        )
    if detail.get("measured"):
        lines += ["", f"Measured {detail['measured']}."]
    return [*lines, ""]

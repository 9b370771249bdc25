"""deepinfra, but a valid workspace binding is copied into the sandbox at its host path."""

import shlex
from pathlib import Path
from typing import Any

from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a workspace binding is taken as permission: the bound host directory's files appear in the sandbox"
FAKE = "deepinfra"
SCOPE = "test_workspace_binding"


class Provider(DeepInfraProvider):
    def create_environment(self, *, workspace_binding: Any = None, **kwargs: Any) -> Any:
        env = super().create_environment(workspace_binding=workspace_binding, **kwargs)
        root = getattr(workspace_binding, "host_path", None)
        if root and Path(root).is_dir():
            for path in sorted(Path(root).iterdir())[:20]:
                if path.is_file():
                    target = shlex.quote(str(path))
                    env.execute(
                        f"mkdir -p {shlex.quote(root)} && printf '%s' {shlex.quote(path.read_text())} > {target}",
                        timeout=30,
                    )
        return env


provider = Provider()
BREAKS = frozenset({"provider.workspace-binding-not-authorisation"})

"""tempdir_box, but cleanup() also copies skills edited in the sandbox back into HERMES_HOME/skills/."""

import shutil
from pathlib import Path

from hermes_constants import get_hermes_home

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "cleanup() copies every skill file that differs in the sandbox back into the host's skills/ by itself"
SCOPE = "test_sync"


class SkillsSyncedBack(TempdirBoxEnvironment):
    def cleanup(self, *args, **kwargs) -> None:
        sandbox_skills = self._box.home / ".hermes" / "skills"
        host_skills = Path(get_hermes_home()) / "skills"
        if not self._closed and sandbox_skills.is_dir():
            for path in sandbox_skills.rglob("*"):
                target = host_skills / path.relative_to(sandbox_skills)
                if (
                    path.is_file()
                    and not path.is_symlink()
                    and (not target.exists() or target.read_bytes() != path.read_bytes())
                ):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
        super().cleanup(*args, **kwargs)


provider = provider_with(SkillsSyncedBack, "skills_synced_back")
BREAKS = frozenset({"sync.protected-dirs"})

"""tempdir_box, but building its provider at load takes longer than Hermes's plugin load deadline."""

import time

from fakes.tempdir_box.box_provider import TempdirBoxProvider

WHAT = "loading the plugin takes 10.5 s (a slow SDK import or a network call at load): Hermes skips it after 10 s"
SCOPE = "test_register"
DELAY_S = 10.5


class Provider(TempdirBoxProvider):
    def __init__(self) -> None:
        time.sleep(DELAY_S)  # the breakage: the load waits (the kit builds the provider while loading)
        super().__init__()


provider = Provider  # the class: the kit instantiates it while loading, as register(ctx) would
BREAKS = frozenset({"register.load-deadline", "register.import-light"})

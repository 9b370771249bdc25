"""upstash_box, but probe() imports the SDK first and lets the ImportError escape."""

from reference.upstash_box.provider import UpstashBoxProvider

WHAT = "probe() raises ImportError when the upstash-box SDK cannot be imported instead of saying what to install"
FAKE = "upstash"
SCOPE = "test_unconfigured"


class Provider(UpstashBoxProvider):
    def probe(self) -> tuple[str, str]:
        import upstash_box  # noqa: F401 - the breakage: an import outside the provider's own guard

        return super().probe()


provider = Provider()
BREAKS = frozenset({"provider.unconfigured"})

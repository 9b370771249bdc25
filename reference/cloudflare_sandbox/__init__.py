"""cloudflare_sandbox: a Hermes terminal backend that runs commands in Cloudflare Containers
through a bridge Worker (bridge protocol v1, plus the concurrent-exec and large-output
extensions when the Worker offers them).

Install and select:

    pip install hermes-backend-kit
    hermes plugins enable cloudflare-sandbox
    hermes config set terminal.backend cloudflare_sandbox
"""

from reference.common.plugin import registrar

register = registrar("cloudflare_sandbox", "reference.cloudflare_sandbox.provider:CloudflareSandboxProvider")

"""upstash_box: a Hermes terminal backend that runs commands in Upstash Boxes.

Install and select:

    pip install 'hermes-backend-kit[upstash]'
    hermes plugins enable upstash-box
    hermes config set terminal.backend upstash_box
"""

from reference.common.plugin import registrar

register = registrar("upstash_box", "reference.upstash_box.provider:UpstashBoxProvider")

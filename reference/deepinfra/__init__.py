"""deepinfra: a Hermes terminal backend that runs commands in DeepInfra sandboxes.

Install and select (the plugin is ``deepinfra-sandbox``; Hermes already
bundles unrelated plugins named ``deepinfra``, the backend is ``deepinfra``):

    pip install 'hermes-backend-kit[deepinfra]'
    hermes plugins enable deepinfra-sandbox
    hermes config set terminal.backend deepinfra
"""

from reference.common.plugin import registrar

register = registrar("deepinfra", "reference.deepinfra.provider:DeepInfraProvider")

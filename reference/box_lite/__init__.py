"""Box Lite: local isolated boxes whose tools are replaceable and whose state is precious.

A box is a set of Linux namespaces made by the ``isolation`` engine, held
running by one small daemon per box (``daemon``) and driven through its
control socket (``control``); ``boxes.BoxManager`` creates, starts, stops and
removes boxes and runs commands in them; the ``hermes-box`` command (``cli``)
and the Hermes backend plugin are built on it.
"""

from reference.common.plugin import registrar

# The Hermes backend plugin: `hermes plugins enable box-lite`, `hermes config set terminal.backend box_lite`.
register = registrar("box_lite", "reference.box_lite.provider:BoxLiteProvider")

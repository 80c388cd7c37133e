"""Guests: programs that join a node's room with the Noam protocol (UDP marco /
polo, length-prefixed JSON over TCP or WebSocket) without running a node.

The package itself imports nothing: every node reads ``section`` (its settings)
while only a node that hosts guests loads the rest (``codec``, ``room``,
``server``, ``bridge``); import those modules by name."""

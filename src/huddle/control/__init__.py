"""Control: the programs a node starts, watches and stops (docs/control.md).

``section`` reads ``[[apps]]`` (the node's own and its type's) and orders them by
``depends-on``; ``machine`` is one app's supervision as a pure state machine (time
passed in); ``supervisor`` is its asyncio driver (processes, logs, pid files);
``feature`` plugs it into the node (routes, commands, facts).  Orders from any node:
``orders`` (the signed messages), ``carrier`` (their peer service), ``remote`` (the desk),
``settings`` ([control]), ``orders_feature`` and ``orders_cli``.
"""

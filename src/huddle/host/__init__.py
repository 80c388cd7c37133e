"""The node's parts that are not wiring, each with narrow inputs: the routing of its
events (:mod:`.events`), the recording of its own events and what waits for the start-up
window (:mod:`.recording`), the renewal of a retired identity (:mod:`.renewal`), the
group key's glue (:mod:`.keys`) and its interface's address (:mod:`.address`).
:class:`~huddle.node.Node` makes and orders them; none of them knows the node.
"""

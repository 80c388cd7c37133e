"""The node's parts that are not wiring, each with narrow inputs: who it is
(:mod:`.identity`), its mesh stack made in order (:mod:`.mesh`), the recording of its own
events and of what waits for the start-up window (:mod:`.recording`), the renewal of a
retired identity (:mod:`.renewal`), the routing of its events (:mod:`.events`), who
follows its address and group key (:mod:`.address`), and the event loop's handler of
sockets that cannot accept (:mod:`.loop`).  :class:`~huddle.node.Node` makes and orders
them; none of them knows the node.
"""

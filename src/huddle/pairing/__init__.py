"""Pairing: a device that knows the group's name but not its secret asks a member to let it in
(docs/security.md, "Pairing").

- :mod:`~huddle.pairing.codec`: the door's messages (pure);
- :mod:`~huddle.pairing.requests`: the requests a door holds, their bounds and answers (pure, time passed in);
- :mod:`~huddle.pairing.door`: a member's door (a CurveZMQ ROUTER in its own context);
- :mod:`~huddle.pairing.newcomer`: the device's side, before its node starts;
- :mod:`~huddle.pairing.feature`, :mod:`~huddle.pairing.http`: the member's routes, command and facts;
- :mod:`~huddle.pairing.section`: ``[pairing]`` settings.

The package's modules load on demand (the node's configuration reads the section alone).
"""

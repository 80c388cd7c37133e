"""The features a node runs unless told otherwise (docs/architecture.md, "The feature unit").

:func:`default_features` is the one list: :class:`~huddle.node.Node` takes it when it is
given none, the API serves its routes, the ``huddle`` command adds its commands.  A new
capability is a package with a class that satisfies :class:`huddle.ports.Feature`, and one
line here.  A feature's heavy parts (its driver, its routes, its commands' handlers) load
when they are used, so building the list costs ``huddle --help`` nothing.
"""

from __future__ import annotations

from .control.feature import AppInfoFeature, AppsFeature
from .control.orders_feature import OrdersFeature
from .crg.feature import CrgFeature
from .doc.feature import DocumentFeature
from .guests_feature import GuestsFeature
from .hydra.feature import HydraFeature
from .pairing.feature import PairingFeature
from .ports import Feature
from .posts.feature import PostsFeature
from .security.features import RotationFeature, TrustFeature
from .statsbook.feature import StatsbookFeature
from .zre.feature import ZreFeature

__all__ = ["default_features"]


def default_features() -> list[Feature]:
    """A new list of new features, in the order the node starts them (each node its own)."""
    posts, zre = PostsFeature(), ZreFeature()  # Hydra's server reads posts' store, tells ZRE its header
    apps = AppsFeature()  # orders come before it: their closer (a shutdown command) runs after its
    doc = DocumentFeature()  # CRG's WebSocket and game files read the bout document
    return [posts, doc, StatsbookFeature(), GuestsFeature(), TrustFeature(), RotationFeature(),
            OrdersFeature(apps), apps, AppInfoFeature(apps), PairingFeature(), HydraFeature(posts, zre), zre,
            CrgFeature(doc)]

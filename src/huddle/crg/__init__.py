"""CRG ScoreBoard's game files and its WebSocket, for a huddle bout (docs/crg.md).

``export_crg`` and ``import_crg`` (pure) turn a bout into the game file CRG ScoreBoard
4.x/5.x saves and back; ``state`` makes the paths CRG's ``/WS`` pushes; the feature
(crg/feature.py) serves ``/WS`` and adds ``huddle bout export|import --crg``.
"""

from .export import export_crg
from .load import import_crg
from .paths import CrgError

__all__ = ["CrgError", "export_crg", "import_crg"]

"""Discovery: each mechanism reports "peer seen at endpoint"."""

from .beacon import BeaconService
from .interfaces import Interface, InterfaceAbsent, resolve_interface

__all__ = ["BeaconService", "Interface", "InterfaceAbsent", "resolve_interface"]

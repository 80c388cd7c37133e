"""The shared bout document: operations carried by the log, applied in one order."""

from .engine import BoutDocument, DocEngine, jams
from .model import Element, default_bout, digest, to_json, to_xml
from .ops import DOC_KIND, JamStateError, OperationError, parse_json_ops, parse_ops, parse_xml_ops
from .summary import bout_summary

__all__ = [
    "DOC_KIND", "BoutDocument", "DocEngine", "Element", "JamStateError", "OperationError", "bout_summary", "default_bout",
    "digest", "jams", "parse_json_ops", "parse_ops", "parse_xml_ops", "to_json", "to_xml",
]

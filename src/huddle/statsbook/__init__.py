"""The WFTDA statsbook: the bout written into its sheets, a filled IGRF read back (docs/statsbook.md).

:func:`write_statsbook` takes the document and its summary as Python values (no HTTP), so the
command line and the audit pipeline call the same writer; openpyxl loads with the first call.
"""

from .cells import statsbook_cells
from .igrf import igrf_operations
from .workbook import StatsbookInputError, StatsbookOutputError, read_igrf, write_statsbook

__all__ = ["StatsbookInputError", "StatsbookOutputError", "igrf_operations", "read_igrf", "statsbook_cells",
           "write_statsbook"]

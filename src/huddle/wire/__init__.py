"""Wire formats: the ZeroMQ message codec and the UDP beacon.  Pure, no I/O.

The codec is split by concern: ``framing`` (frames, the table of message types
``SPECS``, ``encode`` / ``decode`` / ``peek``), ``membership`` (the mesh's own
messages), ``delivery`` (CHAT, DMSG, DACK, BULK), ``records`` (the replicated
log's records, XMSG, GSIP), ``reports`` (RAWS) and ``fields`` (what they share).
Import from here; the modules' other names are theirs.
"""

from .beacon import BEACON_SIZE, Beacon, group_hash, pack, unpack
from .delivery import MAX_BULK, MAX_BULK_HEAD, Bulk, Chat, Dack, Dmsg
from .fields import MAX_BODY, MAX_NAME, MAX_SEQ, PROTOCOL_VERSION, valid_endpoint
from .framing import MESH_TYPES, SPECS, TAGS, Message, MessageSpec, decode, encode, encode_parts, peek
from .membership import MAX_GROUP, Beat, Gbye, Group, Helo, MemberEntry, Members, Peer, Time, helo_signed
from .records import (
    MAX_KIND,
    MAX_RECORD,
    Gsip,
    LogHead,
    LogRecord,
    RecordBatch,
    Xmsg,
    check_record,
    checked_room,
    make_record,
    make_records,
    record_size,
    strict_json,
)
from .reports import MAX_FORGED_ROWS, MAX_GONE_ROWS, PEER_STATES, CheckedRows, PeerStat, Raws, raws_signed, sign_raws

__all__ = [
    "BEACON_SIZE",
    "MAX_BODY",
    "MAX_BULK",
    "MAX_BULK_HEAD",
    "MAX_FORGED_ROWS",
    "MAX_GONE_ROWS",
    "MAX_GROUP",
    "MAX_KIND",
    "MAX_NAME",
    "MAX_RECORD",
    "MAX_SEQ",
    "MESH_TYPES",
    "PEER_STATES",
    "PROTOCOL_VERSION",
    "SPECS",
    "TAGS",
    "Beacon",
    "Beat",
    "Bulk",
    "Chat",
    "CheckedRows",
    "Dack",
    "Dmsg",
    "Gbye",
    "Group",
    "Gsip",
    "Helo",
    "LogHead",
    "LogRecord",
    "MemberEntry",
    "Members",
    "Message",
    "MessageSpec",
    "Peer",
    "PeerStat",
    "Raws",
    "RecordBatch",
    "Time",
    "Xmsg",
    "check_record",
    "checked_room",
    "decode",
    "encode",
    "encode_parts",
    "group_hash",
    "helo_signed",
    "make_record",
    "make_records",
    "pack",
    "peek",
    "raws_signed",
    "record_size",
    "sign_raws",
    "strict_json",
    "unpack",
    "valid_endpoint",
]

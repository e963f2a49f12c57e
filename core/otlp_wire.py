"""OTLP trace protobuf written straight from core.span_export's span tuples.

The SDK's way to the wire makes a `ReadableSpan` of each span and then a protobuf object of each
span, attribute and value (opentelemetry-exporter-otlp-proto-common) before serializing them:
about 90 us for a gateway request's five spans. The same bytes written here from the tuples,
with each attribute's encoding kept for its next use (the keys and most values repeat from one
request to the next), cost a small part of that. The message is
`opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`; its fields are written in
field-number order, as protobuf's own serializers write them, and a test parses them back with
opentelemetry-proto against the SDK's encoding of the same spans (tests/core/test_otlp_wire.py).

Attribute values: str, bool, int (int64), float, bytes, and lists or tuples of those; anything
else is written as its str(). Span kinds are opentelemetry.trace.SpanKind's values (the OTLP
enum is one more).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
_FIXED32 = struct.Struct("<I")
CACHE_LIMIT = 8192  # attributes (key, value) whose encoding is kept; the cache is emptied beyond

# Span.flags: the parent's is_remote is known (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK), and true.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_LOCAL_FLAGS = b"\x85\x01" + _FIXED32.pack(_HAS_IS_REMOTE)  # field 16, fixed32
_REMOTE_FLAGS = _FIXED32.pack(_HAS_IS_REMOTE | _IS_REMOTE)
_STATUS = {False: b"\x7a\x00", True: b"\x7a\x02\x18\x02"}  # field 15: UNSET; ERROR (code 2)


def _varint(value: int) -> bytes:
    """A protobuf varint (a negative value as its 64-bit two's complement, as int64 is)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(n) for n in range(1 << 14)]  # one or two bytes: most lengths


def varint(value: int) -> bytes:
    """A protobuf varint (a negative value as its 64-bit two's complement, as int64 is)."""
    return _SMALL[value] if 0 <= value < 16384 else _varint(value)


def unix_ns(wall_ns: int, perf: float, at: float) -> int:
    """A perf_counter value `at` as Unix nanoseconds, `perf` having been read at `wall_ns`."""
    return wall_ns + round((at - perf) * 1e9)


def field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the length, the bytes."""
    return tag + varint(len(data)) + data


def any_value(value: Any) -> bytes:
    """An AnyValue message's bytes."""
    if isinstance(value, str):
        return field(b"\x0a", value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return field(b"\x3a", value)
    if isinstance(value, list | tuple):  # ArrayValue { repeated AnyValue values = 1 }
        return field(b"\x2a", b"".join(field(b"\x0a", any_value(v)) for v in value))
    return field(b"\x0a", str(value).encode())


class Encoder:
    """Writes ExportTraceServiceRequests for one resource and one instrumentation scope."""

    def __init__(
        self,
        resource_attributes: Mapping[str, Any],
        scope_name: str,
        scope_version: str = "",
        resource_schema_url: str = "",
    ) -> None:
        scope = field(b"\x0a", scope_name.encode())
        if scope_version:
            scope += field(b"\x12", scope_version.encode())
        self.scope = field(b"\x0a", scope)  # ScopeSpans.scope
        resource = b"".join(
            field(b"\x0a", self._key_value(k, v)) for k, v in resource_attributes.items()
        )
        self.resource = field(b"\x0a", resource)  # ResourceSpans.resource
        self.resource_tail = (
            field(b"\x1a", resource_schema_url.encode()) if resource_schema_url else b""
        )
        self.cache: dict[tuple[str, type, Any], bytes] = {}
        self.names: dict[str, bytes] = {}

    @staticmethod
    def _key_value(key: str, value: Any) -> bytes:
        return field(b"\x0a", key.encode()) + field(b"\x12", any_value(value))

    def attributes(self, tag: bytes, attributes: Mapping[str, Any]) -> bytes:
        """Each attribute as one `tag` field (a repeated KeyValue); a str, bool or int value's
        encoding is kept for the next span that carries it."""
        cache = self.cache
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is str or kind is bool or kind is int:
                entry = (key, kind, value)
                encoded = cache.get(entry)
                if encoded is None:
                    if len(cache) >= CACHE_LIMIT:
                        cache.clear()
                    encoded = cache[entry] = field(tag, self._key_value(key, value))
                out.append(encoded)
            else:
                out.append(field(tag, self._key_value(key, value)))
        return b"".join(out)

    def span(self, trace_id: bytes, wall_ns: int, perf: float, span: tuple[Any, ...]) -> bytes:
        """One span tuple (core.span_export's form, its times perf_counter values read `perf`
        at the Unix time `wall_ns`) as a Span message's bytes."""
        span_id, parent_id, name, kind, start, end, attributes, events, links, error = span
        start = wall_ns + round((start - perf) * 1e9)
        end = wall_ns + round((end - perf) * 1e9)
        parts = [b"\x0a\x10", trace_id, b"\x12\x08", span_id.to_bytes(8, "big")]
        if parent_id:
            parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
        encoded_name = self.names.get(name)
        if encoded_name is None:
            if len(self.names) >= CACHE_LIMIT:
                self.names.clear()
            encoded_name = self.names[name] = field(b"\x2a", name.encode())
        parts += (
            encoded_name,
            b"\x30",
            varint(kind + 1),
            b"\x39",
            _FIXED64.pack(start),
            b"\x41",
            _FIXED64.pack(end),
        )
        if attributes:
            parts.append(self.attributes(b"\x4a", attributes))
        for event_name, at, event_attributes in events:
            at = wall_ns + round((at - perf) * 1e9)
            event = b"\x09" + _FIXED64.pack(at) + field(b"\x12", event_name.encode())
            if event_attributes:
                event += self.attributes(b"\x1a", event_attributes)
            parts.append(field(b"\x5a", event))
        for link_trace, link_span, _flags, link_attributes in links:
            link = b"\x0a\x10" + link_trace.to_bytes(16, "big")
            link += b"\x12\x08" + link_span.to_bytes(8, "big")
            if link_attributes:
                link += self.attributes(b"\x22", link_attributes)
            parts.append(field(b"\x6a", link + b"\x35" + _REMOTE_FLAGS))
        parts.append(_STATUS[bool(error)])
        parts.append(_LOCAL_FLAGS)
        return field(b"\x12", b"".join(parts))  # ScopeSpans.spans

    def record(self, record: tuple[int, int, float, Iterable[tuple[Any, ...]]]) -> list[bytes]:
        """A core.span_export record's spans, each encoded."""
        trace_id, wall_ns, perf, spans = record
        trace = trace_id.to_bytes(16, "big")
        return [self.span(trace, wall_ns, perf, span) for span in spans]

    def request(self, spans: Iterable[bytes]) -> bytes:
        """An ExportTraceServiceRequest of encoded spans (from `record`)."""
        scope_spans = field(b"\x12", self.scope + b"".join(spans))
        return field(b"\x0a", self.resource + scope_spans + self.resource_tail)

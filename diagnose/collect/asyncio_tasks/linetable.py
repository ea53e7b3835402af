"""The line of an instruction, from a code object's 3.11+ location table (`co_linetable`,
Objects/locations.md): the equivalent of `PyCode_Addr2Line`, bounded by the table's length."""

from __future__ import annotations


def _varint(table: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(table):
        byte = table[pos]
        pos += 1
        value |= (byte & 63) << shift
        shift += 6
        if not byte & 64:
            break
    return value, pos


def _svarint(table: bytes, pos: int) -> tuple[int, int]:
    value, pos = _varint(table, pos)
    return (-(value >> 1) if value & 1 else value >> 1), pos


def line_of(table: bytes, firstlineno: int, code_unit: int) -> int:
    """The source line of instruction `code_unit` (index in 2-byte code units); -1 unknown."""
    line = firstlineno
    address = 0
    pos = 0
    while pos < len(table):
        first = table[pos]
        pos += 1
        if not first & 0x80:
            return -1  # not an entry start: a torn or foreign table
        code = (first >> 3) & 15
        length = (first & 7) + 1
        entry_line: int | None = line
        if code == 15:          # no location
            entry_line = None
        elif code == 14:        # long form: line delta, end line, column, end column
            delta, pos = _svarint(table, pos)
            line += delta
            entry_line = line
            for _ in range(3):
                _, pos = _varint(table, pos)
        elif code == 13:        # no column
            delta, pos = _svarint(table, pos)
            line += delta
            entry_line = line
        elif code >= 10:        # one-line form: the delta is in the code, two column bytes
            line += code - 10
            entry_line = line
            pos += 2
        else:                   # short form: same line, one column byte
            pos += 1
        if address <= code_unit < address + length:
            return entry_line if entry_line is not None else -1
        address += length
    return -1

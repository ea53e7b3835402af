"""Python objects read from the target's memory: type names, str, int, dicts, sets, weakrefs
and instance attributes. Every loop is bounded; any failure is a RemoteReadError."""

from __future__ import annotations

from collections.abc import Iterator

from diagnose.collect.asyncio_tasks.layout import Layout
from diagnose.collect.asyncio_tasks.remote import (
    RemoteMemory, RemoteReadError, i64_at, ptr_at, u32_at)

MAX_STR = 200          # characters of a name or path kept; longer ones are cut
MAX_DICT_ENTRIES = 1 << 16
MAX_SET_SLOTS = 1 << 17
STR_PREFETCH = 48
MAX_KEY = 64          # a dict key longer than this never matches a name we look up
MAX_KEY_CACHE = 1 << 14
MAX_BASES = 16        # a type's base chain followed this far
MAX_INT_DIGITS = 4     # a permit count or a counter; bigger ints are not read


class ObjectReader:
    def __init__(self, mem: RemoteMemory, layout: Layout):
        self.mem = mem
        self.lay = layout
        self._type_names: dict[int, str] = {}  # type address -> tp_name (types outlive tasks)
        # dict key address -> its text: attribute and module names are interned, long-lived
        self._key_names: dict[int, str] = {}
        self._subtypes: dict[tuple[int, str], bool] = {}
        self._split_index: dict[tuple[int, str], int] = {}  # (shared keys, name) -> slot

    # -- types -----------------------------------------------------------------------------
    def type_of(self, address: int) -> int:
        return self.mem.ptr(address + self.lay.object_ob_type)

    def type_name(self, type_address: int) -> str:
        name = self._type_names.get(type_address)
        if name is None:
            raw = self.mem.read(self.mem.ptr(type_address + self.lay.type_tp_name), 80)
            name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
            if len(self._type_names) < 4096:
                self._type_names[type_address] = name
        return name

    def is_subtype(self, type_address: int, name: str) -> bool:
        """Whether the type or one of its first bases is named `name` (remembered per type)."""
        key = (type_address, name)
        known = self._subtypes.get(key)
        if known is None:
            known, current = False, type_address
            for _ in range(MAX_BASES):
                if not current:
                    break
                if self.type_name(current) == name:
                    known = True
                    break
                current = self.mem.ptr(current + self.lay.type_tp_base)
            if len(self._subtypes) < 4096:
                self._subtypes[key] = known
        return known

    def type_name_of(self, address: int) -> str:
        return self.type_name(self.type_of(address))

    # -- scalars ---------------------------------------------------------------------------
    def read_str(self, address: int, limit: int = MAX_STR) -> str:
        """A str object's text (cut to `limit` characters); RemoteReadError if not a str."""
        lay = self.lay
        try:  # the header and a short text in one read
            head = self.mem.read(address, lay.unicode_compact_size + STR_PREFETCH)
        except RemoteReadError:
            head = self.mem.read(address, lay.unicode_compact_size)
        if self.type_name(ptr_at(head, lay.object_ob_type)) != "str":
            raise RemoteReadError("not a str")
        length = i64_at(head, lay.unicode_length)
        state = u32_at(head, lay.unicode_state)
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not compact or kind not in (1, 2, 4) or length < 0:
            raise RemoteReadError("a legacy or torn str")
        count = min(length, limit)
        if count == 0:
            return ""
        offset = lay.unicode_ascii_size if ascii_ else lay.unicode_compact_size
        if offset + count * kind <= len(head):  # a short name came with the header
            data = head[offset:offset + count * kind]
        else:
            data = self.mem.read(address + offset, count * kind)
        codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        return data.decode(codec, "replace")

    def read_int(self, address: int) -> int:
        """A small int object's value; RemoteReadError if not an int or too big."""
        lay = self.lay
        head = self.mem.read(address, lay.long_ob_digit + 4 * MAX_INT_DIGITS)
        if self.type_name(ptr_at(head, lay.object_ob_type)) not in ("int", "bool"):
            raise RemoteReadError("not an int")
        tag = i64_at(head, lay.long_lv_tag)
        if lay.minor >= 12:
            ndigits, sign = tag >> 3, 1 - (tag & 3)  # sign bits: 0 positive, 1 zero, 2 negative
        else:
            ndigits, sign = abs(tag), (1 if tag > 0 else -1 if tag < 0 else 0)
        if ndigits > MAX_INT_DIGITS:
            raise RemoteReadError("int too large")
        value = 0
        for i in reversed(range(ndigits)):
            value = (value << lay.long_shift) | u32_at(head, lay.long_ob_digit + 4 * i)
        return sign * value

    def read_bytes(self, address: int, limit: int) -> bytes:
        size = self.mem.i64(address + self.lay.var_ob_size)
        if size < 0 or size > limit:
            raise RemoteReadError("bytes too large")
        return self.mem.read(address + self.lay.bytes_ob_sval, size) if size else b""

    def ob_size(self, address: int) -> int:
        return self.mem.i64(address + self.lay.var_ob_size)

    # -- containers ------------------------------------------------------------------------
    def _keys_entries(self, keys: int, limit: int) -> tuple[bytes, bool, int]:
        """(entries bytes, unicode-kind, count) of a PyDictKeysObject."""
        lay = self.lay
        head = self.mem.read(keys, lay.dictkeys_indices)
        log2_index_bytes = head[lay.dictkeys_log2_index_bytes]
        nentries = i64_at(head, lay.dictkeys_nentries)
        if not 0 <= nentries <= min(limit, MAX_DICT_ENTRIES) or log2_index_bytes > 24:
            raise RemoteReadError("dict too large or torn")
        unicode = head[lay.dictkeys_kind] != lay.dictkeys_kind_general
        size = lay.dict_uentry_size if unicode else lay.dict_entry_size
        start = keys + lay.dictkeys_indices + (1 << log2_index_bytes)
        data = self.mem.read(start, nentries * size) if nentries else b""
        return data, unicode, nentries

    def dict_items(self, address: int, limit: int = MAX_DICT_ENTRIES) -> Iterator[tuple[int, int]]:
        """(key address, value address) of a dict, split tables included."""
        lay = self.lay
        head = self.mem.read(address, lay.dict_ma_values + 8)
        keys, values = ptr_at(head, lay.dict_ma_keys), ptr_at(head, lay.dict_ma_values)
        yield from self._items(keys, values, limit)

    def _items(self, keys: int, values: int, limit: int) -> Iterator[tuple[int, int]]:
        lay = self.lay
        data, unicode, count = self._keys_entries(keys, limit)
        size = lay.dict_uentry_size if unicode else lay.dict_entry_size
        key_at = lay.dict_uentry_key if unicode else lay.dict_entry_key
        value_at = lay.dict_uentry_value if unicode else lay.dict_entry_value
        split = self.mem.read(values + lay.dictvalues_values, count * 8) if values and count else b""
        for i in range(count):
            key = ptr_at(data, i * size + key_at)
            value = ptr_at(split, i * 8) if values else ptr_at(data, i * size + value_at)
            if key and value:
                yield key, value

    def dict_get(self, address: int, name: str, limit: int = MAX_DICT_ENTRIES) -> int:
        """The value under str key `name`, 0 when absent."""
        return self._lookup(self.dict_items(address, limit), name)

    def _lookup(self, items: Iterator[tuple[int, int]], name: str) -> int:
        for key, value in items:
            text = self._key_names.get(key)
            if text is None:
                try:
                    text = self.read_str(key, MAX_KEY)
                except RemoteReadError:
                    continue
                if len(self._key_names) >= MAX_KEY_CACHE:
                    self._key_names.clear()
                self._key_names[key] = text
            if text == name:
                return value
        return 0

    def attribute(self, address: int, name: str) -> int:
        """An instance attribute from the object's own dict (managed, inline or tp_dictoffset);
        0 when absent."""
        lay = self.lay
        tp = self.type_of(address)
        flags = self.mem.ptr(tp + lay.type_tp_flags)
        if flags & lay.tpflags_managed_dict:
            slot = self.mem.ptr(address + lay.managed_dict_offset)
            if lay.minor == 11:
                if slot:
                    return self.dict_get(slot, name, 256)
                values = self.mem.ptr(address - 4 * 8)  # _PyObject_ValuesPointer: obj - 4 words
                return self._shared(tp, values, name)
            if lay.minor == 12:
                if slot & 1:  # tagged pointer: the values array, one byte past
                    return self._shared(tp, slot + 1, name)
                return self.dict_get(slot, name, 256) if slot else 0
            if slot:
                return self.dict_get(slot, name, 256)
            if flags & lay.tpflags_inline_values:
                values = address + self.mem.ptr(tp + lay.type_tp_basicsize)
                if self.mem.read(values + 3, 1) == b"\0":  # values no longer valid
                    return 0
                return self._shared(tp, values, name)
            return 0
        offset = self.mem.i64(tp + lay.type_tp_dictoffset)
        if offset <= 0:
            return 0
        dict_address = self.mem.ptr(address + offset)
        return self.dict_get(dict_address, name, 256) if dict_address else 0

    def _shared(self, tp: int, values: int, name: str) -> int:
        """An attribute from a split table: the type's shared keys give the slot (an entry
        of shared keys never moves, so the slot is remembered), the values array the value."""
        if not values:
            return 0
        keys = self.mem.ptr(tp + self.lay.heaptype_ht_cached_keys)
        if not keys:
            return 0
        slot = self._split_index.get((keys, name))
        if slot is None:
            data, unicode, count = self._keys_entries(keys, 256)
            size = self.lay.dict_uentry_size if unicode else self.lay.dict_entry_size
            key_at = self.lay.dict_uentry_key if unicode else self.lay.dict_entry_key
            names = ((i, ptr_at(data, i * size + key_at)) for i in range(count))
            slot = self._lookup(((k, i + 1) for i, k in names if k), name) - 1
            if slot < 0:
                return 0
            if len(self._split_index) < MAX_KEY_CACHE:
                self._split_index[(keys, name)] = slot
        return self.mem.ptr(values + self.lay.dictvalues_values + 8 * slot)

    def set_items(self, address: int, limit: int) -> Iterator[int]:
        """The keys of a set (dummy slots included: callers check each key's type)."""
        lay = self.lay
        head = self.mem.read(address, lay.set_table + 8)
        mask, table = i64_at(head, lay.set_mask), ptr_at(head, lay.set_table)
        if not 0 <= mask < MAX_SET_SLOTS:
            raise RemoteReadError("set too large or torn")
        slots = self.mem.read(table, (mask + 1) * lay.setentry_size)
        found = 0
        for i in range(mask + 1):
            key = ptr_at(slots, i * lay.setentry_size + lay.setentry_key)
            if key:
                found += 1
                if found > limit:
                    return
                yield key

    def weakref_target(self, address: int) -> int:
        return self.mem.ptr(address + self.lay.weakref_wr_object)

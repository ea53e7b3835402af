"""The struct offsets the walkers use, for one target: generated per minor version from
CPython's headers (offsets_data.py), overridden on 3.13+ by the `_Py_DebugOffsets` the target
itself carries at the start of `_PyRuntime`."""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields

from diagnose.collect.asyncio_tasks.offsets_data import OFFSETS
from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError

DEBUG_COOKIE = b"xdebugpy"


class UnsupportedLayout(Exception):
    """No offsets for this version, or the target's own offsets disagree with them."""


@dataclass(frozen=True)
class Layout:
    minor: int
    runtime_interpreters_head: int
    interp_modules: int
    object_ob_type: int
    var_ob_size: int
    type_tp_name: int
    type_tp_basicsize: int
    type_tp_base: int
    type_tp_flags: int
    type_tp_dictoffset: int
    heaptype_ht_cached_keys: int
    tpflags_managed_dict: int
    tpflags_inline_values: int
    managed_dict_offset: int
    unicode_ascii_size: int
    unicode_compact_size: int
    unicode_length: int
    unicode_state: int
    bytes_ob_sval: int
    long_lv_tag: int
    long_ob_digit: int
    long_shift: int
    dict_ma_keys: int
    dict_ma_values: int
    dictkeys_log2_size: int
    dictkeys_log2_index_bytes: int
    dictkeys_kind: int
    dictkeys_nentries: int
    dictkeys_indices: int
    dictkeys_kind_general: int
    dict_entry_size: int
    dict_entry_key: int
    dict_entry_value: int
    dict_uentry_size: int
    dict_uentry_key: int
    dict_uentry_value: int
    dictvalues_values: int
    set_used: int
    set_mask: int
    set_table: int
    setentry_size: int
    setentry_key: int
    weakref_wr_object: int
    module_md_dict: int
    gen_frame_state: int
    gen_iframe: int
    frame_code: int
    frame_instr: int
    frame_instr_is_next: int
    frame_previous: int
    frame_stacktop: int
    frame_localsplus: int
    code_filename: int
    code_name: int
    code_qualname: int
    code_linetable: int
    code_firstlineno: int
    code_code_adaptive: int
    frame_created: int
    frame_suspended: int
    frame_suspended_yield_from: int
    frame_cleared: int
    op_resume: int
    op_instrumented_resume: int
    op_resume_quick: int
    runtime_gil: int  # 3.11: the GIL's struct inside _PyRuntime; -1 on 3.12+
    interp_ceval_gil: int  # 3.12+: the pointer to it in each interpreter; -1 on 3.11
    gil_last_holder: int
    gil_locked: int
    tstate_native_thread_id: int


def generated_layout(minor: int) -> Layout:
    table = OFFSETS.get(f"3.{minor}")
    if table is None:
        raise UnsupportedLayout(f"no struct offsets for CPython 3.{minor} "
                                f"(known: {', '.join(sorted(OFFSETS))})")
    return Layout(minor=minor, **{f.name: table[f.name] for f in fields(Layout)
                                  if f.name != "minor"})


def target_layout(mem: RemoteMemory, runtime_address: int, minor: int) -> Layout:
    """The generated layout, with the fields the target publishes in `_Py_DebugOffsets`
    (3.13+) taken from the target: they describe the build actually running."""
    layout = generated_layout(minor)
    table = OFFSETS[f"3.{minor}"]
    positions = {k[4:]: v for k, v in table.items() if k.startswith("dbg.")}
    if not positions:
        return layout
    try:
        head = mem.read(runtime_address, max(positions.values()) + 8)
    except RemoteReadError as exc:
        raise UnsupportedLayout(f"_Py_DebugOffsets not readable: {exc}") from exc
    if head[positions["cookie"]:positions["cookie"] + 8] != DEBUG_COOKIE:
        raise UnsupportedLayout("_PyRuntime does not start with the _Py_DebugOffsets cookie")
    version = struct.unpack_from("<Q", head, positions["version"])[0]
    if (version >> 16) & 0xFF != minor or version >> 24 != 3:
        raise UnsupportedLayout(f"_Py_DebugOffsets says version {version:#x}, not 3.{minor}")
    published = {name: struct.unpack_from("<Q", head, pos)[0]
                 for name, pos in positions.items() if name not in ("cookie", "version")}
    current = {f.name: getattr(layout, f.name) for f in fields(Layout)}
    current.update({k: v for k, v in published.items() if k in current})
    return Layout(**current)

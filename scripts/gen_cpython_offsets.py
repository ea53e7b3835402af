"""Generates diagnose/collect/asyncio_tasks/offsets_data.py: CPython 3.11-3.13 struct offsets.

Also the garbage collector's state in the interpreter (collect/gc_state.py: the `collecting`
flag and the collections per generation).

Compiles a small C program with offsetof() against each interpreter's own installed headers
(include/python3.X/internal/, Py_BUILD_CORE defined) and records what it prints. The asyncio
Task/Future layout is not in any installed header; the reader calibrates it at run time
(calibrate.py). For 3.13 the reader prefers the `_Py_DebugOffsets` the target carries at the
start of `_PyRuntime`; the positions of those fields inside `_Py_DebugOffsets` come from here.

    python scripts/gen_cpython_offsets.py [PREFIX ...]   # default: ~/.pyenv/versions/3.1[123]*
"""

from __future__ import annotations

import glob
import os
import pprint
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "diagnose/collect/asyncio_tasks/offsets_data.py"

C_SOURCE = r"""
#define Py_BUILD_CORE 1
#include "Python.h"
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_moduleobject.h"
#include "internal/pycore_object.h"
#if PY_MINOR_VERSION >= 13
#include "internal/pycore_genobject.h"
#include "opcode_ids.h"
#else
#include "opcode.h"
#endif
#include <stddef.h>
#include <stdio.h>

#define P(name, value) printf("%s %ld\n", name, (long)(value))
#define O(name, type, field) P(name, offsetof(type, field))

int main(void) {
    P("minor", PY_MINOR_VERSION);
    O("runtime_interpreters_head", _PyRuntimeState, interpreters.head);
#if PY_MINOR_VERSION >= 12
    O("interp_modules", PyInterpreterState, imports.modules);
#else
    O("interp_modules", PyInterpreterState, modules);
#endif
    /* the cyclic garbage collector's state (collect/gc_state.py) */
    O("interp_gc", PyInterpreterState, gc);
    O("gc_collecting", struct _gc_runtime_state, collecting);
    O("gc_generation_stats", struct _gc_runtime_state, generation_stats);
    P("gc_stats_size", sizeof(struct gc_generation_stats));
    O("gc_stats_collections", struct gc_generation_stats, collections);
    O("object_ob_type", PyObject, ob_type);
    O("var_ob_size", PyVarObject, ob_size);
    O("type_tp_name", PyTypeObject, tp_name);
    O("type_tp_basicsize", PyTypeObject, tp_basicsize);
    O("type_tp_base", PyTypeObject, tp_base);
    O("type_tp_flags", PyTypeObject, tp_flags);
    O("type_tp_dictoffset", PyTypeObject, tp_dictoffset);
    O("heaptype_ht_cached_keys", PyHeapTypeObject, ht_cached_keys);
    P("tpflags_managed_dict", Py_TPFLAGS_MANAGED_DICT);
#ifdef Py_TPFLAGS_INLINE_VALUES
    P("tpflags_inline_values", Py_TPFLAGS_INLINE_VALUES);
#else
    P("tpflags_inline_values", 0);
#endif
    P("managed_dict_offset", -3 * (long)sizeof(PyObject *));
    P("sizeof_object", sizeof(PyObject));
    P("unicode_ascii_size", sizeof(PyASCIIObject));
    P("unicode_compact_size", sizeof(PyCompactUnicodeObject));
    O("unicode_length", PyASCIIObject, length);
    O("unicode_state", PyASCIIObject, state);
    O("bytes_ob_sval", PyBytesObject, ob_sval);
    O("tuple_ob_item", PyTupleObject, ob_item);
#if PY_MINOR_VERSION >= 12
    O("long_lv_tag", PyLongObject, long_value.lv_tag);
    O("long_ob_digit", PyLongObject, long_value.ob_digit);
#else
    O("long_lv_tag", PyVarObject, ob_size);  /* 3.11: signed digit count */
    O("long_ob_digit", PyLongObject, ob_digit);
#endif
    P("long_shift", PyLong_SHIFT);
    O("dict_ma_used", PyDictObject, ma_used);
    O("dict_ma_keys", PyDictObject, ma_keys);
    O("dict_ma_values", PyDictObject, ma_values);
    O("dictkeys_log2_size", PyDictKeysObject, dk_log2_size);
    O("dictkeys_log2_index_bytes", PyDictKeysObject, dk_log2_index_bytes);
    O("dictkeys_kind", PyDictKeysObject, dk_kind);
    O("dictkeys_nentries", PyDictKeysObject, dk_nentries);
    O("dictkeys_indices", PyDictKeysObject, dk_indices);
    P("dictkeys_kind_general", DICT_KEYS_GENERAL);
    P("dict_entry_size", sizeof(PyDictKeyEntry));
    O("dict_entry_key", PyDictKeyEntry, me_key);
    O("dict_entry_value", PyDictKeyEntry, me_value);
    P("dict_uentry_size", sizeof(PyDictUnicodeEntry));
    O("dict_uentry_key", PyDictUnicodeEntry, me_key);
    O("dict_uentry_value", PyDictUnicodeEntry, me_value);
    O("dictvalues_values", PyDictValues, values);
    O("set_used", PySetObject, used);
    O("set_mask", PySetObject, mask);
    O("set_table", PySetObject, table);
    P("setentry_size", sizeof(setentry));
    O("setentry_key", setentry, key);
    O("weakref_wr_object", PyWeakReference, wr_object);
    O("module_md_dict", PyModuleObject, md_dict);
    O("gen_frame_state", PyGenObject, gi_frame_state);
    O("gen_iframe", PyGenObject, gi_iframe);
#if PY_MINOR_VERSION >= 13
    O("frame_code", _PyInterpreterFrame, f_executable);
    O("frame_instr", _PyInterpreterFrame, instr_ptr);
    P("frame_instr_is_next", 1);
#else
    O("frame_code", _PyInterpreterFrame, f_code);
    O("frame_instr", _PyInterpreterFrame, prev_instr);
    P("frame_instr_is_next", 0);
#endif
    O("frame_previous", _PyInterpreterFrame, previous);
    O("frame_stacktop", _PyInterpreterFrame, stacktop);
    O("frame_owner", _PyInterpreterFrame, owner);
    O("frame_localsplus", _PyInterpreterFrame, localsplus);
    O("code_filename", PyCodeObject, co_filename);
    O("code_name", PyCodeObject, co_name);
    O("code_qualname", PyCodeObject, co_qualname);
    O("code_linetable", PyCodeObject, co_linetable);
    O("code_firstlineno", PyCodeObject, co_firstlineno);
    O("code_nlocalsplus", PyCodeObject, co_nlocalsplus);
    O("code_code_adaptive", PyCodeObject, co_code_adaptive);
    P("frame_created", FRAME_CREATED);
    P("frame_suspended", FRAME_SUSPENDED);
#if PY_MINOR_VERSION >= 13
    P("frame_suspended_yield_from", FRAME_SUSPENDED_YIELD_FROM);
#else
    P("frame_suspended_yield_from", FRAME_SUSPENDED);
#endif
    P("frame_cleared", FRAME_CLEARED);
    /* the GIL: 3.11 keeps it in the runtime, 3.12+ behind a pointer in each interpreter */
#if PY_MINOR_VERSION >= 12
    P("runtime_gil", -1);
    O("interp_ceval_gil", PyInterpreterState, ceval.gil);
#else
    O("runtime_gil", _PyRuntimeState, ceval.gil);
    P("interp_ceval_gil", -1);
#endif
    O("gil_last_holder", struct _gil_runtime_state, last_holder);
    O("gil_locked", struct _gil_runtime_state, locked);
    O("tstate_native_thread_id", PyThreadState, native_thread_id);
    P("op_resume", RESUME);
#ifdef RESUME_QUICK
    P("op_resume_quick", RESUME_QUICK);  /* 3.11 quickens RESUME in place */
#else
    P("op_resume_quick", RESUME);
#endif
#ifdef INSTRUMENTED_RESUME
    P("op_instrumented_resume", INSTRUMENTED_RESUME);
#else
    P("op_instrumented_resume", RESUME);
#endif
#if PY_MINOR_VERSION >= 13
    /* where each field sits inside _Py_DebugOffsets (3.13+ reads the values from the target) */
    O("dbg.cookie", _Py_DebugOffsets, cookie);
    O("dbg.version", _Py_DebugOffsets, version);
    O("dbg.runtime_interpreters_head", _Py_DebugOffsets, runtime_state.interpreters_head);
    O("dbg.interp_modules", _Py_DebugOffsets, interpreter_state.imports_modules);
    O("dbg.interp_gc", _Py_DebugOffsets, interpreter_state.gc);
    O("dbg.frame_previous", _Py_DebugOffsets, interpreter_frame.previous);
    O("dbg.frame_code", _Py_DebugOffsets, interpreter_frame.executable);
    O("dbg.frame_instr", _Py_DebugOffsets, interpreter_frame.instr_ptr);
    O("dbg.frame_localsplus", _Py_DebugOffsets, interpreter_frame.localsplus);
    O("dbg.frame_owner", _Py_DebugOffsets, interpreter_frame.owner);
    O("dbg.code_filename", _Py_DebugOffsets, code_object.filename);
    O("dbg.code_name", _Py_DebugOffsets, code_object.name);
    O("dbg.code_qualname", _Py_DebugOffsets, code_object.qualname);
    O("dbg.code_linetable", _Py_DebugOffsets, code_object.linetable);
    O("dbg.code_firstlineno", _Py_DebugOffsets, code_object.firstlineno);
    O("dbg.code_code_adaptive", _Py_DebugOffsets, code_object.co_code_adaptive);
    O("dbg.object_ob_type", _Py_DebugOffsets, pyobject.ob_type);
    O("dbg.type_tp_name", _Py_DebugOffsets, type_object.tp_name);
    O("dbg.type_tp_flags", _Py_DebugOffsets, type_object.tp_flags);
    O("dbg.tuple_ob_item", _Py_DebugOffsets, tuple_object.ob_item);
    O("dbg.dict_ma_keys", _Py_DebugOffsets, dict_object.ma_keys);
    O("dbg.dict_ma_values", _Py_DebugOffsets, dict_object.ma_values);
    O("dbg.long_lv_tag", _Py_DebugOffsets, long_object.lv_tag);
    O("dbg.long_ob_digit", _Py_DebugOffsets, long_object.ob_digit);
    O("dbg.bytes_ob_sval", _Py_DebugOffsets, bytes_object.ob_sval);
    O("dbg.unicode_state", _Py_DebugOffsets, unicode_object.state);
    O("dbg.unicode_length", _Py_DebugOffsets, unicode_object.length);
    O("dbg.unicode_ascii_size", _Py_DebugOffsets, unicode_object.asciiobject_size);
#endif
    return 0;
}
"""


def offsets_for(prefix: str, work: Path) -> dict[str, int]:
    include = sorted(glob.glob(os.path.join(prefix, "include", "python3.*")))[0]
    source = work / "offsets.c"
    source.write_text(C_SOURCE)
    binary = work / f"offsets-{os.path.basename(include)}"
    subprocess.run(["gcc", "-w", "-I", include, "-I", os.path.join(include, "internal"),
                    str(source), "-o", str(binary)], check=True)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    return {name: int(value) for name, value in (line.split() for line in out.splitlines())}


def main(argv: list[str]) -> int:
    prefixes = argv or sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[123].*")))
    table: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in prefixes:
            offsets = offsets_for(prefix, Path(tmp))
            table[f"3.{offsets.pop('minor')}"] = offsets
            print(f"{prefix}: {len(offsets)} offsets", file=sys.stderr)
    OUT.write_text(
        '"""Generated by scripts/gen_cpython_offsets.py from CPython\'s installed headers '
        '(offsetof, x86-64 Linux,\nnon-free-threaded builds). Do not edit by hand."""\n\n'
        f"OFFSETS: dict[str, dict[str, int]] = {pprint.pformat(table, width=100, sort_dicts=True)}\n")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""From `_PyRuntime` to the target's tasks and, for each, its coroutine chain: interpreter ->
sys.modules -> asyncio.tasks -> `_scheduled_tasks` (3.11: `_all_tasks`; a WeakSet, the C
module's, which asyncio.tasks re-exports) and `_eager_tasks` -> Task -> coroutine -> its embedded frame -> what
the frame awaits (`_PyGen_yf`: the top of its value stack) -> ... -> the innermost frame."""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.collect.asyncio_tasks.layout_probe import TaskLayout
from diagnose.collect.asyncio_tasks.layout import Layout
from diagnose.collect.asyncio_tasks.linetable import line_of
from diagnose.collect.asyncio_tasks.objects import ObjectReader
from diagnose.collect.asyncio_tasks.remote import (
    RemoteReadError, i32_at, i64_at, ptr_at)
from diagnose.collect.task_recording import CoroFrame

MAX_TASKS = 10_000      # tasks read per snapshot; the rest are not read
MAX_DEPTH = 64          # coroutines followed down one chain
MAX_STACK = 1 << 16     # a frame's value-stack depth beyond this is a torn read
MAX_LINETABLE = 1 << 16
MAX_CODE_CACHE = 8192
PREFETCH_WORDS = 15     # locals and stack read with a coroutine's head (the awaited object)
_COROUTINE_TYPES = ("coroutine", "generator")
_NOT_TASKS = ("NoneType", "<dummy key> type")


class AsyncioNotLoaded(Exception):
    """asyncio.tasks is not in the target's sys.modules: it has no tasks."""


@dataclass(frozen=True)
class CodeInfo:
    function: str
    file: str
    firstlineno: int
    linetable: bytes
    first_instr: int  # address of the code's first instruction (co_code_adaptive)


@dataclass(frozen=True)
class SuspendedFrame:
    frame: CoroFrame
    local0: int       # the frame's first local (`self` of a method), as an address


@dataclass(frozen=True)
class Chain:
    frames: tuple[SuspendedFrame, ...]  # outermost first
    awaited: int                         # what the innermost frame awaits (not a coroutine), 0


class TaskWalker:
    def __init__(self, reader: ObjectReader, layout: Layout, tasks: TaskLayout,
                 runtime_address: int):
        self.r = reader
        self.lay = layout
        self.t = tasks
        self.runtime = runtime_address
        self._sets: tuple[int, int] | None = None  # (scheduled data set, eager set or 0)
        self._codes: dict[int, CodeInfo] = {}
        self._frames: dict[tuple[int, int], CoroFrame] = {}  # (code, instruction) -> frame
        self._resumes: dict[int, bool] = {}               # instruction -> inside an await
        self._memo: dict[tuple[int, str], int | None] = {}  # this snapshot's primitive fields
        self._frame_head = layout.gen_iframe + layout.frame_localsplus + 8

    # -- where the tasks are -----------------------------------------------------------------
    def _task_sets(self) -> tuple[int, int]:
        mem, lay = self.r.mem, self.lay
        interp = mem.ptr(self.runtime + lay.runtime_interpreters_head)
        modules = mem.ptr(interp + lay.interp_modules)
        if not modules:
            raise RemoteReadError("no sys.modules (interpreter starting or finalizing)")
        module = self.r.dict_get(modules, "asyncio.tasks")
        if not module:
            raise AsyncioNotLoaded("asyncio is not imported")
        namespace = mem.ptr(module + lay.module_md_dict)
        # 3.12+ `_scheduled_tasks`; 3.11 names the same WeakSet `_all_tasks`
        scheduled = self.r.dict_get(namespace, "_scheduled_tasks" if lay.minor >= 12
                                    else "_all_tasks", 4096)
        eager = self.r.dict_get(namespace, "_eager_tasks", 4096) if lay.minor >= 12 else 0
        data = self.r.attribute(scheduled, "data") if scheduled else 0
        if not data or self.r.type_name_of(data) != "set":
            raise RemoteReadError("asyncio.tasks._scheduled_tasks is not a readable WeakSet")
        if eager and self.r.type_name_of(eager) != "set":
            eager = 0
        return data, eager

    def task_addresses(self, refresh: bool) -> list[int]:
        """The live tasks' addresses (dead weakrefs and dummy slots dropped, at most MAX_TASKS).
        The sets' own addresses are looked up again when `refresh` or when they stop reading."""
        if refresh or self._sets is None:
            self._sets = self._task_sets()
        data, eager = self._sets
        try:
            if self.r.type_name_of(data) != "set":
                raise RemoteReadError("stale set")
        except RemoteReadError:
            self._sets = self._task_sets()
            data, eager = self._sets
        found: dict[int, None] = {}
        ref_size = self.lay.weakref_wr_object + 8
        for ref in self.r.set_items(data, MAX_TASKS * 2):
            try:
                head = self.r.mem.read(ref, ref_size)  # its type and its referent in one read
                if not self.r.type_name(ptr_at(head, self.lay.object_ob_type)).startswith(
                        "weakref"):
                    continue  # a deleted slot's dummy key
                task = ptr_at(head, self.lay.weakref_wr_object)
                if task:
                    found[task] = None  # a dead one points to None: task_fields says so
            except RemoteReadError:
                continue  # a weakref freed under us
            if len(found) >= MAX_TASKS:
                break
        if eager and len(found) < MAX_TASKS:
            for task in self.r.set_items(eager, MAX_TASKS - len(found)):
                found[task] = None
        return list(found)

    # -- one task ----------------------------------------------------------------------------
    def task_fields(self, task: int) -> tuple[int, str, int, int] | None:
        """(fut_state, name, coroutine, fut_waiter) of one task; None for a dead weakref's None
        or a deleted slot of the eager set."""
        t = self.t
        data = self.r.mem.read(task, max(t.fut_state + 4, t.fut_waiter + 8, t.task_coro + 8,
                                         t.task_name + 8))
        task_type = ptr_at(data, self.lay.object_ob_type)
        if self.r.type_name(task_type) in _NOT_TASKS:
            return None
        if not self.r.is_subtype(task_type, "_asyncio.Task"):
            raise RemoteReadError("not a task (freed and reused under us)")
        return (i32_at(data, t.fut_state), self._name(ptr_at(data, t.task_name)),
                ptr_at(data, t.task_coro), ptr_at(data, t.fut_waiter))

    def _name(self, address: int) -> str:
        if not address:
            return ""
        if self.r.type_name_of(address) == "int":  # 3.13 formats "Task-<n>" only when asked
            return f"Task-{self.r.read_int(address)}"
        return self.r.read_str(address)

    def chain(self, coro: int) -> Chain:
        """The coroutine chain from the task's coroutine down to the innermost suspended frame,
        cycle-guarded and at most MAX_DEPTH deep."""
        lay, mem = self.lay, self.r.mem
        frames: list[SuspendedFrame] = []
        seen: set[int] = set()
        current = coro
        while current and current not in seen and len(frames) < MAX_DEPTH:
            seen.add(current)
            head = self._object_head(current)
            if self.r.type_name(ptr_at(head, lay.object_ob_type)) not in _COROUTINE_TYPES:
                return Chain(tuple(frames), current)
            frame = current + lay.gen_iframe
            if len(head) < self._frame_head:
                head = mem.read(current, self._frame_head)
            state = int.from_bytes(head[lay.gen_frame_state:lay.gen_frame_state + 1], "little",
                                   signed=True)
            if state >= 0 or state == lay.frame_created:  # running, finished or not started
                break
            instr = ptr_at(head, lay.gen_iframe + lay.frame_instr)
            frames.append(SuspendedFrame(
                self._frame(ptr_at(head, lay.gen_iframe + lay.frame_code), instr),
                ptr_at(head, lay.gen_iframe + lay.frame_localsplus)))
            if not self._in_yield_from(state, instr):
                break
            stacktop = i32_at(head, lay.gen_iframe + lay.frame_stacktop)
            if not 0 < stacktop < MAX_STACK:
                raise RemoteReadError("torn frame: stack top out of range")
            top = lay.gen_iframe + lay.frame_localsplus + 8 * (stacktop - 1)
            current = ptr_at(head, top) if top + 8 <= len(head) \
                else mem.ptr(frame + lay.frame_localsplus + 8 * (stacktop - 1))
        return Chain(tuple(frames), 0)

    def _object_head(self, address: int) -> bytes:
        """A coroutine's head, its frame and the first words of its locals and stack, in one
        read; what is not a coroutine may be smaller (at the end of a mapping): then its
        header only."""
        try:
            return self.r.mem.read(address, self._frame_head + 8 * PREFETCH_WORDS)
        except RemoteReadError:
            return self.r.mem.read(address, self.lay.object_ob_type + 8)

    def _frame(self, code_address: int, instr: int) -> CoroFrame:
        """Where a frame stands: the same (code, instruction) is the same frame, decoded once."""
        key = (code_address, instr)
        frame = self._frames.get(key)
        if frame is None:
            code = self._code(code_address)
            frame = CoroFrame(code.function, code.file, line_of(
                code.linetable, code.firstlineno, (instr - code.first_instr) // 2))
            if len(self._frames) >= MAX_CODE_CACHE:
                self._frames.clear()
            self._frames[key] = frame
        return frame

    def _in_yield_from(self, state: int, instr: int) -> bool:
        """`_PyGen_yf`: is the suspended frame inside an await / yield from?"""
        lay = self.lay
        if lay.minor >= 13:
            return state == lay.frame_suspended_yield_from
        if state != lay.frame_suspended:
            return False
        resume = self._resumes.get(instr)
        if resume is None:  # the RESUME after the YIELD_VALUE (3.11 may have quickened it)
            op, arg = self.r.mem.read(instr + 2, 2)
            resume = op in (lay.op_resume, lay.op_resume_quick,
                            lay.op_instrumented_resume) and arg >= 2
            if len(self._resumes) >= MAX_CODE_CACHE:
                self._resumes.clear()
            self._resumes[instr] = resume
        return resume

    def _code(self, address: int) -> CodeInfo:
        info = self._codes.get(address)
        if info is not None:
            return info
        lay, r = self.lay, self.r
        if r.type_name_of(address) != "code":
            raise RemoteReadError("frame without a code object")
        head = r.mem.read(address, lay.code_code_adaptive)
        first = int.from_bytes(head[lay.code_firstlineno:lay.code_firstlineno + 4], "little",
                               signed=True)
        function = ptr_at(head, lay.code_qualname) or ptr_at(head, lay.code_name)
        info = CodeInfo(r.read_str(function), r.read_str(ptr_at(head, lay.code_filename), 400),
                        first, r.read_bytes(ptr_at(head, lay.code_linetable), MAX_LINETABLE),
                        address + lay.code_code_adaptive)
        if len(self._codes) >= MAX_CODE_CACHE:
            self._codes.clear()
        self._codes[address] = info
        return info

    def new_snapshot(self) -> None:
        self._memo.clear()

    def int_attribute(self, address: int, name: str) -> int | None:
        """An int attribute (a semaphore's `_value`), read once per snapshot per object: the
        tasks queued on one primitive share it."""
        key = (address, name)
        if key not in self._memo:
            self._memo[key] = self._int_attribute(address, name)
        return self._memo[key]

    def _int_attribute(self, address: int, name: str) -> int | None:
        try:
            value = self.r.attribute(address, name)
            return self.r.read_int(value) if value else None
        except RemoteReadError:
            return None

    def deque_length(self, address: int, name: str) -> int | None:
        """len() of a deque attribute; None when it is None (never created) or unreadable.
        Read once per snapshot per object."""
        key = (address, name)
        if key not in self._memo:
            self._memo[key] = self._deque_length(address, name)
        return self._memo[key]

    def _deque_length(self, address: int, name: str) -> int | None:
        try:
            value = self.r.attribute(address, name)
            if not value or self.r.type_name_of(value) != "collections.deque":
                return None
            length = i64_at(self.r.mem.read(value + self.lay.var_ob_size, 8), 0)
            return length if 0 <= length < (1 << 31) else None
        except RemoteReadError:
            return None

"""Which locks a thread holds, and which it waits for, read from its stack and the source.

A stack names, in every Python frame, the line the frame is at. A lock taken by a `with X:`
block is held while that line is inside the block's body, in any frame of the stack; a lock
taken by `X.acquire()` is held from that call until a matching `X.release()`. The source of each
frame's file is parsed with `ast` once (read through samples/source.py: regular files only,
bounded), and indexed by line.

- Held (`held_in_stack`): in every Python frame, the `with` blocks whose body holds the frame's
  line, innermost to outermost, plus the `X.acquire()` calls earlier in the same function with
  no `X.release()` between them and the line. The acquire rule is best effort: it reads the
  source in line order, not the control flow (an acquire in one branch and a release in
  another, a release in a loop's earlier iteration, a lock passed to a helper that releases it
  are not followed). A `with` block's own header line is not holding: a frame there is entering
  the block (acquiring).
- Waited for (`waited_at`): the lock acquired at the line of the innermost application frame of
  a thread in a lock wait (classify/state.py's site): a `with X:` header or an `X.acquire()` on
  that line. When the site is inside the threading module (`Condition.__enter__`), its caller's
  line is read instead. A `with A, B:` header names the item on the frame's line, the first one
  when several share it.
- Identity (`LockSite.identity`): locks are matched across threads by name, resolved per (file,
  expression): `self.x` in class C of file F is `F::C.x` (the same attribute of another class
  is another lock); `other.x` is `F::C.x` too when `self.x` is assigned in exactly one class C
  of F; a bare name is the module-global `F::NAME` unless the function binds it (a parameter, an
  assignment without `global`), then it is local to the function. Any other expression is its
  own text in its file. What names cannot tell: two instances of one class share an identity
  (`self.lock` of account a and of account b); one lock object reached under two names (passed
  as a parameter, imported into another module, aliased) is two identities.
- Not done: an `RLock`'s owner read from the target's memory (the owner thread id is in the
  C object; here a held RLock is known only from the source, like any lock); `async with` blocks
  (asyncio locks are held by tasks, not threads: the asyncio task reader's job).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from enum import StrEnum

from diagnose.samples import source
from diagnose.samples.profile import Frame

MAX_PARSE_CHARS = 2 << 20  # a file larger than this is not parsed (no locks known in it)
_THREADING = ("/threading.py",)


class Taken(StrEnum):
    """How the code takes a lock."""

    WITH = "with"
    ACQUIRE = "acquire"


@dataclass(frozen=True)
class LockSite:
    """A lock as one line of code takes it: its name as written, the identity threads are
    matched on, and the line of its `with` or `acquire()`."""

    name: str  # the expression as written: "self.model_lock", "LOCK_B"
    identity: str  # "file::Class.attr", "file::NAME", "file::function:NAME"
    file: str
    line: int  # the `with` (or `acquire()`) line
    function: str  # the function it is taken in (qualified by its class)
    taken: Taken

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def qualified(self) -> str:
        """The lock's name as its identity resolves it (`Cache._lock` for `self._lock` in class
        Cache, `LOCK_A` for a module global): what tells two `self._lock` apart."""
        return self.identity.split("::", 1)[-1]

    @property
    def label(self) -> str:
        """The name as written, with its resolution when that says more: `self._lock
        (Cache._lock)`."""
        return self.name if self.qualified == self.name else f"{self.name} ({self.qualified})"


@dataclass(frozen=True)
class _Function:
    start: int
    end: int
    qualname: str
    klass: str  # the enclosing class's name, "" for a plain function
    self_name: str  # the first parameter of a method ("self"), "" otherwise
    local_names: frozenset[str]


@dataclass(frozen=True)
class _With:
    header: tuple[int, int]  # first and last line of the `with ...:` header
    body: tuple[int, int]  # first and last line of its body
    items: tuple[tuple[str, int, ast.expr], ...]  # (expression text, its line, the node)


@dataclass(frozen=True)
class _Call:
    line: int
    name: str  # the receiver's text: `X` of `X.acquire()`
    node: ast.expr
    release: bool


@dataclass
class _Index:
    functions: list[_Function] = field(default_factory=list)
    withs: list[_With] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    attribute_owners: dict[str, set[str]] = field(default_factory=dict)  # attr -> classes


_cache: dict[str, tuple[list[str], _Index | None]] = {}


def _index_of(file: str) -> _Index | None:
    lines = source.lines(file)
    cached = _cache.get(file)
    if cached is not None and cached[0] is lines:
        return cached[1]
    index = _build(lines)
    _cache[file] = (lines, index)
    return index


def _build(lines: list[str]) -> _Index | None:
    text = "".join(lines)
    if not text or len(text) > MAX_PARSE_CHARS:
        return None
    index = _Index()
    try:
        tree = ast.parse(text)
        _walk(tree, index, klass="", prefix="", function=None)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # not Python, or nested deeper than we walk: no locks known in it
    index.functions.sort(key=lambda f: (f.start, -f.end))
    return index


def _walk(node: ast.AST, index: _Index, klass: str, prefix: str, function: _Function | None) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            _walk(child, index, child.name, f"{prefix}{child.name}.", None)
            continue
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = child.args
            params = [a.arg for a in (*args.posonlyargs, *args.args)]
            if function is not None:  # a closure in a method sees the method's `self`
                owner, self_name = function.klass, function.self_name
            else:
                owner, self_name = klass, (params[0] if klass and params else "")
            fn = _Function(child.lineno, child.end_lineno or child.lineno, f"{prefix}{child.name}",
                           owner, self_name, _locals(child))
            index.functions.append(fn)
            _walk(child, index, klass, f"{prefix}{child.name}.", fn)
            continue
        if isinstance(child, ast.With) and child.body:
            body_start = child.body[0].lineno
            items = tuple((ast.unparse(item.context_expr), item.context_expr.lineno, item.context_expr)
                          for item in child.items)
            index.withs.append(_With((child.lineno, max(child.lineno, body_start - 1)),
                                     (body_start, child.end_lineno or body_start), items))
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                and child.func.attr in ("acquire", "release"):
            receiver = child.func.value
            index.calls.append(_Call(child.lineno, ast.unparse(receiver), receiver,
                                     child.func.attr == "release"))
        elif isinstance(child, (ast.Assign, ast.AnnAssign)) and function is not None \
                and function.self_name:
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == function.self_name:
                    index.attribute_owners.setdefault(target.attr, set()).add(function.klass)
        _walk(child, index, klass, prefix, function)


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Names the function binds (parameters, assignments) and does not declare global."""
    args = fn.args
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    declared: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return frozenset(bound - declared)


def _function_at(index: _Index, line: int) -> _Function | None:
    """The innermost function whose span holds `line`."""
    found = None
    for fn in index.functions:
        if fn.start <= line <= fn.end and (found is None or fn.start >= found.start):
            found = fn
    return found


def _identity(file: str, node: ast.expr, text: str, fn: _Function | None, index: _Index) -> str:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = node.value.id
        if fn is not None and fn.self_name and owner == fn.self_name:
            return f"{file}::{fn.klass}.{node.attr}"
        owners = index.attribute_owners.get(node.attr, set())
        if len(owners) == 1 and (fn is None or owner in fn.local_names):
            return f"{file}::{next(iter(owners))}.{node.attr}"
    if isinstance(node, ast.Name) and fn is not None and node.id in fn.local_names:
        return f"{file}::{fn.qualname}:{node.id}"
    return f"{file}::{text}"


def _site(file: str, text: str, line: int, node: ast.expr, fn: _Function | None, index: _Index,
          taken: Taken) -> LockSite:
    return LockSite(text, _identity(file, node, text, fn, index), file, line,
                    fn.qualname if fn is not None else "<module>", taken)


def _inside(fn: _Function | None, line: int) -> bool:
    return fn is not None and fn.start <= line <= fn.end


def held_at(file: str, line: int) -> tuple[LockSite, ...]:
    """The locks a frame at `file:line` holds, innermost first: the `with` blocks whose body
    holds the line (within the line's own function), then the unreleased `X.acquire()` calls
    before it in that function."""
    index = _index_of(file) if line > 0 else None
    if index is None:
        return ()
    fn = _function_at(index, line)
    held: list[LockSite] = []
    blocks = [w for w in index.withs if w.body[0] <= line <= w.body[1]
              and (fn is None or _inside(fn, w.header[0]))]
    for block in sorted(blocks, key=lambda w: -w.header[0]):
        for text, _, node in block.items:
            held.append(_site(file, text, block.header[0], node, fn, index, Taken.WITH))
    calls = [c for c in index.calls if _inside(fn, c.line) and _function_at(index, c.line) is fn]
    for call in sorted((c for c in calls if not c.release and c.line < line), key=lambda c: -c.line):
        released = any(c.release and c.name == call.name and call.line < c.line < line for c in calls)
        if not released:
            held.append(_site(file, call.name, call.line, call.node, fn, index, Taken.ACQUIRE))
    return tuple(held)


def acquired_at(file: str, line: int) -> LockSite | None:
    """The lock a frame at `file:line` is taking: a `with` header (the item on that line) or an
    `X.acquire()` call on it; None when the line takes none (or the source is unreadable)."""
    index = _index_of(file) if line > 0 else None
    if index is None:
        return None
    fn = _function_at(index, line)
    for block in sorted(index.withs, key=lambda w: -w.header[0]):
        if block.header[0] <= line <= block.header[1]:
            on_line = [item for item in block.items if item[1] == line] or list(block.items[:1])
            text, _, node = on_line[0]
            return _site(file, text, block.header[0], node, fn, index, Taken.WITH)
    call = next((c for c in index.calls if c.line == line and not c.release), None)
    if call is not None:
        return _site(file, call.name, call.line, call.node, fn, index, Taken.ACQUIRE)
    return None


def waited_at(frames: list[Frame], site: int) -> LockSite | None:
    """The lock a thread waits for: taken at the line of `frames[site]` (its innermost
    application frame in a lock wait), or, when that frame is the threading module's own
    (`Condition.__enter__`), at its nearest caller outside it."""
    i = site
    while 0 <= i < len(frames):
        frame = frames[i]
        if not frame.native:
            if not frame.file.endswith(_THREADING):
                return acquired_at(frame.file, frame.line)
        i -= 1
    return None


def held_in_stack(frames: list[Frame], site: int = -1) -> tuple[LockSite, ...]:
    """Every lock the stack holds, innermost frame first. `site`: the index of the frame that is
    acquiring (its line's own `with`/`acquire()` is the wait, not a lock held); frames inside
    the threading module hold nothing of the application's."""
    held: list[LockSite] = []
    for i in range(len(frames) - 1, -1, -1):
        frame = frames[i]
        if frame.native or not frame.line or frame.file.endswith(_THREADING):
            continue
        found = held_at(frame.file, frame.line)
        if i == site:
            # A `with X:` on the waiting line is X being acquired, not held (held_at already
            # leaves header lines out); an `X.acquire()` on it likewise.
            found = tuple(s for s in found if s.line != frame.line)
        held.extend(found)
    return tuple(held)


def clear() -> None:
    _cache.clear()

// Types of the report page's script, for TypeScript's checker only (tsconfig.json here; run by
// scripts/test.sh). Never part of the page: diagnose/render/html.py inlines the PAGE_SCRIPT
// parts (*.js) and nothing else. The parts are plain scripts sharing one scope (html.py joins them
// inside one function), so the checker sees their top-level names as one global scope, as the
// page does; what is declared here is what that scope holds beyond them.

/** The page's data as prepare() (core.js) reads it from the embedded JSON: what every section's
 *  render function gets as `D`. */
type PageData = ReturnType<typeof prepare>;

/** One thread of the page's data, as prepare() reads it. */
type PageThread = PageData['threads'][number];

/** A node of the flame graph's tree (flame.js, buildTree): the samples of one frame under its
 *  callers, merged by function and file, or by line. */
interface FlameNode {
  id: number;
  key: number;
  frame: number;
  /** The frame's line; -1 when nodes of several lines were merged; null when unknown. */
  line: number | null;
  total: number;
  self: number;
  kids: Map<number, FlameNode> | null;
  parent: FlameNode | null;
  depth: number;
  sorted: FlameNode[] | null;
}

/** The flame graph's tree of one view (threads, states, by line or by function). */
interface FlameTree {
  root: FlameNode;
  nodes: FlameNode[];
  maxDepth: number;
}

/** What the flame graph shows (flame.js, renderFlame's `F`): the view chosen, the search, the
 *  trees built per view, the tree drawn and its elements. */
interface FlameView {
  thread: string;
  states: string;
  byLine: boolean;
  zoomKeys: number[];
  query: string;
  match: Uint8Array | null;
  cache: Map<string, FlameTree>;
  tree: FlameTree | null;
  drawnEls: HTMLElement[];
}

/** A column of sortableTable (core.js). */
interface TableColumn<Row = any> {
  label: string;
  value: (row: Row) => unknown;
  cell?: (row: Row) => Node | string | number | null | undefined | (Node | string)[];
  num?: boolean;
  descFirst?: boolean;
  ascFirst?: boolean;
  title?: string | null;
  cls?: string;
}

// How the sections talk to each other: the flame graph (flame.js) sets this once drawn, and the
// thread table and the event loops' table (timeline.js, loops.js) call it to show one thread.
declare namespace renderFlame {
  let showThread: ((index: number) => void) | undefined;
}

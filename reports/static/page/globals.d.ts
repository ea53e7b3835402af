// Types of the report page's script, for TypeScript's checker only (tsconfig.json here; run by
// scripts/test.sh). Never part of the page: diagnose/render/html.py inlines the PAGE_SCRIPT
// parts (*.js) and nothing else. The parts are plain scripts sharing one scope (html.py joins them
// inside one function), so the checker sees their top-level names as one global scope, as the
// page does; what is declared here is what that scope holds beyond them.

/** The page's data as prepare() (core.js) reads it from the embedded JSON: what every section's
 *  render function gets as `D`. What is `any` is JSON the sections read field by field. */
interface PageData {
  /** The report (diagnose/report/model), as JSON. */
  report: any;
  /** The thread states, in the vocabulary's order: a stack row's `state` indexes it. */
  states: string[];
  /** The frame categories: a frame's `cat` indexes it. */
  categories: string[];
  threads: PageThread[];
  frames: PageFrame[];
  stacks: PageStack[];
  /** Stack rows not drawn: malformed. */
  dropped: number;
  /** Threads of several processes: their labels carry the pid. */
  multiProcess: boolean;
  vocab: Vocabulary;
  generatedAt: string;
  /** Per finding, its evidence as labelled rows with units; null in older pages. */
  evidenceText: any[] | null;
  /** Per finding, its levers' and gain's words, as the page prints them. */
  gainText: Record<string, any>[];
  /** The observer's CPU beside the target's, in words; '' when the report has no such measure. */
  observerCpuText: string;
  /** The CPU account in words ({measured, summary, parts, notes}); null in older pages. */
  cpuAccountText: Record<string, any> | null;
  /** Evidence keys with no row of their own. */
  evidenceHidden: Set<string>;
  timeline: PageTimeline;
}

/** The report's words (its data's `vocabulary`, diagnose/model/vocab.py), as vocabularyOf()
 *  (core.js) reads them. */
interface Vocabulary {
  /** Lowest first. */
  severities: string[];
  critical: number | null;
  states: string[];
  stateColors: Record<string, string>;
  running: string[];
  waiting: string[];
  threadRoles: string[];
  processRoles: string[];
}

/** A thread of the report; `index` is its place in PageData.threads. */
interface PageThread {
  index: number;
  tid: any;
  name: string;
  role: string;
  pid: number | null;
  samples: number;
  /** Samples per state name. */
  states: Record<string, any>;
  /** The OS's counters of the thread (CPU time, run-queue wait, context switches), if read. */
  os: Record<string, any> | null;
}

/** A frame of the report's stack table; `cat` indexes PageData.categories (-1: none). */
interface PageFrame {
  name: string;
  file: string;
  line: number | null;
  cat: number;
}

/** A row of the report's stack table: its frames (indices of PageData.frames, outermost first),
 *  its thread (index of PageData.threads, -1: none), its state (index of PageData.states, -1:
 *  none) and its sample count. */
interface PageStack {
  frames: number[];
  thread: number;
  state: number;
  count: number;
}

/** The timeline's lanes (one per thread, runs of steps in one state) and its step. */
interface PageTimeline {
  /** Seconds per step. */
  interval: number;
  steps: number;
  lanes: Record<string, any>[];
}

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

/** The options of sortableTable (core.js). */
interface TableOptions<Row = any> {
  cls?: string;
  /** The column sorted first, and its direction. */
  sortCol?: number;
  sortDir?: 'asc' | 'desc';
  /** Attributes of a row's <tr>. */
  rowAttrs?: (row: Row) => Record<string, unknown>;
  /** A detail row kept under its row whatever the order, or null. */
  afterRow?: (row: Row, nCols: number) => HTMLTableRowElement | null;
}

// How the sections talk to each other: the flame graph (flame.js) sets this once drawn, and the
// thread table and the event loops' table (timeline.js, loops.js) call it to show one thread.
declare namespace renderFlame {
  let showThread: ((index: number) => void) | undefined;
}

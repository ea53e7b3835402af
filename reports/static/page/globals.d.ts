// Types of the report page's script, for TypeScript's checker only (tsconfig.json here; run by
// scripts/test.sh). Never part of the page: diagnose/render/html.py inlines the PAGE_SCRIPT
// parts (*.js) and nothing else. The parts are plain scripts sharing one scope (html.py joins them
// inside one function), so the checker sees their top-level names as one global scope, as the
// page does; what is declared here is what that scope holds beyond them.

/** The page's data as diagnose writes it (diagnose/render/html_data.py page_data, and
 *  render/html.py render_html): the JSON of `#diagnose-data`, as loadData() (core.js) reads it.
 *  The dataclasses' types are generated (report.gen.d.ts, namespace Model); the vocabulary is a
 *  plain dict (diagnose/vocab.py page_vocabulary). */
interface PageJson {
  /** The report, whole: the .json file's content. */
  report: Model.Report;
  /** Per finding, in report.findings' order: its evidence as labelled rows. */
  evidence_text: Model.EvidenceRow[][];
  /** Evidence keys shown another way than as a row. */
  evidence_hidden: string[];
  vocabulary: VocabularyJson;
  /** Per finding, in report.findings' order: its levers' and gain's words. */
  gain_text: Model.GainWords[];
  /** The observer's CPU beside the target's, in words; '' when not measured. */
  observer_cpu_text: string;
  /** Where the service's core-seconds went, in words; absent in pages written before it. */
  cpu_account_text?: Model.AccountWords;
}

/** The report's words as its data carries them (diagnose/vocab.py page_vocabulary). */
interface VocabularyJson {
  severities: string[];
  critical_score: number;
  states: string[];
  running: string[];
  waiting: string[];
  wait_kinds: string[];
  thread_roles: string[];
  process_roles: string[];
  confidences: string[];
}

/** The page's data as prepare() (core.js) reads it from the embedded JSON: what every section's
 *  render function gets as `D`. What is malformed is left out or made empty, so a value read
 *  from the report may be absent (Partial): the sections read it through obj() and arr(). */
interface PageData {
  /** The report (diagnose/report/model), as JSON; {} when the data has none. */
  report: Partial<Model.Report>;
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
  evidenceText: Model.EvidenceRow[][] | null;
  /** Per finding, its levers' and gain's words, as the page prints them. */
  gainText: Partial<Model.GainWords>[];
  /** The observer's CPU beside the target's, in words; '' when the report has no such measure. */
  observerCpuText: string;
  /** The CPU account in words ({measured, summary, parts, notes}); null in older pages. */
  cpuAccountText: Partial<Model.AccountWords> | null;
  /** Evidence keys with no row of their own. */
  evidenceHidden: Set<string>;
  timeline: PageTimeline;
}

/** What obj() (core.js) makes of a value of type T: the object it is, any of whose keys may be
 *  absent (a report read defensively), or {} when it is not an object (nor an array). */
type ObjOf<T> = unknown extends T ? Record<string, unknown>
  : Partial<Exclude<Extract<NonNullable<T>, object>, readonly unknown[]>>;

/** What arr() (core.js) makes of a value of type T: the array it is, or []. */
type ArrOf<T> = unknown extends T ? unknown[] : ElementOf<T>[];
type ElementOf<T> = T extends readonly (infer E)[] ? E : never;

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
  /** The thread's id, as the report has it (absent when malformed). */
  tid: number | undefined;
  name: string;
  role: string;
  pid: number | null;
  samples: number;
  /** Samples per state name. */
  states: Partial<Record<string, number>>;
  /** The OS's counters of the thread (CPU time, run-queue wait, context switches), if read. */
  os: Model.ThreadOs | null;
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
  lanes: Partial<Model.TimelineLane>[];
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

/** The attributes h() (core.js) sets on the element it makes: `class`; `text`, written as text
 *  nodes; `on`, event listeners; `css`, style properties; any other is an attribute, written as
 *  text (true: present, empty; null, undefined or false: not set). */
interface ElementAttrs {
  class?: string | null;
  text?: unknown;
  on?: Record<string, EventListener>;
  css?: Record<string, string>;
  [attribute: string]: unknown;
}

/** A fact of the run facts (verdict.js, renderFacts) shown when the report has it: where it is,
 *  its key there, its data-fact name, its label and how its value is written. */
type OptionalFact<T> = [Partial<T>, keyof T & string, string, string, (v: unknown) => string];

/** A Map the page asks only for keys it holds (the nodes of a graph by id, built before they are
 *  looked up): get() gives a value. */
interface FullMap<K, V> extends Map<K, V> {
  get(key: K): V;
}

/** A column of sortableTable (core.js). */
interface TableColumn<Row> {
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
interface TableOptions<Row> {
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

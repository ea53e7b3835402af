  // @ts-check
  // Report page script, part: the service structure (stages and edges). The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 10. service structure

  /** @typedef {ReturnType<typeof stageOf>} StageEntry */
  /** A wait-for edge as a row of its table, with its place in the report's list.
   *  @typedef {{ x: Partial<Model.Edge>, k: number }} EdgeRow */

  /** @type {Record<Model.StageRole, string>} */
  const STAGE_ROLES = {
    stage: 'stage', request: 'request', event_loop: 'event loop',
    supervisor: 'supervisor', idle: 'idle', other: 'other',
  };
  // kind -> [words between the waiter and the resource, explanation]
  /** @type {Record<Model.EdgeKind, [string, string]>} */
  const EDGE_KINDS = {
    starved: ['starved on', 'waits in get on its input queue for the stage that feeds it'],
    backpressure: ['backpressure on', 'blocked in put into a full queue until the stage that drains it takes an item'],
    result: ['waiting for', 'waits for the results of work it handed to another stage'],
    lock: ['waiting on', 'waits for a lock while the holder keeps it'],
    gil: ['waiting for', 'waits for the GIL while the holder runs Python'],
  };
  // [field, column label, words in a stage box, explanation]
  /** @type {[keyof Model.Stage, string, string, string][]} */
  const STAGE_WAITS = [
    ['blocked_put_share', 'Blocked on put', 'blocked on put', 'blocked putting into a full queue: the stage after it is slower'],
    ['starved_share', 'Starved on get', 'starved on get', 'waiting in get on an empty input queue: the stage before it is slower'],
    ['result_wait_share', 'Waiting for results', 'waiting for results', 'waiting for results another stage produces'],
  ];
  /** Whether `o` has its own key `k` (a word of the report that is one of the page's keys).
   *  @template {object} O @param {O} o @param {PropertyKey} k @returns {k is keyof O} */
  const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

  /** A stage of the structure as the page reads it: the stage, its place in the report's list,
   *  its name, role, thread count and queues.
   *  @param {Model.Stage} raw @param {number} i */
  function stageOf(raw, i) {
    const s = obj(raw);
    const names = (/** @type {unknown} */ v) => arr(v).map(str).filter((q) => q !== '');
    return {
      s, i, name: str(s.name) || str(s.function) || '?', role: str(s.role),
      threads: arr(s.tids).length, gets: names(s.gets), puts: names(s.puts),
    };
  }

  /** The stages of the pipeline in queue order: a stage that puts to queue Q before the stage
   *  that gets from Q. Stages are in it when a queue joins them to another stage (else, the
   *  stages). Ties, separate chains and cycles fall back to the list order, and a
   *  chain is kept together.
   *  @param {StageEntry[]} stages */
  function pipelineOrder(stages) {
    /** @type {Map<string, number[]>} */
    const producers = new Map();
    /** @type {Map<string, number[]>} */
    const consumers = new Map();
    /** @type {(m: Map<string, number[]>, q: string, k: number) => void} */
    const add = (m, q, k) => { if (!m.has(q)) m.set(q, []); /** @type {number[]} */ (m.get(q)).push(k); };
    stages.forEach((st, k) => {
      st.puts.forEach((q) => add(producers, q, k));
      st.gets.forEach((q) => add(consumers, q, k));
    });
    const next = stages.map(() => /** @type {number[]} */ ([]));
    const linked = new Set();
    for (const [q, ps] of producers) {
      for (const p of ps) {
        for (const c of consumers.get(q) || []) {
          if (p === c || next[p].includes(c)) continue;
          next[p].push(c);
          linked.add(p);
          linked.add(c);
        }
      }
    }
    let members = stages.map((st, k) => k).filter((k) => linked.has(k));
    if (members.length < 2) members = stages.map((st, k) => k).filter((k) => stages[k].role === 'stage');
    const inSet = new Set(members);
    /** @type {Map<number, number>} */
    const indeg = new Map(members.map((k) => [k, 0]));
    for (const p of members) for (const c of next[p]) if (inSet.has(c)) indeg.set(c, /** @type {number} */ (indeg.get(c)) + 1);
    for (const k of members) next[k].sort((a, b) => a - b);
    /** @type {number[]} */
    const order = [];
    const placed = new Set();
    let last = -1;
    while (order.length < members.length) {
      const free = (/** @type {number} */ k) => !placed.has(k) && inSet.has(k) && indeg.get(k) === 0;
      let pick = last >= 0 ? next[last].find(free) : undefined;
      if (pick === undefined) pick = members.find(free);
      // a cycle: one not placed yet (there is one while fewer than all are placed)
      if (pick === undefined) pick = /** @type {number} */ (members.find((k) => !placed.has(k)));
      placed.add(pick);
      order.push(pick);
      for (const c of next[pick]) if (inSet.has(c) && !placed.has(c)) indeg.set(c, /** @type {number} */ (indeg.get(c)) - 1);
      last = pick;
    }
    return order.map((k) => stages[k]);
  }

  /** @param {PageData} D */
  function renderStructure(D) {
    const section = $('structure');
    const root = $('structure-body');
    if (!section || !root) return;
    clear(root);
    const entries = arr(D.report.structure).map(obj)
      .map((e) => ({ e, stages: arr(e.stages).filter((s) => s && typeof s === 'object' && !Array.isArray(s)).map(stageOf) }))
      .filter((x) => x.stages.length);
    section.hidden = !entries.length;
    if (!entries.length) return;
    root.appendChild(h('p', { class: 'muted small', text:
      'Threads grouped by the function they loop on. Stages that take work from a queue are joined ' +
      'by it, drawn left to right in the order items flow. The bottleneck is the stage busiest for ' +
      'its threads while its neighbours wait on it (the utilization law). Shares are of each ' +
      'stage\u2019s own samples.' }));
    /** @type {Map<number, string>} */
    const roles = new Map();
    for (const p of arr(D.report.processes).map(obj)) if (isInt(p.pid)) roles.set(p.pid, str(p.role));
    entries.forEach((x, i) => root.appendChild(structureBlock(x.e, x.stages, i, roles, entries.length)));
  }

  /** @param {Partial<Model.Structure>} e @param {StageEntry[]} stages @param {number} i
   *  @param {Map<number, string>} roles @param {number} count */
  function structureBlock(e, stages, i, roles, count) {
    const pid = isInt(e.pid) ? e.pid : null;
    const bottleneck = e.bottleneck == null || str(e.bottleneck) === '' ? null : str(e.bottleneck);
    const pipeline = e.pipeline === true;
    const box = h('div', {
      class: 'structure', id: 'structure-' + i, 'data-pid': pid,
      'data-pipeline': pipeline ? 'true' : 'false', 'data-bottleneck': bottleneck,
    });
    const role = pid != null ? roles.get(pid) : '';
    if (pid != null || count > 1) {
      box.appendChild(h('h3', { class: 'structure-title' },
        pid != null ? 'Process ' + pid : 'A process',
        role ? h('span', { class: 'muted', text: ' \u00b7 ' + role }) : null));
    }
    const isBottleneck = (/** @type {StageEntry} */ st) => bottleneck != null && st.name === bottleneck;
    const neck = stages.find(isBottleneck);
    const order = pipeline ? pipelineOrder(stages) : [];
    let summary;
    if (pipeline && order.length) {
      summary = 'A pipeline of ' + order.length + ' stages joined by queues';
      summary += neck ? '; bottleneck: ' + neck.name + ' (' + neck.threads + ' thread' +
        (neck.threads === 1 ? '' : 's') + ', busy ' + fmtPct(neck.s.busy_share) + ').' : '; no bottleneck stood out.';
    } else {
      summary = stages.length + ' thread group' + (stages.length === 1 ? '' : 's') +
        ', not a pipeline: no two stages are joined by a queue.';
    }
    box.appendChild(h('p', { class: 'structure-summary', text: summary }));
    if (pipeline && order.length) box.appendChild(pipelineDiagram(order, isBottleneck, pid));

    box.appendChild(h('h4', { text: 'Stages' }));
    box.appendChild(stagesTable(stages, isBottleneck));
    /** @type {EdgeRow[]} */
    const edges = arr(e.edges).filter((x) => x && typeof x === 'object' && !Array.isArray(x))
      .map((x, k) => ({ x, k }));
    if (edges.length) {
      box.appendChild(h('h4', { text: 'Who waits for whom' }));
      box.appendChild(edgesTable(edges, bottleneck));
    } else {
      box.appendChild(h('p', { class: 'muted small edges-empty', text: 'No thread group waited on another.' }));
    }
    return box;
  }

  /** @param {StageEntry} st */
  function stageWaits(st) {
    /** @type {string[]} */
    const out = [];
    for (const [field, , words] of STAGE_WAITS) {
      const v = st.s[field];
      if (isNum(v) && v >= 0.01) out.push(words + ' ' + fmtPct(v));
    }
    return out.join(' \u00b7 ');
  }

  /** @param {StageEntry[]} order @param {(st: StageEntry) => boolean} isBottleneck
   *  @param {number | null} pid */
  function pipelineDiagram(order, isBottleneck, pid) {
    const names = order.map((st) => visStr(st.name));
    const diagram = h('div', {
      class: 'pipeline', role: 'group', 'data-stages': order.length,
      'aria-label': 'pipeline' + (pid != null ? ' of process ' + pid : '') + ': ' + names.join(' \u2192 '),
    });
    order.forEach((st, k) => {
      if (k) {
        const prev = order[k - 1];
        const queues = prev.puts.filter((q) => st.gets.includes(q));
        diagram.appendChild(h('div', {
          class: 'stage-arrow' + (queues.length ? '' : ' unlinked'), 'data-queue-count': queues.length,
          title: queues.length ? 'queue ' + queues.map(visStr).join(', ') : 'no queue between these two stages',
        },
        h('span', { class: 'mono queue-name', text: queues.join(', ') }),
        h('span', { class: 'arrow-line', 'aria-hidden': 'true' })));
      }
      diagram.appendChild(stageBox(st, isBottleneck(st), k));
    });
    return h('div', { class: 'pipeline-wrap' }, diagram);
  }

  /** @param {StageEntry} st @param {boolean} bottleneck @param {number} k */
  function stageBox(st, bottleneck, k) {
    const busy = isNum(st.s.busy_share) ? st.s.busy_share : null;
    const box = h('div', {
      class: 'stage-box' + (bottleneck ? ' bottleneck' : ''), 'data-stage': st.name, 'data-order': k,
      'data-role': st.role, 'data-threads': st.threads, 'data-busy-share': busy,
      'data-bottleneck': bottleneck ? 'true' : 'false',
      title: visStr(st.name) + (str(st.s.file) ? ' \u00b7 ' + visStr(fileLine(st.s.file, st.s.line)) : '') +
        (st.threads ? ' \u00b7 tids ' + arr(st.s.tids).map(str).join(', ') : ''),
    });
    if (bottleneck) box.appendChild(h('span', { class: 'tag bottleneck-tag', text: 'bottleneck' }));
    box.appendChild(h('div', { class: 'mono stage-name', text: st.name }));
    box.appendChild(h('div', { class: 'small stage-threads', text: st.threads + ' thread' + (st.threads === 1 ? '' : 's') }));
    const bar = h('span', { class: 'share-bar stage-bar', role: 'img', 'aria-label': 'busy ' + fmtPct(busy) });
    const fill = h('span', { class: 'share-fill' });
    fill.style.width = (busy == null ? 0 : Math.max(0, Math.min(1, busy)) * 100) + '%';
    bar.appendChild(fill);
    box.appendChild(h('div', { class: 'small stage-busy' }, bar, h('span', { class: 'stage-busy-pct', text: 'busy ' + fmtPct(busy) })));
    const waits = stageWaits(st);
    if (waits) box.appendChild(h('div', { class: 'small muted stage-waits', text: waits }));
    return box;
  }

  /** @param {StageEntry[]} stages @param {(st: StageEntry) => boolean} isBottleneck */
  function stagesTable(stages, isBottleneck) {
    const n = (/** @type {unknown} */ v) => (isNum(v) ? v : null);
    const queues = (/** @type {string[]} */ list) => (list.length ? h('span', { class: 'mono', text: list.join(', ') }) : h('span', { class: 'muted', text: '\u2014' }));
    const cols = /** @type {TableColumn<StageEntry>[]} */ ([
      {
        label: 'Stage', value: (st) => st.name, cls: 'stage-col',
        cell: (st) => h('div', { class: 'site' },
          h('div', { class: 'site-fn' }, h('span', { class: 'mono stage-cell-name', text: st.name }),
            isBottleneck(st) ? [' ', h('span', { class: 'tag bottleneck-tag', text: 'bottleneck' })] : null),
          str(st.s.file) ? h('div', { class: 'mono path small site-file', title: visStr(fileLine(st.s.file, st.s.line)),
            text: fileLine(basename(st.s.file), st.s.line) }) : null),
      },
      {
        label: 'Role', value: (st) => st.role, cls: 'nowrap',
        cell: (st) => h('span', {
          class: 'kind stage-role', 'data-kind': st.role,
          text: own(STAGE_ROLES, st.role) ? STAGE_ROLES[st.role] : st.role || '?',
        }),
      },
      {
        label: 'Threads', value: (st) => st.threads, num: true, title: 'sort by thread count',
        cell: (st) => h('span', { title: st.threads ? 'tids ' + arr(st.s.tids).map(str).join(', ') : null, text: String(st.threads) }),
      },
      {
        label: 'Busy', value: (st) => n(st.s.busy_share), num: true, cls: 'busy-col',
        cell: (st) => shareCell(st.s.busy_share), title: 'sort by busy share: running or runnable',
      },
    ]).concat(STAGE_WAITS.map(([field, label, , explain]) => ({
      label, value: (st) => n(st.s[field]), num: true, cls: 'wait-col',
      cell: (st) => shareCell(st.s[field]), title: 'sort by share ' + explain,
    }))).concat([
      { label: 'Queues in', value: (st) => st.gets.join(', '), cell: (st) => queues(st.gets), cls: 'queues-col' },
      { label: 'Queues out', value: (st) => st.puts.join(', '), cell: (st) => queues(st.puts), cls: 'queues-col' },
    ]);
    return sortableTable(cols, stages, {
      cls: 'stages',
      rowAttrs: (st) => ({
        class: 'stage-row' + (isBottleneck(st) ? ' bottleneck' : ''), 'data-index': st.i,
        'data-stage': st.name, 'data-role': st.role, 'data-threads': st.threads,
        'data-bottleneck': isBottleneck(st) ? 'true' : 'false',
      }),
    });
  }

  /** "decode_stage —backpressure on queue decoded→ model_stage"
   *  @param {Partial<Model.Edge>} x */
  function edgeText(x) {
    const kind = str(x.kind);
    const words = own(EDGE_KINDS, kind) ? EDGE_KINDS[kind][0] : (kind || 'waiting') + ' on';
    const holder = x.holder == null || str(x.holder) === '' ? null : str(x.holder);
    return h('span', { class: 'edge-text', title: own(EDGE_KINDS, kind) ? EDGE_KINDS[kind][1] : null },
      h('span', { class: 'mono edge-waiter', text: str(x.waiter) || '?' }),
      h('span', { class: 'edge-kind', 'data-kind': kind, text: ' \u2014' + words + ' ' }),
      h('span', { class: 'edge-resource', text: str(x.resource) || '?' }),
      h('span', { class: 'edge-arrow', text: '\u2192 ' }),
      holder != null ? h('span', { class: 'mono edge-holder', text: holder })
        : h('span', { class: 'muted edge-holder', title: 'the stage waited for was not seen', text: 'unknown' }));
  }

  /** @param {EdgeRow[]} edges @param {string | null} bottleneck */
  function edgesTable(edges, bottleneck) {
    /** @type {TableColumn<EdgeRow>[]} */
    const cols = [
      { label: 'Wait', value: (r) => str(r.x.waiter), cell: (r) => edgeText(r.x), cls: 'edge-col' },
      {
        label: 'Share', value: (r) => (isNum(r.x.share) ? r.x.share : null), num: true,
        cell: (r) => shareCell(r.x.share), title: 'sort by share of the waiter\u2019s samples',
      },
    ];
    return sortableTable(cols, edges, {
      cls: 'edges',
      rowAttrs: (r) => ({
        class: 'edge-row', 'data-kind': str(r.x.kind), 'data-index': r.k,
        'data-share': isNum(r.x.share) ? r.x.share : '',
        'data-on-bottleneck': bottleneck != null && str(r.x.holder) === bottleneck ? 'true' : 'false',
      }),
    });
  }

  // @ts-check
  // Report page script, part: the wait-for graph (who waits for what, how long, who holds it), drawn as SVG. The parts
  // share one scope: diagnose/render/html.py joins them in PAGE_SCRIPT order inside one strict-mode function.

  // ------------------------------------------------------------------ 11. wait-for graph

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const WG_MAX_NODES = 40;  // drawn; the others are counted under the drawing and listed in the table
  const WG_NODE_W = 210;    // narrowed to WG_MIN_W, and the gaps to WG_MIN_GAP, to fit the card
  const WG_MIN_W = 170;
  const WG_NODE_H = 58;
  const WG_COL_GAP = 130;   // room for the edge labels between columns
  const WG_MIN_GAP = 84;
  const WG_ROW_GAP = 30;
  const WG_PAD = 14;
  const WG_TOP = 24;        // room for the tags above the top row
  const WG_HANG = '#c62f38';
  const WG_NECK = '#e8a000';
  const WG_EDGE = '#6e7781';
  /** A node of the drawing: the report's node checked, with the thread time waited through it and
   *  its knot's index (-1: none).
   *  @typedef {ReturnType<typeof wgNodeOf>} WgNode */
  /** An edge of the drawing; `back`: it closes a cycle; `knot`: both ends are in one knot.
   *  @typedef {{ k: number, source: string, target: string, kind: string, share: number,
   *    seconds: number, back: boolean, knot: boolean }} WgEdge */
  /** @typedef {NonNullable<ReturnType<typeof waitGraphOf>>} WgGraph */
  /** @typedef {ReturnType<typeof wgPick>} WgPicked */
  /** Where a node is drawn: its top left corner and its column.
   *  @typedef {{ x: number, y: number, layer: number }} WgPos */

  // resource kind (report/model/wait_graph.py ResourceKind) -> [words, fill, stroke, shape]
  /** @type {Record<Model.ResourceKind, [string, string, string, string]>} */
  const WG_RESOURCES = {
    gil: ['the GIL', '#fdf0e0', '#c76f0a', 'hexagon'],
    lock: ['lock', '#f9e9f2', '#a33f7a', 'hexagon'],
    file_lock: ['file lock', '#efe8fb', '#6f46b8', 'hexagon'],
    pipe: ['pipe', '#e2f3f5', '#1f8a99', 'pill'],
    socket: ['socket', '#e7eefb', '#3f67c2', 'pill'],
    listen: ['listening socket', '#f1f3f6', '#6e7781', 'pill'],
    child: ['child process', '#e9f5eb', '#3f9b4a', 'pill'],
    sleep: ['timer', '#f1f3f6', '#6e7781', 'pill'],
    poll: ['poll', '#e7eefb', '#5b7bc4', 'pill'],
    capacity: ['capacity', '#fbf4da', '#9a7b06', 'hexagon'],
    future: ['future', '#fbf4da', '#9a7b06', 'pill'],
    pool: ['pool', '#fbf4da', '#9a7b06', 'hexagon'],
    cpu_quota: ['CPU quota', '#fdf0e0', '#c46a00', 'slant'],
    other: ['resource', '#f1f3f6', '#6e7781', 'pill'],
  };
  // this drawing's node width and column gap (wgLayout fits them to the card's width)
  const wgSize = { w: WG_NODE_W, gap: WG_COL_GAP };
  /** @type {Record<Model.GraphEdgeKind, string>} */
  const WG_RELATIONS = { waits_for: 'waits for', held_by: 'held by', served_by: 'served by' };

  /** An SVG element. Attributes are geometry and presentation only: a URL or handler is refused.
   *  @template {keyof SVGElementTagNameMap} K
   *  @param {K} tag @param {Record<string, unknown> | null} [attrs] @param {...(Node | null)} kids
   *  @returns {SVGElementTagNameMap[K]} */
  function svgEl(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG_NS, tag);
    const a = attrs || {};
    for (const k of Object.keys(a)) {
      const v = a[k];
      if (v == null || v === false) continue;
      if (/^on/i.test(k) || /href$/i.test(k) || FORBIDDEN_ATTRS.has(k.toLowerCase())) throw new Error('refused attribute ' + k);
      e.setAttribute(k, str(v));
    }
    for (const kid of kids) if (kid) e.appendChild(kid);
    return e;
  }

  /** An SVG <text> of untrusted `s` (invisible characters shown as markers), cut with an ellipsis
   *  to `maxW` px when the browser can measure it.
   *  @param {Node} parent @param {unknown} s @param {number} maxW @param {Record<string, unknown>} attrs */
  function svgText(parent, s, maxW, attrs) {
    const t = svgEl('text', attrs);
    const full = visStr(s);
    t.textContent = full;
    parent.appendChild(t);
    let width = 0;
    try { width = t.getComputedTextLength(); } catch (e) { width = 0; }
    if (maxW > 0 && !(width > 0) && full.length > maxW / 6.5) {
      t.textContent = full.slice(0, Math.max(1, Math.floor(maxW / 6.5) - 1)) + '\u2026';
    } else if (maxW > 0 && width > maxW) {
      let lo = 0;
      let hi = full.length;
      while (lo < hi) {  // the longest cut that fits
        const mid = Math.ceil((lo + hi) / 2);
        t.textContent = full.slice(0, mid) + '\u2026';
        if (t.getComputedTextLength() <= maxW) lo = mid; else hi = mid - 1;
      }
      t.textContent = full.slice(0, lo) + '\u2026';
    }
    return t;
  }

  /** @param {Partial<Model.WaitNode>} n @param {number} i */
  function wgNodeOf(n, i) {
    return {
      id: str(n.id), i, kind: str(n.kind), label: str(n.label) || str(n.id),
      pid: isInt(n.pid) ? n.pid : null,
      threads: isNum(n.threads) && n.threads > 0 ? Math.round(n.threads) : 0,
      resource: n.resource == null ? '' : str(n.resource), site: str(n.site),
      running: isNum(n.running_share) ? n.running_share : null, detail: str(n.detail),
      seconds: 0, knot: -1,
    };
  }

  /** The report's wait_graph, checked: nodes by id, the edges between known nodes, knots as
   *  node sets, the bottleneck when it is a node. null when there is nothing to draw.
   *  @param {Model.WaitGraph | undefined} raw */
  function waitGraphOf(raw) {
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return null;
    /** @type {FullMap<string, WgNode>} */
    const nodes = new Map();
    arr(raw.nodes).map(obj).forEach((n, i) => {
      const node = wgNodeOf(n, i);
      if (node.id !== '' && !nodes.has(node.id)) nodes.set(node.id, node);
    });
    const edges = arr(raw.edges).map(obj).map((e, k) => ({
      k, source: str(e.source), target: str(e.target), kind: str(e.kind) || 'waits_for',
      share: isNum(e.share) ? Math.max(0, Math.min(1, e.share)) : 0,
      seconds: isNum(e.thread_seconds) && e.thread_seconds > 0 ? e.thread_seconds : 0,
      back: false, knot: false,
    })).filter((e) => e.source !== e.target && nodes.has(e.source) && nodes.has(e.target));
    if (!edges.length) return null;
    const knots = arr(raw.knots).map((k) => arr(k).map(str).filter((id) => nodes.has(id))).filter((k) => k.length);
    knots.forEach((k, q) => k.forEach((id) => { if (nodes.get(id).knot < 0) nodes.get(id).knot = q; }));
    for (const e of edges) {
      const s = nodes.get(e.source);
      const t = nodes.get(e.target);
      s.seconds += e.seconds;
      t.seconds += e.seconds;
      e.knot = s.knot >= 0 && s.knot === t.knot;
    }
    const neck = raw.bottleneck == null ? '' : str(raw.bottleneck);
    return {
      nodes, edges, knots, bottleneck: nodes.has(neck) ? neck : null,
      summary: str(raw.summary), observations: isNum(raw.observations) ? raw.observations : 0,
    };
  }

  /** At most WG_MAX_NODES nodes to draw: the bottleneck and what touches it, the knots, then the
   *  nodes with the most thread time waited through them.
   *  @param {WgGraph} G */
  function wgPick(G) {
    const linked = new Set();
    G.edges.forEach((e) => { linked.add(e.source); linked.add(e.target); });
    const first = new Set();
    if (G.bottleneck) {
      first.add(G.bottleneck);
      G.edges.forEach((e) => {
        if (e.source === G.bottleneck) first.add(e.target);
        if (e.target === G.bottleneck) first.add(e.source);
      });
    }
    G.knots.forEach((k) => k.forEach((id) => first.add(id)));
    const ranked = Array.from(linked).map((id) => G.nodes.get(id)).sort((a, b) =>
      (first.has(b.id) ? 1 : 0) - (first.has(a.id) ? 1 : 0) || b.seconds - a.seconds || a.i - b.i);
    const keep = new Set(ranked.slice(0, WG_MAX_NODES).map((n) => n.id));
    return {
      ids: ranked.filter((n) => keep.has(n.id)).map((n) => n.id),
      edges: G.edges.filter((e) => keep.has(e.source) && keep.has(e.target)),
      hiddenNodes: ranked.length - keep.size,
    };
  }

  /** Longest-path layers, left to right along the edges; an edge that closes a cycle (found by a
   *  depth-first walk) is marked `back` and left out. A node nothing leads to sits just left of
   *  the nearest node it points at. Empty layers are closed up.
   *  @param {string[]} ids @param {WgEdge[]} edges */
  function wgLayers(ids, edges) {
    const out = /** @type {FullMap<string, WgEdge[]>} */ (new Map(ids.map((id) => [id, []])));
    const into = /** @type {FullMap<string, number>} */ (new Map(ids.map((id) => [id, 0])));
    edges.forEach((e) => { out.get(e.source).push(e); into.set(e.target, into.get(e.target) + 1); });
    const seen = new Map();  // 1: on the walk's path, 2: done
    /** @type {string[]} */
    const post = [];
    for (const start of ids.filter((id) => into.get(id) === 0).concat(ids)) {
      if (seen.has(start)) continue;
      seen.set(start, 1);
      /** @type {[string, number][]} */
      const stack = [[start, 0]];
      while (stack.length) {
        const top = stack[stack.length - 1];
        const list = out.get(top[0]);
        if (top[1] < list.length) {
          const e = list[top[1]++];
          const s = seen.get(e.target);
          if (s === 1) e.back = true;
          else if (!s) { seen.set(e.target, 1); stack.push([e.target, 0]); }
        } else {
          seen.set(top[0], 2);
          post.push(top[0]);
          stack.pop();
        }
      }
    }
    const layer = /** @type {FullMap<string, number>} */ (new Map(ids.map((id) => [id, 0])));
    for (const id of post.reverse()) {
      for (const e of out.get(id)) if (!e.back) layer.set(e.target, Math.max(layer.get(e.target), layer.get(id) + 1));
    }
    const reached = new Set(edges.filter((e) => !e.back).map((e) => e.target));
    for (const id of ids) {
      const next = out.get(id).filter((e) => !e.back).map((e) => layer.get(e.target));
      if (!reached.has(id) && next.length) layer.set(id, Math.max(0, Math.min(...next) - 1));
    }
    const used = Array.from(new Set(layer.values())).sort((a, b) => a - b);
    const renumber = /** @type {FullMap<number, number>} */ (new Map(used.map((l, k) => [l, k])));
    for (const id of ids) layer.set(id, renumber.get(layer.get(id)));
    return layer;
  }

  /** Node positions: columns by layer, each column centred, its order by the mean height of the
   *  node's neighbours in the columns already placed (four sweeps, alternating direction).
   *  @param {WgGraph} G @param {string[]} ids @param {WgEdge[]} edges @param {number} avail */
  function wgLayout(G, ids, edges, avail) {
    const layer = wgLayers(ids, edges);
    const nCols = Math.max(...layer.values()) + 1;
    const room = (avail > 0 ? avail : 1200) - WG_PAD * 2;
    wgSize.gap = nCols > 1 ? Math.max(WG_MIN_GAP, Math.min(WG_COL_GAP, (room - nCols * WG_NODE_W) / (nCols - 1))) : WG_COL_GAP;
    wgSize.w = Math.max(WG_MIN_W, Math.min(WG_NODE_W, (room - (nCols - 1) * wgSize.gap) / nCols));
    const cols = Array.from({ length: nCols }, () => /** @type {string[]} */ ([]));
    ids.forEach((id) => cols[layer.get(id)].push(id));
    const tallest = Math.max(...cols.map((c) => c.length));
    const rowH = WG_NODE_H + WG_ROW_GAP;
    /** @type {FullMap<string, number>} */
    const y = new Map();
    const place = (/** @type {number} */ L) => {
      const top = ((tallest - cols[L].length) * rowH) / 2;
      cols[L].forEach((id, k) => y.set(id, top + k * rowH));
    };
    cols.forEach((c, L) => place(L));
    const nbrs = /** @type {FullMap<string, string[]>} */ (new Map(ids.map((id) => [id, []])));
    edges.forEach((e) => { nbrs.get(e.source).push(e.target); nbrs.get(e.target).push(e.source); });
    for (let pass = 0; pass < 4; pass++) {
      const ltr = pass % 2 === 0;
      const seq = cols.map((c, L) => L);
      if (!ltr) seq.reverse();
      for (const L of seq.slice(1)) {
        /** @type {FullMap<string, number>} */
        const key = new Map();
        for (const id of cols[L]) {
          const ref = nbrs.get(id).filter((m) => (ltr ? layer.get(m) < L : layer.get(m) > L));
          key.set(id, ref.length ? ref.reduce((a, m) => a + y.get(m), 0) / ref.length : y.get(id));
        }
        cols[L].sort((a, b) => key.get(a) - key.get(b) || y.get(a) - y.get(b));
        place(L);
      }
    }
    const pos = /** @type {FullMap<string, WgPos>} */ (new Map(ids.map((id) => [id, {
      x: WG_PAD + layer.get(id) * (wgSize.w + wgSize.gap), y: WG_TOP + y.get(id), layer: layer.get(id),
    }])));
    return {
      pos, width: Math.ceil(WG_PAD * 2 + nCols * wgSize.w + (nCols - 1) * wgSize.gap),
      height: WG_TOP + tallest * rowH - WG_ROW_GAP + WG_PAD,
    };
  }

  /** @param {PageData} D */
  function renderWaitGraph(D) {
    const section = $('wait-graph');
    const root = $('wait-graph-body');
    if (!section || !root) return;
    clear(root);
    const G = waitGraphOf(D.report.wait_graph);
    section.hidden = !G;
    if (!G) return;
    if (G.summary) root.appendChild(h('p', { class: 'wg-summary', id: 'wait-graph-summary', text: G.summary }));
    G.knots.forEach((k, q) => root.appendChild(h('p', { class: 'wg-knot-note', 'data-knot': q },
      h('span', { class: 'tag wg-hang-tag', text: 'hang' }), ' ',
      k.map((id) => G.nodes.get(id).label).join(', ') +
      (k.length === 1 ? ' waits' : ' wait only on each other') + ', and none of them runs.')));
    root.appendChild(h('p', { class: 'muted small', text:
      'Who waits for what, as the kernel saw every thread: waiters on the left, what they wait on in ' +
      'the middle, who holds or serves it on the right. An arrow\u2019s width is the share of its ' +
      'waiters\u2019 time; its label, that share and the thread-seconds waited. Dashed: held by or ' +
      'served by (the share of the observations). Hover a box for the kernel\u2019s detail.' }));
    const picked = wgPick(G);
    const wrap = h('div', { class: 'wg-wrap' });
    root.appendChild(wrap);
    drawWaitGraph(G, picked, wrap);
    root.appendChild(wgLegend(G, picked.ids));
    const hiddenEdges = G.edges.length - picked.edges.length;
    if (picked.hiddenNodes) {
      root.appendChild(h('p', { class: 'muted small', id: 'wait-graph-more', text:
        'Drawn: the ' + picked.ids.length + ' nodes with the most time waited through them; ' +
        picked.hiddenNodes + ' more node' + (picked.hiddenNodes === 1 ? '' : 's') + ' and ' + hiddenEdges +
        ' edge' + (hiddenEdges === 1 ? '' : 's') + ' are in the table below.' }));
    }
    if (G.observations) {
      root.appendChild(h('p', { class: 'muted small', text: 'From ' + fmtInt(G.observations) +
        ' kernel observations (threads \u00d7 ticks).' }));
    }
    const table = h('details', { class: 'wg-table' },
      h('summary', { text: 'All ' + G.edges.length + ' edge' + (G.edges.length === 1 ? '' : 's') + ' as a table' }),
      wgEdgesTable(G));
    if (picked.hiddenNodes) table.open = true;
    root.appendChild(table);
  }

  /** @param {WgNode} n */
  function wgWords(n) {
    if (n.kind === 'resource') {
      const words = own(WG_RESOURCES, n.resource) ? WG_RESOURCES[n.resource][0] : n.resource || 'resource';
      // a child resource's pid is its parent's (the process waiting in wait4), not the child's
      const whose = n.resource === 'child' ? ' \u00b7 of pid ' : ' \u00b7 pid ';
      return words + (n.pid != null ? whose + n.pid : '');
    }
    const running = n.running != null ? ' \u00b7 running ' + fmtPct(n.running) : '';
    if (n.kind === 'process') return 'process' + (n.pid != null ? ' ' + n.pid : '') + running;
    if (n.kind === 'tasks') return n.threads + ' task' + (n.threads === 1 ? '' : 's') + (n.pid != null ? ' \u00b7 pid ' + n.pid : '');
    return n.threads + ' thread' + (n.threads === 1 ? '' : 's') + running;
  }

  /** @param {WgGraph} G @param {WgNode} n @returns {(string | string[] | null)[]} */
  function wgTip(G, n) {
    return [
      n.label, ['is', wgWords(n)], n.pid != null ? ['pid', String(n.pid)] : null,
      n.site ? ['site', n.site] : null, n.detail ? ['detail', n.detail] : null,
      ['waited through', fmtSec(n.seconds, n.seconds) + ' of thread time'],
      G.bottleneck === n.id ? ['bottleneck', 'what the most thread time waits for'] : null,
      n.knot >= 0 ? ['hang', 'waits only on the other nodes of its knot; none of them runs'] : null,
    ];
  }

  /** The outline of a node of kind `n` at 0,0 (wgSize.w x WG_NODE_H), and the width its text
   *  may take on a line whose glyphs span `top`..`bottom`: a pill's or a hexagon's sides close
   *  in towards its top and bottom, so each line gets the width the shape has at that line's
   *  height (a child's "pid 9538" was cut at the width of the pill's narrowest line).
   *  @param {WgNode} n @param {Record<string, unknown>} attrs
   *  @returns {[SVGElement, (top: number, bottom: number) => number]} */
  function wgShape(n, attrs) {
    const W = wgSize.w;
    const H = WG_NODE_H;
    const pad = 10;
    // the farther of a line's two edges from the node's middle height
    const off = (/** @type {number} */ top, /** @type {number} */ bottom) => Math.max(Math.abs(top - H / 2), Math.abs(bottom - H / 2));
    if (n.kind === 'resource') {
      const shape = own(WG_RESOURCES, n.resource) ? WG_RESOURCES[n.resource][3] : 'pill';
      const c = 14;
      if (shape === 'hexagon') {
        return [svgEl('polygon', { points: [[c, 0], [W - c, 0], [W, H / 2], [W - c, H], [c, H], [0, H / 2]].join(' '), ...attrs }),
          (top, bottom) => W - 2 * c * Math.min(1, off(top, bottom) / (H / 2)) - pad];
      }
      if (shape === 'slant') return [svgEl('polygon', { points: [[c, 0], [W, 0], [W - c, H], [0, H]].join(' '), ...attrs }), () => W - 2 * c - 8];
      const r = H / 2;
      return [svgEl('rect', { width: W, height: H, rx: r, ...attrs }),
        (top, bottom) => W - 2 * r + 2 * Math.sqrt(Math.max(0, r * r - off(top, bottom) ** 2)) - pad];
    }
    const rx = n.kind === 'process' ? 3 : 10;
    return [svgEl('rect', { width: W, height: H, rx, 'stroke-dasharray': n.kind === 'tasks' ? '5 3' : null, ...attrs }), () => W - 18];
  }

  /** A small pill above a node's top edge: "bottleneck", "hang".
   *  @param {SVGElement} g @param {string} text @param {number} x @param {string} fill
   *  @param {string} stroke @param {string} color @param {string} cls */
  function wgTag(g, text, x, fill, stroke, color, cls) {
    const t = svgEl('g', { class: cls });
    const w = text.length * 6.4 + 12;
    t.appendChild(svgEl('rect', { x: x - w / 2, y: -10, width: w, height: 16, rx: 8, fill, stroke }));
    const label = svgEl('text', { x, y: 2, 'text-anchor': 'middle', class: 'wg-tag-text', fill: color });
    label.textContent = text;
    t.appendChild(label);
    g.appendChild(t);
  }

  /** @param {WgGraph} G @param {WgNode} n @param {WgPos} p @param {SVGElement} svg */
  function wgNode(G, n, p, svg) {
    const neck = G.bottleneck === n.id;
    const hang = n.knot >= 0;
    const res = n.kind === 'resource' ? (own(WG_RESOURCES, n.resource) ? WG_RESOURCES[n.resource] : WG_RESOURCES.other) : null;
    const g = svgEl('g', {
      class: 'wg-node' + (neck ? ' bottleneck' : '') + (hang ? ' hang' : ''), transform: 'translate(' + p.x + ',' + p.y + ')',
      'data-id': n.id, 'data-kind': n.kind, 'data-resource': n.resource || null, 'data-threads': n.threads,
      'data-bottleneck': neck ? 'true' : 'false', 'data-knot': hang ? 'true' : 'false',
      role: 'img', 'aria-label': visStr(n.label) + ': ' + wgWords(n) + (neck ? ', the bottleneck' : '') + (hang ? ', in a hang' : ''),
    });
    svg.appendChild(g);
    if (neck) g.appendChild(svgEl('rect', { class: 'wg-halo', x: -7, y: -7, width: wgSize.w + 14, height: WG_NODE_H + 14, rx: 16, fill: WG_NECK, 'fill-opacity': 0.22, stroke: WG_NECK, 'stroke-width': 2 }));
    const fill = res ? res[1] : hang ? '#fdeced' : n.kind === 'process' ? '#f6f7f9' : '#ffffff';
    const stroke = hang ? WG_HANG : res ? res[2] : '#59636e';
    const [outline, inner] = wgShape(n, { class: 'wg-shape', fill, stroke, 'stroke-width': hang || neck ? 2.6 : n.kind === 'process' ? 2 : 1.4 });
    g.appendChild(outline);
    const mid = wgSize.w / 2;
    // baselines 19, 35 and 50; each line's glyphs from ~10 px above its baseline to ~3 below
    svgText(g, n.label, inner(9, 22), { x: mid, y: 19, 'text-anchor': 'middle', class: 'wg-label' });
    svgText(g, wgWords(n), inner(26, 38), { x: mid, y: 35, 'text-anchor': 'middle', class: 'wg-words' });
    const third = n.site || (res ? n.detail : '');
    if (third) svgText(g, third, inner(42, 52), { x: mid, y: 50, 'text-anchor': 'middle', class: 'wg-site' });
    if (neck) wgTag(g, 'bottleneck', wgSize.w - 48, '#fff8e6', WG_NECK, '#7a4f00', 'wg-bottleneck-tag');
    if (hang) wgTag(g, 'hang', 30, WG_HANG, WG_HANG, '#fff', 'wg-hang');
    g.addEventListener('mouseenter', (ev) => tip.show(wgTip(G, n), ev));
    g.addEventListener('mousemove', (ev) => tip.move(ev));
    g.addEventListener('mouseleave', () => tip.hide());
  }

  /** An edge's label, two short lines: "71.0%" over "28.40 s"; "held by" over "97.0%".
   *  @param {WgEdge} e */
  function wgEdgeLabel(e) {
    const pct = fmtPct(e.share);
    const secs = e.seconds > 0 ? fmtSec(e.seconds, e.seconds) : '';
    if (e.kind === 'waits_for' || !own(WG_RELATIONS, e.kind)) return [pct, secs];
    // a holder named with no measured share (a pipe's other end, a capacity's threads): no 0%
    return [WG_RELATIONS[e.kind], e.share > 0 ? pct + (secs ? ' \u00b7 ' + secs : '') : ''];
  }

  /** Where each edge leaves its source and enters its target: spread over the node's side in
   *  the order of the node at the other end, so parallel edges do not overlap.
   *  @param {WgEdge[]} edges @param {FullMap<string, WgPos>} pos */
  function wgPorts(edges, pos) {
    /** @type {FullMap<WgEdge, { source: number, target: number }>} */
    const offs = new Map();
    /** @type {(list: WgEdge[], end: 'source' | 'target', other: 'source' | 'target') => void} */
    const spread = (list, end, other) => {
      list.sort((a, b) => pos.get(a[other]).y - pos.get(b[other]).y || a.k - b.k);
      const span = Math.min(WG_NODE_H * 0.6, (list.length - 1) * 9);
      list.forEach((e, j) => {
        // (both ends are set before the edge is drawn: every edge is in both lists below)
        const o = offs.get(e) || /** @type {{ source: number, target: number }} */ ({});
        o[end] = list.length > 1 ? -span / 2 + (j * span) / (list.length - 1) : 0;
        offs.set(e, o);
      });
    };
    /** @type {FullMap<string, WgEdge[]>} */
    const bySource = new Map();
    /** @type {FullMap<string, WgEdge[]>} */
    const byTarget = new Map();
    for (const e of edges) {
      if (e.back) { offs.set(e, { source: 0, target: 0 }); continue; }
      if (!bySource.has(e.source)) bySource.set(e.source, []);
      if (!byTarget.has(e.target)) byTarget.set(e.target, []);
      bySource.get(e.source).push(e);
      byTarget.get(e.target).push(e);
    }
    bySource.forEach((list) => spread(list, 'source', 'target'));
    byTarget.forEach((list) => spread(list, 'target', 'source'));
    return offs;
  }

  /** @param {WgGraph} G @param {WgPicked} picked @param {HTMLElement} wrap */
  function drawWaitGraph(G, picked, wrap) {
    const { pos, width, height: baseHeight } = wgLayout(G, picked.ids, picked.edges, wrap.clientWidth);
    const backs = picked.edges.filter((e) => e.back).length;
    const height = baseHeight + (backs ? 26 + backs * 14 : 0);
    const svg = svgEl('svg', {
      class: 'wg-svg', width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'group',
      'aria-label': 'wait-for graph' + (G.summary ? ': ' + visStr(G.summary) : ''),
      'data-nodes': picked.ids.length, 'data-edges': picked.edges.length,
    });
    wrap.appendChild(svg);
    const edgeLayer = svgEl('g', { class: 'wg-edges' });
    const labelLayer = svgEl('g', { class: 'wg-edge-labels' });
    const nodeLayer = svgEl('g', { class: 'wg-nodes' });
    svg.appendChild(edgeLayer);
    svg.appendChild(labelLayer);
    svg.appendChild(nodeLayer);
    const offs = wgPorts(picked.edges, pos);
    let below = baseHeight - WG_PAD + 20;
    // heavier edges drawn last, on top
    const order = picked.edges.slice().sort((a, b) => a.share - b.share || a.k - b.k);
    for (const e of order) {
      const s = pos.get(e.source);
      const t = pos.get(e.target);
      const w = 1.4 + 7 * e.share;
      const head = Math.max(7, w * 1.6);
      const toNeck = G.bottleneck === e.target && e.kind === 'waits_for';
      const color = e.knot ? WG_HANG : toNeck ? '#9a6500' : WG_EDGE;
      let d;
      let arrow;
      let lx;
      let ly;
      if (!e.back) {
        const x0 = s.x + wgSize.w;
        const y0 = s.y + WG_NODE_H / 2 + offs.get(e).source;
        const x2 = t.x;
        const y1 = t.y + WG_NODE_H / 2 + offs.get(e).target;
        const x1 = x2 - head;
        const dx = Math.max(24, (x1 - x0) / 2);
        d = 'M' + x0 + ',' + y0 + ' C' + (x0 + dx) + ',' + y0 + ' ' + (x1 - dx) + ',' + y1 + ' ' + x1 + ',' + y1;
        arrow = [[x2, y1], [x1, y1 - head * 0.6], [x1, y1 + head * 0.6]];
        lx = (x0 + x1) / 2;
        ly = (y0 + y1) / 2;
      } else {
        // a cycle's closing edge: under the drawing, from the source's bottom to the target's
        below += 14;
        const x0 = s.x + wgSize.w / 2 + 20;
        const y0 = s.y + WG_NODE_H;
        const x1 = t.x + wgSize.w / 2 - 20;
        const y2 = t.y + WG_NODE_H;
        const y1 = y2 + head;
        d = 'M' + x0 + ',' + y0 + ' C' + x0 + ',' + below + ' ' + x1 + ',' + below + ' ' + x1 + ',' + y1;
        arrow = [[x1, y2], [x1 - head * 0.6, y1], [x1 + head * 0.6, y1]];
        lx = (x0 + x1) / 2;
        ly = (y0 + 6 * below + y1) / 8;
      }
      const relation = own(WG_RELATIONS, e.kind) ? WG_RELATIONS[e.kind] : e.kind;
      const g = svgEl('g', {
        class: 'wg-edge' + (e.knot ? ' hang' : '') + (e.back ? ' back' : ''), 'data-source': e.source, 'data-target': e.target,
        'data-kind': e.kind, 'data-share': e.share, 'data-knot': e.knot ? 'true' : 'false',
        'data-to-bottleneck': G.bottleneck === e.target ? 'true' : 'false',
      });
      g.appendChild(svgEl('path', {
        class: 'wg-line', d, fill: 'none', stroke: color, 'stroke-width': w, 'stroke-opacity': 0.8,
        'stroke-dasharray': e.kind === 'waits_for' ? null : (4 + w) + ' ' + (3 + w / 2),
      }));
      g.appendChild(svgEl('polygon', { class: 'wg-arrow', points: arrow.join(' '), fill: color }));
      edgeLayer.appendChild(g);
      const label = svgEl('g', { class: 'wg-edge-tag' });
      labelLayer.appendChild(label);
      const [top, bottom] = wgEdgeLabel(e);
      const text = svgEl('g', { class: 'wg-edge-label' + (toNeck || e.knot ? ' strong' : ''), fill: e.knot ? WG_HANG : '#3d444d' });
      label.appendChild(text);
      svgText(text, top, 0, { x: lx, y: bottom ? ly - 2 : ly + 4, 'text-anchor': 'middle' });
      if (bottom) svgText(text, bottom, 0, { x: lx, y: ly + 11, 'text-anchor': 'middle', class: 'wg-edge-sub' });
      /** @type {DOMRect | null} */
      let box = null;
      try { box = text.getBBox(); } catch (err) { box = null; }
      if (box && box.width > 0) {
        label.insertBefore(svgEl('rect', {
          x: box.x - 3, y: box.y - 1, width: box.width + 6, height: box.height + 2, rx: 3,
          fill: '#fff', 'fill-opacity': 0.92, stroke: e.knot ? WG_HANG : '#d8dee4', 'stroke-width': 0.8,
        }), text);
      }
      const lines = [G.nodes.get(e.source).label + ' ' + relation + ' ' + G.nodes.get(e.target).label,
        [e.kind === 'waits_for' ? 'of its time' : 'of observations', fmtPct(e.share)],
        e.seconds > 0 ? ['thread time', fmtSec(e.seconds, e.seconds)] : null,
        e.knot ? ['hang', 'part of a knot: nothing in it runs'] : null];
      for (const el of [g, label]) {
        el.addEventListener('mouseenter', (ev) => tip.show(lines, ev));
        el.addEventListener('mousemove', (ev) => tip.move(ev));
        el.addEventListener('mouseleave', () => tip.hide());
      }
    }
    for (const id of picked.ids) wgNode(G, G.nodes.get(id), pos.get(id), nodeLayer);
  }

  /** @param {WgGraph} G @param {string[]} ids */
  function wgLegend(G, ids) {
    const box = h('div', { class: 'legend wg-legend', 'aria-label': 'wait-for graph legend' });
    const kinds = new Set(ids.map((id) => G.nodes.get(id)));
    const has = (/** @type {string} */ k) => Array.from(kinds).some((n) => n.kind === k);
    if (has('threads')) box.appendChild(legendItem('#ffffff', 'thread group', 'hollow'));
    if (has('process')) box.appendChild(legendItem('#f6f7f9', 'process', 'hollow'));
    if (has('tasks')) box.appendChild(legendItem('#ffffff', 'asyncio tasks', 'hollow'));
    const shown = new Set();
    for (const n of kinds) {
      if (n.kind !== 'resource') continue;
      const r = own(WG_RESOURCES, n.resource) ? n.resource : 'other';
      if (shown.has(r)) continue;
      shown.add(r);
      box.appendChild(legendItem(WG_RESOURCES[r][2], WG_RESOURCES[r][0]));
    }
    box.appendChild(h('span', { class: 'legend-item', text: '\u2192 waits for' }));
    if (G.edges.some((e) => e.kind !== 'waits_for')) box.appendChild(h('span', { class: 'legend-item', text: '\u21e2 held by / served by' }));
    if (G.bottleneck) box.appendChild(legendItem(WG_NECK, 'bottleneck'));
    if (G.knots.length) box.appendChild(legendItem(WG_HANG, 'hang (a knot: none of it runs)'));
    return box;
  }

  /** @param {WgGraph} G */
  function wgEdgesTable(G) {
    const label = (/** @type {string} */ id) => G.nodes.get(id).label;
    const nodeCell = (/** @type {string} */ id) => {
      const n = G.nodes.get(id);
      return h('div', { class: 'site' },
        h('div', { class: 'site-fn' }, h('span', { class: 'wg-cell-label', text: n.label }),
          G.bottleneck === id ? [' ', h('span', { class: 'tag bottleneck-tag', text: 'bottleneck' })] : null),
        h('div', { class: 'small muted', text: wgWords(n) }));
    };
    /** @type {TableColumn<WgEdge>[]} */
    const cols = [
      { label: 'From', value: (e) => label(e.source), cell: (e) => nodeCell(e.source) },
      {
        label: 'Relation', value: (e) => e.kind, cls: 'nowrap',
        cell: (e) => h('span', null, own(WG_RELATIONS, e.kind) ? WG_RELATIONS[e.kind] : e.kind,
          e.knot ? [' ', h('span', { class: 'tag wg-hang-tag', text: 'hang' })] : null),
      },
      { label: 'To', value: (e) => label(e.target), cell: (e) => nodeCell(e.target) },
      { label: 'Share', value: (e) => e.share, num: true, cell: (e) => shareCell(e.share), title: 'sort by share of the waiter\u2019s time (held / served: of the observations)' },
      { label: 'Thread time', value: (e) => e.seconds, num: true, cell: (e) => (e.seconds > 0 ? fmtSec(e.seconds, e.seconds) : '\u2014') },
    ];
    return sortableTable(cols, G.edges, {
      cls: 'wg-edges-table', sortCol: 4, sortDir: 'desc',
      rowAttrs: (e) => ({ class: 'wg-edge-row', 'data-source': e.source, 'data-target': e.target, 'data-kind': e.kind }),
    });
  }

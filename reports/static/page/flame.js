  // @ts-check
  // Report page script, part: the flame graph. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 4. flame graph

  /** @param {PageData} D */
  function renderFlame(D) {
    const root = clear(/** @type {HTMLElement} */ ($('flame-body')));
    const waitSet = new Set(D.vocab.waiting);
    const busySet = new Set(D.vocab.running);
    const nF = D.frames.length;

    // Frame keys: merge frames of the same function+file (default) or keep lines apart.
    const keyByFunc = new Int32Array(nF);
    const keyByLine = new Int32Array(nF);
    {
      const mf = new Map();
      const ml = new Map();
      D.frames.forEach((f, i) => {
        const a = f.name + '\u0000' + f.file;
        const b = a + '\u0000' + f.line;
        if (!mf.has(a)) mf.set(a, i);
        if (!ml.has(b)) ml.set(b, i);
        keyByFunc[i] = mf.get(a);
        keyByLine[i] = ml.get(b);
      });
    }
    const frameColor = D.frames.map((f) => {
      const c = categoryHsl(D, f.cat);
      const j = hashStr(f.name + '\u0000' + f.file);
      const l = c[2] + ((j % 11) - 5);
      const s = c[1] + (((j >>> 8) % 9) - 4);
      return 'hsl(' + c[0] + ',' + s + '%,' + l + '%)';
    });
    /** @type {[string, string][] | null} */
    let lower = null; // lazily lower-cased names/files for search

    /** @type {FlameView} */
    const F = {
      thread: 'all', states: 'all', byLine: false, zoomKeys: [], query: '',
      match: null, cache: new Map(), tree: null, drawnEls: [],
    };

    // ---- controls
    const threadSel = h('select', { id: 'flame-thread', 'aria-label': 'threads' },
      h('option', { value: 'all', text: 'All threads (merged)' }),
      D.threads.map((t) => h('option', {
        value: String(t.index),
        text: visStr(t.name) + (D.multiProcess && t.pid != null
          ? ' (pid ' + t.pid + ', tid ' + str(t.tid) + ')' : ' (tid ' + str(t.tid) + ')'),
      })));
    const stateSel = h('select', { id: 'flame-state', 'aria-label': 'states' },
      h('option', { value: 'all', text: 'All states' }),
      h('option', { value: 'waits', text: 'Waits only (gil, lock, io, idle)' }),
      h('option', { value: 'busy', text: 'Busy only (python, native)' }));
    const lineBox = h('input', { type: 'checkbox', id: 'flame-lines' });
    const search = h('input', {
      type: 'search', id: 'flame-search', placeholder: 'Search function or file',
      'aria-label': 'search frames', autocomplete: 'off', spellcheck: 'false',
    });
    const searchResult = h('span', { id: 'flame-search-result', class: 'search-result', 'aria-live': 'polite' });
    const resetBtn = h('button', { type: 'button', id: 'flame-reset', text: 'Reset zoom' });
    const crumbs = h('nav', { id: 'flame-crumbs', class: 'crumbs', 'aria-label': 'zoom path' });
    const summary = h('p', { id: 'flame-summary', class: 'muted small' });
    const graph = h('div', { id: 'flame', class: 'flame', role: 'group', 'aria-label': 'flame graph (icicle: callers above callees)' });
    const legend = h('div', { id: 'flame-legend', class: 'legend', 'aria-label': 'frame categories' });
    D.categories.forEach((c, i) => legend.appendChild(legendItem(categoryColor(D, i), c)));

    root.appendChild(h('div', { class: 'controls' },
      h('label', null, 'View ', threadSel), h('label', null, stateSel),
      h('label', { class: 'check' }, lineBox, ' split by line'),
      h('span', { class: 'search-box' }, search, searchResult)));
    root.appendChild(h('div', { class: 'crumb-row' }, crumbs, resetBtn));
    root.appendChild(legend);
    root.appendChild(summary);
    root.appendChild(graph);
    root.appendChild(h('p', { class: 'muted small hint', text: 'Click a frame to zoom in, the top bar or "Reset zoom" to go back. Width = samples; callers on top, callees below.' }));

    // ---- model
    function viewKey() { return F.thread + '|' + F.states + '|' + (F.byLine ? 'L' : 'F'); }

    function buildTree() {
      const key = viewKey();
      const hit = F.cache.get(key);
      if (hit) return hit;
      const th = F.thread === 'all' ? -2 : Number(F.thread);
      const stateOk = D.states.map((s) =>
        F.states === 'all' ? true : F.states === 'waits' ? waitSet.has(s) : busySet.has(s));
      const keyOf = F.byLine ? keyByLine : keyByFunc;
      /** @type {FlameNode} */
      const root = { id: 0, key: -1, frame: -1, line: null, total: 0, self: 0, kids: null, parent: null, depth: 0, sorted: null };
      const nodes = [root];
      let maxDepth = 0;
      for (const row of D.stacks) {
        if (th !== -2 && row.thread !== th) continue;
        if (F.states !== 'all' && (row.state < 0 || !stateOk[row.state])) continue;
        const c = row.count;
        const fr = row.frames;
        let node = root;
        root.total += c;
        for (let i = 0; i < fr.length; i++) {
          const f = fr[i];
          const k = keyOf[f];
          let kids = node.kids;
          if (kids === null) kids = node.kids = new Map();
          let child = kids.get(k);
          const line = D.frames[f].line;
          if (child === undefined) {
            child = { id: nodes.length, key: k, frame: f, line, total: 0, self: 0, kids: null, parent: node, depth: node.depth + 1, sorted: null };
            kids.set(k, child);
            nodes.push(child);
          } else if (child.line !== line) {
            child.line = -1; // several lines merged
          }
          child.total += c;
          node = child;
        }
        node.self += c;
        if (fr.length > maxDepth) maxDepth = fr.length;
      }
      const tree = { root, nodes, maxDepth };
      F.cache.set(key, tree);
      if (F.cache.size > 6) F.cache.delete(/** @type {string} */ (F.cache.keys().next().value));
      return tree;
    }

    /** @param {FlameNode} n */
    function sortedKids(n) {
      if (n.sorted === null) {
        n.sorted = n.kids ? Array.from(n.kids.values()).sort((a, b) => b.total - a.total || a.key - b.key) : [];
      }
      return n.sorted;
    }

    function zoomNode() {
      let n = /** @type {FlameTree} */ (F.tree).root;
      const path = [];
      for (const k of F.zoomKeys) {
        const c = n.kids && n.kids.get(k);
        if (!c) break;
        n = c;
        path.push(k);
      }
      F.zoomKeys = path;
      return n;
    }

    /** @param {FlameNode} n */
    function pathTo(n) {
      const p = [];
      for (let x = n; x && x.parent; x = x.parent) p.push(x);
      return p.reverse();
    }

    /** @param {FlameNode} n */
    function nodeName(n) { return n.frame < 0 ? 'all' : D.frames[n.frame].name; }

    function viewLabel() {
      const t = F.thread === 'all' ? 'all threads' : 'thread ' + visStr(threadLabel(D, D.threads[Number(F.thread)]));
      const s = F.states === 'all' ? 'all states' : F.states === 'waits' ? 'waits only' : 'busy only';
      return t + ' \u00b7 ' + s;
    }

    // ---- search
    function computeMatch() {
      const q = F.query;
      if (!q) { F.match = null; return; }
      if (!lower) lower = D.frames.map((f) => [f.name.toLowerCase(), f.file.toLowerCase()]);
      const low = /** @type {[string, string][]} */ (lower); // just made
      const m = new Uint8Array(nF);
      for (let i = 0; i < nF; i++) m[i] = low[i][0].includes(q) || low[i][1].includes(q) ? 1 : 0;
      F.match = m;
    }

    /** @param {FlameNode} node */
    function matchedUnder(node) {
      // Samples under `node` whose stack contains a matching frame (each sample counted once).
      const m = /** @type {Uint8Array} */ (F.match); // searched: F.match is set
      for (let a = /** @type {FlameNode | null} */ (node); a && a.frame >= 0; a = a.parent) if (m[a.frame]) return node.total;
      let sum = 0;
      const st = [node];
      while (st.length) {
        const n = /** @type {FlameNode} */ (st.pop()); // st is not empty
        if (n.frame >= 0 && m[n.frame]) { sum += n.total; continue; }
        if (n.kids) for (const c of n.kids.values()) st.push(c);
      }
      return sum;
    }

    /** @param {FlameNode} zoom */
    function updateSearch(zoom) {
      const tree = /** @type {FlameTree} */ (F.tree); // drawn before any search
      for (const el of F.drawnEls) {
        const n = tree.nodes[Number(el.getAttribute('data-node'))];
        el.classList.toggle('match', !!(F.match && n.frame >= 0 && F.match[n.frame]));
      }
      graph.classList.toggle('searching', !!F.match);
      clear(searchResult);
      if (!F.match) {
        searchResult.removeAttribute('data-matched-samples');
        searchResult.removeAttribute('data-matched-share');
        return;
      }
      const total = tree.root.total;
      const matched = matchedUnder(tree.root);
      const share = total ? matched / total : 0;
      searchResult.setAttribute('data-matched-samples', String(matched));
      searchResult.setAttribute('data-matched-share', String(share));
      let text = matched
        ? fmtInt(matched) + ' samples match (' + fmtPct(share) + ' of view)'
        : 'no match';
      if (matched && zoom !== tree.root && zoom.total) {
        text += ', ' + fmtPct(matchedUnder(zoom) / zoom.total) + ' of zoomed frame';
      }
      putText(searchResult, text);
    }

    // ---- drawing
    function draw() {
      F.tree = buildTree();
      const tree = F.tree;
      const zoom = zoomNode();
      const width = graph.clientWidth || 1000;
      /** @type {[FlameNode, number, number, string][]} */
      const items = [];
      const viewTotal = tree.root.total;

      if (zoom !== tree.root) items.push([tree.root, 0, 1, 'ancestor']);
      for (const a of pathTo(zoom).slice(0, -1)) items.push([a, 0, 1, 'ancestor']);
      items.push([zoom, 0, 1, zoom === tree.root ? '' : 'zoomed']);

      let maxDepth = zoom.depth;
      if (zoom.total > 0) {
        // Choose a minimum width so the number of drawn frames stays bounded.
        let minSamples = zoom.total / width;
        const countAbove = (/** @type {number} */ min) => {
          let n = 0;
          const st = [zoom];
          while (st.length) {
            const x = /** @type {FlameNode} */ (st.pop()); // st is not empty
            for (const c of sortedKids(x)) {
              if (c.total < min) break;
              if (++n > FLAME_MAX_DRAWN) return n;
              st.push(c);
            }
          }
          return n;
        };
        while (countAbove(minSamples) > FLAME_MAX_DRAWN) minSamples *= 2;
        const st = [[zoom, 0]];
        while (st.length) {
          const [x, off] = /** @type {[FlameNode, number]} */ (st.pop());
          let cur = off;
          for (const c of sortedKids(x)) {
            if (c.total < minSamples) break;
            items.push([c, cur / zoom.total, c.total / zoom.total, '']);
            if (c.depth > maxDepth) maxDepth = c.depth;
            st.push([c, cur]);
            cur += c.total;
          }
        }
      }

      const frag = document.createDocumentFragment();
      const drawn = [];
      for (const [n, x, w, kind] of items) {
        const el = document.createElement('div');
        el.className = 'flame-node' + (kind ? ' ' + kind : '') + (n === tree.root ? ' root' : '');
        el.style.left = (x * 100).toFixed(4) + '%';
        el.style.width = (w * 100).toFixed(4) + '%';
        el.style.top = n.depth * FLAME_ROW_H + 'px';
        if (n.frame >= 0) {
          const f = D.frames[n.frame];
          el.style.backgroundColor = frameColor[n.frame];
          el.setAttribute('data-name', f.name);
          el.setAttribute('data-file', f.file);
          if (n.line != null) el.setAttribute('data-line', String(n.line));
          el.setAttribute('data-category', f.cat >= 0 ? D.categories[f.cat] : '');
        } else {
          el.setAttribute('data-name', 'all');
        }
        el.setAttribute('data-node', String(n.id));
        el.setAttribute('data-depth', String(n.depth));
        el.setAttribute('data-samples', String(n.total));
        if (w * width >= FLAME_LABEL_MIN_PX) {
          el.textContent = n.frame >= 0 ? visStr(nodeName(n))
            : 'all \u2014 ' + viewLabel() + ' \u2014 ' + fmtInt(n.total) + ' samples';
        }
        frag.appendChild(el);
        drawn.push(el);
      }
      clear(graph);
      if (viewTotal === 0) {
        graph.appendChild(h('p', { class: 'empty', text: 'No samples in this view.' }));
        graph.style.height = 'auto';
      } else {
        graph.appendChild(frag);
        graph.style.height = (maxDepth + 1) * FLAME_ROW_H + 'px';
      }
      F.drawnEls = viewTotal === 0 ? [] : drawn;

      // breadcrumb
      clear(crumbs);
      const trail = [tree.root].concat(pathTo(zoom));
      trail.forEach((n, i) => {
        if (i) crumbs.appendChild(h('span', { class: 'crumb-sep', 'aria-hidden': 'true', text: '\u203a' }));
        const last = i === trail.length - 1;
        const b = h('button', {
          type: 'button', class: 'crumb', 'data-node': n.id, 'aria-current': last ? 'true' : null,
          text: n === tree.root ? 'all' : visStr(nodeName(n)),
        });
        b.addEventListener('click', () => zoomTo(n));
        crumbs.appendChild(b);
      });
      resetBtn.disabled = zoom === tree.root;

      const names = pathTo(zoom).map(nodeName);
      graph.setAttribute('data-node-count', String(tree.nodes.length - 1));
      graph.setAttribute('data-drawn-count', String(F.drawnEls.length));
      graph.setAttribute('data-total-samples', String(viewTotal));
      graph.setAttribute('data-view-samples', String(zoom.total));
      graph.setAttribute('data-zoom-depth', String(zoom.depth));
      graph.setAttribute('data-zoom-path', names.join(' > '));
      graph.setAttribute('data-zoom-node', String(zoom.id));
      graph.setAttribute('data-thread', F.thread);
      graph.setAttribute('data-states', F.states);

      clear(summary);
      putText(summary, viewLabel() + ': ' + fmtInt(viewTotal) + ' samples, ' +
        fmtInt(tree.nodes.length - 1) + ' frames in the tree, ' + fmtInt(F.drawnEls.length) + ' drawn' +
        (zoom !== tree.root ? ', zoomed to ' + visStr(nodeName(zoom)) + ' (' + fmtPct(zoom.total / (viewTotal || 1)) + ')' : ''));

      updateSearch(zoom);
    }

    /** @param {FlameNode} n */
    function zoomTo(n) {
      F.zoomKeys = pathTo(n).map((x) => x.key);
      draw();
    }

    // ---- events
    threadSel.addEventListener('change', () => { F.thread = threadSel.value; draw(); });
    stateSel.addEventListener('change', () => { F.states = stateSel.value; draw(); });
    lineBox.addEventListener('change', () => { F.byLine = lineBox.checked; F.zoomKeys = []; draw(); });
    resetBtn.addEventListener('click', () => { F.zoomKeys = []; draw(); });
    const onSearch = () => {
      F.query = search.value.trim().toLowerCase();
      computeMatch();
      updateSearch(zoomNode());
    };
    search.addEventListener('input', debounce(onSearch, 120));
    search.addEventListener('change', onSearch);
    search.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') onSearch(); });

    /** @param {MouseEvent} ev */
    function nodeOf(ev) {
      const el = ev.target instanceof Element ? ev.target.closest('.flame-node') : null;
      if (!el || !graph.contains(el)) return null;
      return /** @type {FlameTree} */ (F.tree).nodes[Number(el.getAttribute('data-node'))] || null;
    }
    graph.addEventListener('click', (ev) => {
      const n = nodeOf(ev);
      if (!n) return;
      const zoom = zoomNode();
      zoomTo(n === zoom && n.parent ? n.parent : n); // clicking the zoomed frame zooms out one level
    });
    graph.addEventListener('mouseover', (ev) => {
      const n = nodeOf(ev);
      if (!n) { tip.hide(); return; }
      const viewTotal = /** @type {FlameTree} */ (F.tree).root.total || 1;
      const zoom = zoomNode();
      if (n.frame < 0) {
        tip.show(['all samples in view', viewLabel(), ['samples', fmtInt(n.total)]], ev);
        return;
      }
      const f = D.frames[n.frame];
      const lineText = n.line === -1 ? f.file + ' (several lines; tick "split by line")' : fileLine(f.file, n.line);
      tip.show([
        f.name,
        lineText,
        ['category', f.cat >= 0 ? D.categories[f.cat] : '\u2014'],
        ['samples', fmtInt(n.total) + (n.self ? ' (self ' + fmtInt(n.self) + ')' : '')],
        ['share of view', fmtPct(n.total / viewTotal)],
        zoom !== /** @type {FlameTree} */ (F.tree).root && zoom.total ? ['share of zoom', fmtPct(n.total / zoom.total)] : null,
      ], ev);
    });
    graph.addEventListener('mousemove', (ev) => tip.move(ev));
    graph.addEventListener('mouseleave', () => tip.hide());
    window.addEventListener('resize', debounce(() => { if (F.tree) draw(); }, 150));

    // Let other sections (thread table) switch the view.
    renderFlame.showThread = (index) => {
      threadSel.value = String(index);
      F.thread = threadSel.value;
      F.zoomKeys = [];
      draw();
      /** @type {HTMLElement} */ ($('flame-section')).scrollIntoView({ block: 'start' });
    };

    draw();
  }

  // @ts-check
  // Report page script, part: the event loops. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 9. event loops

  // [key, label, report field, color, explanation]
  /** @type {[string, string, keyof Model.EventLoop, string, string][]} */
  const LOOP_PARTS = [
    ['idle', 'idle in selector', 'idle_share', '#c3c8d0', 'the loop waited for events: nothing was ready to run'],
    ['framework', 'framework', 'framework_share', '#6d97d6',
      'the event loop and the server framework themselves: scheduling, protocol parsing, transports'],
    ['app', 'app\u2019s synchronous work', 'app_share', '#d1434b',
      'the app\u2019s coroutines and callbacks running between two awaits: the loop serves nothing else meanwhile'],
  ];
  /** @type {Record<Model.CallbackKind, string>} */
  const CALLBACK_KINDS = { cpu: 'CPU work', blocking_call: 'blocking call' };

  /** An await site as a row of its table, with its place in the process's list (from 1).
   *  @typedef {{ s: Partial<Model.TaskAwaitSite>, rank: number }} AwaitSiteRow */
  /** A callback as a row of its loop's table: its place in the loop's list (k, from 0), its
   *  share when a number, and its rank by share (from 1).
   *  @typedef {{ c: Partial<Model.Callback>, k: number, share: number | null, rank: number }} CallbackRow */

  /** @param {PageData} D */
  function renderEventLoops(D) {
    const section = $('event-loops');
    const root = $('event-loops-body');
    if (!section || !root) return;
    clear(root);
    const loops = arr(D.report.event_loops).map(obj).filter((l) => Object.keys(l).length);
    const tasks = arr(D.report.tasks).map(obj).filter((t) => Object.keys(t).length);
    section.hidden = !loops.length && !tasks.length;
    if (loops.length) {
      root.appendChild(h('p', { class: 'muted small', text:
        'Where each event loop\u2019s thread spent its samples. While the app\u2019s synchronous code runs ' +
        '(computing, or stuck in a blocking call), the loop runs nothing else: every other request of ' +
        'that process waits.' }));
      loops.forEach((l, i) => root.appendChild(loopBlock(D, l, i)));
    }
    if (tasks.length) root.appendChild(tasksBlock(tasks));
  }

  // ------------------------------------------------------------------ asyncio tasks by await site

  /** @type {Record<string, string>} */
  const AWAIT_KINDS = {
    semaphore: 'asyncio.Semaphore', lock: 'asyncio.Lock', condition: 'asyncio.Condition', event: 'asyncio.Event',
    queue_get: 'Queue get', queue_put: 'Queue put', future: 'future', task: 'task', sleep: 'sleep', io: 'I/O',
    unknown: 'unknown',
  };

  /** @param {Partial<Model.ProcessTasks>[]} tasks */
  function tasksBlock(tasks) {
    const box = h('div', { class: 'await-sites', id: 'await-sites' },
      h('h3', { text: 'Tasks by await site' }),
      h('p', { class: 'muted small', text:
        'Where the asyncio request tasks waited, read from each process\u2019s memory a few times a second. ' +
        'A suspended coroutine is on no thread\u2019s stack: the flame graph and the loop bars cannot show these waits. ' +
        'Averages are over the reads; a share is of the request tasks\u2019 time.' }));
    for (const t of tasks) box.appendChild(taskProcess(t));
    return box;
  }

  /** @param {Partial<Model.ProcessTasks>} t */
  function taskProcess(t) {
    const pid = isInt(t.pid) ? t.pid : null;
    const part = h('div', { class: 'await-process', 'data-pid': pid });
    if (pid != null) part.appendChild(h('h4', { class: 'mono', text: 'pid ' + pid }));
    if (str(t.unreadable)) {
      part.appendChild(h('p', { class: 'muted small await-unreadable', text: str(t.unreadable) }));
      return part;
    }
    const facts = [fmtInt(t.snapshots) + ' reads' + (isNum(t.torn) && t.torn ? ' (' + fmtInt(t.torn) + ' torn)' : ''),
      fmtNum(t.request_tasks_avg) + ' request tasks in flight on average (at most ' + fmtInt(t.request_tasks_max) + ')',
      'on in-process primitives ' + fmtPct(t.local_share), 'on calls outside the process ' + fmtPct(t.downstream_share)];
    part.appendChild(h('p', { class: 'small await-facts', title: str(t.request_rule), text: facts.join(' \u00b7 ') }));
    const sites = arr(t.sites).map(obj).filter((s) => Object.keys(s).length).map((s, k) => ({ s, rank: k + 1 }));
    if (!sites.length) {
      part.appendChild(h('p', { class: 'muted small', text: 'No request task waited on anything the reads could name.' }));
      return part;
    }
    const kindLabel = (/** @type {string} */ k) => (Object.prototype.hasOwnProperty.call(AWAIT_KINDS, k) ? AWAIT_KINDS[k] : k || '?');
    /** @type {TableColumn<AwaitSiteRow>[]} */
    const cols = [
      { label: '#', value: (x) => x.rank, num: true, ascFirst: true, title: 'sort by rank (share of request-task time)' },
      {
        label: 'Await site', value: (x) => str(x.s.function),
        cell: (x) => h('div', { class: 'site' },
          h('div', { class: 'mono site-fn', text: str(x.s.function) || '?' }),
          h('div', { class: 'mono path small site-file', title: visStr(fileLine(x.s.file, x.s.line)), text: fileLine(basename(x.s.file), x.s.line) })),
      },
      {
        label: 'Waits on', value: (x) => kindLabel(str(x.s.kind)) + ' ' + str(x.s.name),
        cell: (x) => h('span', { class: 'await-on' },
          h('span', { class: 'kind await-kind', 'data-kind': str(x.s.kind), text: kindLabel(str(x.s.kind)) }),
          str(x.s.name) ? ' ' : null, str(x.s.name) ? h('code', { class: 'await-name', text: str(x.s.name) }) : null,
          x.s.local === false ? h('span', { class: 'tag await-outside', title: 'a call outside the process: no local limit', text: 'outside' }) : null),
      },
      {
        label: 'Permits', value: (x) => (isNum(x.s.capacity) ? x.s.capacity : null), num: true,
        title: 'sort by permits in all (tasks inside the block + free permits read)',
        cell: (x) => (isNum(x.s.capacity) ? fmtInt(x.s.capacity) + (isNum(x.s.permits_free) ? ' (' + fmtInt(x.s.permits_free) + ' free)' : '')
          : isNum(x.s.permits_free) ? fmtInt(x.s.permits_free) + ' free' : '\u2014'),
      },
      { label: 'Waiting avg', value: (x) => (isNum(x.s.waiting_avg) ? x.s.waiting_avg : null), num: true },
      { label: 'Waiting max', value: (x) => (isNum(x.s.waiting_max) ? x.s.waiting_max : null), num: true },
      { label: 'Share', value: (x) => (isNum(x.s.share) ? x.s.share : null), num: true, cell: (x) => shareCell(isNum(x.s.share) ? x.s.share : null), title: 'sort by share of request-task time' },
    ];
    part.appendChild(sortableTable(cols, sites, {
      cls: 'await-table', sortCol: 0, sortDir: 'asc',
      rowAttrs: (x) => ({ class: 'await-row', 'data-kind': str(x.s.kind), 'data-local': x.s.local === false ? 'false' : 'true', 'data-share': isNum(x.s.share) ? x.s.share : '' }),
    }));
    return part;
  }

  /** @param {PageData} D @param {Partial<Model.EventLoop>} l @param {number} i */
  function loopBlock(D, l, i) {
    const pid = isInt(l.pid) ? l.pid : null;
    /** @type {ElementAttrs} */
    const attrs = { class: 'loop', id: 'loop-' + i, 'data-pid': pid, 'data-tid': l.tid == null ? null : str(l.tid), 'data-flavor': str(l.flavor) };
    for (const [key, , field] of LOOP_PARTS) if (isNum(l[field])) attrs['data-' + key + '-share'] = String(l[field]);
    const box = h('div', attrs);

    const thread = D.threads.find((t) => l.tid != null && t.tid === l.tid && (pid == null || t.pid == null || t.pid === pid));
    // The thread's name: `thread` (an EventLoop has no `name`: the report never writes one).
    const name = str(l.thread) || (thread ? thread.name : '') || 'thread ' + str(l.tid);
    const head = h('div', { class: 'loop-head' },
      h('h3', { class: 'loop-title' },
        pid != null ? h('span', { class: 'mono loop-pid', text: pid + ' \u00b7 ' }) : null,
        h('span', { class: 'loop-thread', text: name }),
        l.tid != null ? h('span', { class: 'muted loop-tid', text: ' (tid ' + str(l.tid) + ')' }) : null),
      str(l.flavor) !== '' ? h('span', { class: 'tag loop-flavor', text: str(l.flavor) }) : null,
      h('span', { class: 'muted small', text: isNum(l.samples) ? fmtInt(l.samples) + ' samples' : '' }));
    if (thread) {
      head.appendChild(h('button', {
        type: 'button', class: 'linkish small loop-flame', text: 'show in the flame graph',
        on: { click: () => { if (renderFlame.showThread) renderFlame.showThread(thread.index); } },
      }));
    }
    box.appendChild(head);

    const bar = h('div', { class: 'loop-bar', role: 'img' });
    const legend = h('div', { class: 'loop-legend' });
    /** @type {string[]} */
    const spoken = [];
    for (const [key, label, field, color, explain] of LOOP_PARTS) {
      const v = l[field];
      const seg = h('span', { class: 'loop-seg', 'data-part': key, 'data-share': isNum(v) ? v : null, title: label + ' ' + fmtPct(v) });
      seg.style.width = (isNum(v) ? Math.max(0, Math.min(1, v)) * 100 : 0) + '%';
      seg.style.backgroundColor = color;
      bar.appendChild(seg);
      const sw = h('span', { class: 'swatch' });
      sw.style.backgroundColor = color;
      legend.appendChild(h('span', { class: 'loop-part', 'data-part': key, title: explain },
        sw, h('span', { class: 'loop-label', text: label }), ' ', h('span', { class: 'loop-pct', text: fmtPct(v) })));
      spoken.push(label + ' ' + fmtPct(v));
    }
    bar.setAttribute('aria-label', spoken.join(', '));
    box.appendChild(bar);
    box.appendChild(legend);

    /** @type {HTMLElement[]} */
    const facts = [];
    if (isNum(l.busy_share)) {
      facts.push(h('span', { 'data-fact': 'busy', title: 'samples when the loop was not idle in its selector', text: 'busy ' + fmtPct(l.busy_share) }));
    }
    if (isNum(l.cpu_share_os)) {
      facts.push(h('span', {
        'data-fact': 'cpu-os', 'data-value': l.cpu_share_os,
        title: 'CPU time the OS counted for this thread, as a share of one core over the window',
        text: 'OS CPU of the loop thread ' + fmtPct(l.cpu_share_os) + ' of a core',
      }));
    }
    if (isNum(l.est_block_per_request_s)) {
      facts.push(h('span', {
        'data-fact': 'block-per-request', 'data-value': l.est_block_per_request_s,
        title: str(l.est_basis) ||
          'estimated from the loop\u2019s synchronous stretches and the requests it served; not measured per request',
      }, 'blocking per request \u2248 ' + fmtDuration(l.est_block_per_request_s) + ' ', h('span', { class: 'tag est', text: 'estimated' })));
    }
    if (isNum(l.block_runs)) {
      facts.push(h('span', {
        'data-fact': 'block-runs', 'data-value': l.block_runs,
        title: 'stretches of consecutive samples in the app\u2019s synchronous code',
        text: fmtInt(l.block_runs) + ' blocking stretch' + (l.block_runs === 1 ? '' : 'es'),
      }));
    }
    if (facts.length) {
      const line = h('p', { class: 'loop-facts small' });
      facts.forEach((f, k) => { if (k) line.appendChild(document.createTextNode(' \u00b7 ')); line.appendChild(f); });
      box.appendChild(line);
    }

    const cbs = arr(l.callbacks).map(obj).filter((c) => Object.keys(c).length)
      .map((c, k) => ({ c, k, share: isNum(c.share) ? c.share : null }))
      .sort((a, b) => (b.share == null ? -1 : b.share) - (a.share == null ? -1 : a.share) || a.k - b.k)
      .map((x, r) => ({ ...x, rank: r + 1 }));
    if (!cbs.length) {
      box.appendChild(h('p', { class: 'muted small', text: 'No callbacks were recorded for this loop.' }));
      return box;
    }
    const site = (/** @type {Partial<Model.CallSite>} */ o) => h('div', { class: 'site' },
      h('div', { class: 'mono site-fn', text: str(o.function) || '?' }),
      h('div', { class: 'mono path small site-file', title: visStr(fileLine(o.file, o.line)), text: fileLine(basename(o.file), o.line) }));
    /** @type {TableColumn<CallbackRow>[]} */
    const cols = [
      { label: '#', value: (x) => x.rank, num: true, ascFirst: true, title: 'sort by rank (share of the loop\u2019s samples)' },
      { label: 'Function', value: (x) => str(x.c.function), cell: (x) => h('span', { class: 'mono cb-fn', text: str(x.c.function) || '?' }) },
      {
        label: 'File:line', value: (x) => basename(x.c.file) + ':' + str(x.c.line),
        cell: (x) => h('span', { class: 'mono path small cb-file', title: visStr(fileLine(x.c.file, x.c.line)), text: fileLine(basename(x.c.file), x.c.line) }),
      },
      {
        label: 'Share', value: (x) => x.share, num: true, cell: (x) => shareCell(x.share),
        title: 'sort by share of the loop\u2019s samples',
      },
      {
        label: 'Kind', value: (x) => str(x.c.kind), cls: 'nowrap',
        cell: (x) => {
          const k = str(x.c.kind);
          const label = Object.prototype.hasOwnProperty.call(CALLBACK_KINDS, k) ? CALLBACK_KINDS[/** @type {Model.CallbackKind} */ (k)] : k || '?';
          return h('span', { class: 'kind cb-kind', 'data-kind': k, title: k, text: label });
        },
      },
      {
        label: 'Call site',
        value: (x) => { const cs = obj(x.c.call_site); return Object.keys(cs).length ? str(cs.function) : ''; },
        cell: (x) => {
          const cs = obj(x.c.call_site);
          return Object.keys(cs).length ? site(cs) : h('span', { class: 'muted', text: '\u2014' });
        },
        cls: 'cb-site',
      },
      { label: 'Detail', value: (x) => str(x.c.detail), cls: 'cb-detail' },
    ];
    box.appendChild(sortableTable(cols, cbs, {
      cls: 'callbacks', sortCol: 0, sortDir: 'asc',
      rowAttrs: (x) => ({ class: 'callback-row', 'data-rank': x.rank, 'data-share': x.share != null ? x.share : '', 'data-kind': str(x.c.kind) }),
    }));
    return box;
  }

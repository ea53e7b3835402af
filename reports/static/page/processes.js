  // @ts-check
  // Report page script, part: the process table and tree. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 8. processes

  /** A process as a row of its table: the process, its place in the report's list, its role,
   *  pid and parent's pid when whole numbers; its depth in the tree and its place in tree order,
   *  set by processTree().
   *  @typedef {{ p: Partial<Model.Process>, i: number, role: string, pid: number | null,
   *    ppid: number | null, depth?: number, order?: number }} ProcessRow */

  const CMD_MAX_CHARS = 80;
  const TREE_MAX_INDENT = 6;

  /** A process role's place in the vocabulary's order (master, single, worker, helper); another
   *  word after them all.
   *  @param {string} role */
  function roleRank(role) {
    const i = VOCAB.processRoles.indexOf(role);
    return i >= 0 ? i : VOCAB.processRoles.length;
  }

  /** The first `max` characters (code points, so no pair is split) of s, with an ellipsis when cut.
   *  @param {string} s @param {number} max */
  function truncateText(s, max) {
    const cps = Array.from(s);
    return cps.length <= max ? s : cps.slice(0, max - 1).join('') + '\u2026';
  }

  /** @param {unknown} cmd */
  function cmdlineText(cmd) {
    return Array.isArray(cmd) ? cmd.map(shellQuote).join(' ') : str(cmd);
  }

  /** CPU seconds over the window as cores kept busy: "0.93 cores".
   *  @param {unknown} v */
  function fmtCores(v) {
    if (!isNum(v)) return '\u2014';
    if (v > 0 && v < 0.005) return '<0.01 cores';
    return v.toFixed(2) + (v.toFixed(2) === '1.00' ? ' core' : ' cores');
  }

  /** A duration: "118 ms" below a second, "1.25 s" from one.
   *  @param {unknown} s */
  function fmtDuration(s) {
    if (!isNum(s)) return '\u2014';
    if (Math.abs(s) < 1) return fmtNum(Number((s * 1000).toPrecision(3))) + ' ms';
    return fmtNum(s) + ' s';
  }

  /** Processes in tree order: each process followed by its children (by ppid), masters first.
   *  Sets x.depth and x.order. A ppid cycle cannot hide a process: what no root reaches is listed
   *  at the top level.
   *  @param {ProcessRow[]} procs */
  function processTree(procs) {
    /** @type {Map<number, ProcessRow>} */
    const byPid = new Map();
    for (const x of procs) if (x.pid != null && !byPid.has(x.pid)) byPid.set(x.pid, x);
    /** @type {Map<ProcessRow, ProcessRow[]>} */
    const kids = new Map();
    /** @type {ProcessRow[]} */
    const roots = [];
    for (const x of procs) {
      const parent = x.ppid != null && x.ppid !== x.pid ? byPid.get(x.ppid) : undefined;
      if (parent && parent !== x) {
        if (!kids.has(parent)) kids.set(parent, []);
        /** @type {ProcessRow[]} */ (kids.get(parent)).push(x);
      } else {
        roots.push(x);
      }
    }
    /** @type {(a: ProcessRow, b: ProcessRow) => number} */
    const byRole = (a, b) => roleRank(a.role) - roleRank(b.role) ||
      (a.pid == null ? 1 : 0) - (b.pid == null ? 1 : 0) || (a.pid || 0) - (b.pid || 0) || a.i - b.i;
    /** @type {ProcessRow[]} */
    const out = [];
    const seen = new Set();
    const visit = (/** @type {ProcessRow} */ root) => {
      /** @type {[ProcessRow, number][]} */
      const stack = [[root, 0]];
      while (stack.length) {
        const [x, depth] = /** @type {[ProcessRow, number]} */ (stack.pop());
        if (seen.has(x)) continue;
        seen.add(x);
        x.depth = depth;
        out.push(x);
        const children = (kids.get(x) || []).slice().sort(byRole);
        for (let k = children.length - 1; k >= 0; k--) stack.push([children[k], depth + 1]);
      }
    };
    roots.sort(byRole).forEach(visit);
    procs.filter((x) => !seen.has(x)).sort(byRole).forEach(visit);
    out.forEach((x, order) => { x.order = order; });
    return out;
  }

  /** @param {PageData} D */
  function renderProcesses(D) {
    const section = $('processes');
    const root = $('processes-body');
    if (!section || !root) return;
    clear(root);
    const procs = arr(D.report.processes).map(obj).filter((p) => Object.keys(p).length)
      .map((p, i) => ({
        p, i, role: str(p.role),
        pid: isInt(p.pid) ? p.pid : null,
        ppid: isInt(p.ppid) ? p.ppid : null,
      }));
    // One process: the run facts above already describe it.
    section.hidden = procs.length < 2;
    if (procs.length < 2) return;
    const rows = processTree(procs);

    /** @type {Map<string, number>} */
    const counts = new Map();
    for (const x of rows) counts.set(x.role || 'unknown', (counts.get(x.role || 'unknown') || 0) + 1);
    const roles = Array.from(counts.keys()).sort((a, b) => roleRank(a) - roleRank(b));
    const cores = rows.map((x) => x.p.cpu_cores).filter(isNum);
    const summary = rows.length + ' processes: ' +
      roles.map((r) => counts.get(r) + ' ' + r + (/** @type {number} */ (counts.get(r)) > 1 ? 's' : '')).join(', ') +
      (cores.length ? ' \u00b7 ' + fmtCores(cores.reduce((a, b) => a + b, 0)) + ' busy together' : '');
    root.appendChild(h('p', { id: 'processes-summary', text: summary }));
    root.appendChild(h('p', { class: 'muted small', text:
      'Workers are listed under the process that started them. CPU is the CPU time of the process ' +
      'over the window, in cores kept busy; busy is the share of its thread samples running or ' +
      'runnable. Click a heading to sort, "PID" to get the tree back.' }));

    const duration = obj(D.report.sampling).duration_s;
    const findingIds = new Set(arr(D.report.findings).map(obj).map((f) => str(f.id)).filter((id) => id !== ''));
    const n = (/** @type {unknown} */ v) => (isNum(v) ? v : null);
    // (fmtSec's digits for a window of unknown length: those of 0 s, as for null before)
    const lifetime = (/** @type {ProcessRow} */ x) => [
      isNum(x.p.started_s) ? 'started at ' + fmtSec(x.p.started_s, duration ?? 0) : null,
      isNum(x.p.exited_s) ? 'exited at ' + fmtSec(x.p.exited_s, duration ?? 0) : null,
    ].filter(Boolean).join(', ');
    const topFinding = (/** @type {ProcessRow} */ x) => (x.p.top_finding && typeof x.p.top_finding === 'object' &&
      !Array.isArray(x.p.top_finding) ? x.p.top_finding : null);

    /** @param {ProcessRow} x */
    function pidCell(x) {
      const cell = h('span', {
        class: 'ptree', 'data-depth': x.depth,
        title: x.ppid != null ? 'parent process ' + x.ppid : null,
      });
      cell.style.paddingLeft = Math.min(/** @type {number} */ (x.depth), TREE_MAX_INDENT) * 1.2 + 'em';
      if (x.depth) cell.appendChild(h('span', { class: 'ptree-branch', 'aria-hidden': 'true', text: '\u2514\u2009' }));
      cell.appendChild(h('span', { class: 'mono ptree-pid', text: x.pid != null ? String(x.pid) : str(x.p.pid) || '?' }));
      return cell;
    }

    /** @param {ProcessRow} x */
    function findingCell(x) {
      const f = topFinding(x);
      if (!f) return h('span', { class: 'muted', text: '\u2014' });
      const id = str(f.id);
      const ref = findingIds.has(id)
        ? h('button', { type: 'button', class: 'linkish mono pf-id', title: 'open this finding', text: id, on: { click: () => openFinding(id) } })
        : h('span', { class: 'mono pf-id', text: id || '?' });
      return h('div', { class: 'pfinding' },
        h('div', { class: 'pf-head' }, ref,
          f.severity != null && str(f.severity) !== '' ? badge(f.severity) : null,
          h('span', { class: 'pf-score', text: 'score ' + fmtNum(f.score) })),
        str(f.summary) !== '' ? h('div', { class: 'pf-summary small', text: str(f.summary) }) : null);
    }

    /** @param {ProcessRow} x */
    function cmdCell(x) {
      const full = cmdlineText(x.p.cmdline);
      if (!full) return h('span', { class: 'muted', text: '\u2014' });
      const shown = truncateText(full, CMD_MAX_CHARS);
      return h('code', { class: 'pcmd', title: visStr(full), 'data-truncated': shown === full ? 'false' : 'true', text: shown });
    }

    /** @type {TableColumn<ProcessRow>[]} */
    const cols = [
      {
        label: 'PID', value: (x) => x.order, cell: pidCell, ascFirst: true, cls: 'nowrap',
        title: 'sort as a process tree (workers under their master)',
      },
      {
        label: 'Role', value: (x) => x.role, cls: 'nowrap',
        cell: (x) => h('span', { class: 'role', 'data-role': x.role, text: x.role || '?' }),
      },
      {
        label: 'CPU', value: (x) => n(x.p.cpu_cores), num: true,
        cell: (x) => h('span', {
          class: 'pcpu',
          title: isNum(x.p.cpu_s) ? fmtNum(x.p.cpu_s) + ' CPU-seconds over the window' : 'CPU time not measured',
          text: fmtCores(x.p.cpu_cores),
        }),
        title: 'sort by CPU: CPU-seconds over the window, as cores kept busy',
      },
      {
        label: 'Busy', value: (x) => n(x.p.busy_share), num: true, cell: (x) => shareCell(x.p.busy_share),
        title: 'sort by busy share: thread samples running or runnable',
      },
      { label: 'Threads', value: (x) => n(x.p.threads), num: true, title: 'sort by thread count' },
      {
        label: 'Lifetime', value: lifetime, cls: 'nowrap',
        cell: (x) => {
          const t = lifetime(x);
          return t ? h('span', { class: 'lifetime', text: t }) : h('span', { class: 'muted', text: 'whole window' });
        },
        title: 'sort by lifetime: processes that started or exited during the window',
      },
      {
        label: 'Top finding', value: (x) => (topFinding(x) ? n(/** @type {Model.TopFinding} */ (topFinding(x)).score) : null), descFirst: true,
        cell: findingCell, cls: 'pfinding-col', title: 'sort by the score of the process\u2019s own top finding',
      },
      { label: 'Command line', value: (x) => cmdlineText(x.p.cmdline), cell: cmdCell, cls: 'pcmd-col' },
    ];
    root.appendChild(sortableTable(cols, rows, {
      cls: 'processes', sortCol: 0, sortDir: 'asc',
      rowAttrs: (x) => ({
        class: 'process-row', 'data-pid': x.pid != null ? x.pid : '', 'data-ppid': x.ppid != null ? x.ppid : '',
        'data-role': x.role, 'data-depth': x.depth, 'data-order': x.order,
        'data-cpu-cores': n(x.p.cpu_cores) != null ? x.p.cpu_cores : '',
        'data-busy-share': n(x.p.busy_share) != null ? x.p.busy_share : '',
      }),
    }));
  }

  // @ts-check
  // Report page script, part: where the waits end, one line per chain of waits (report.chains),
  // under the wait-for graph. The parts share one scope: diagnose/render/html.py joins them in
  // PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ where the waits end

  // The report keeps at most 8 (model/reported_chains.py MAX_CHAINS); an edited report is cut here.
  const CHAIN_MAX_LINES = 8;

  /** The report's chains as the page prints them, checked: a chain without its line is left out.
   *  Every text in them comes from the profiled processes: it enters the page as text only.
   *  @param {unknown} raw */
  function waitChainsOf(raw) {
    return arr(raw).map(obj).map((c) => ({
      pid: isInt(c.pid) ? /** @type {number} */ (c.pid) : null,
      threads: isInt(c.threads) ? /** @type {number} */ (c.threads) : 0,
      seconds: isNum(c.thread_seconds) ? c.thread_seconds : null,
      tasks: isNum(c.tasks) && c.tasks > 0,  // asyncio request tasks: its seconds are task-seconds
      hops: arr(c.hops).length,
      end: str(c.end),
      line: str(c.line),
    })).filter((c) => c.line !== '').slice(0, CHAIN_MAX_LINES);
  }

  /** "Where the waits end": hidden when the report has no chain.
   *  @param {PageData} D */
  function renderWaitChains(D) {
    const section = $('wait-chains');
    const root = $('wait-chains-body');
    if (!section || !root) return;
    clear(root);
    const chains = waitChainsOf(D.report.chains);
    section.hidden = !chains.length;
    if (!chains.length) return;
    root.appendChild(h('p', { class: 'muted small', text:
      'Each line: threads (or asyncio request tasks) of one process waiting on one thing, then ' +
      'every hop from it through who serves it to where their wait ends; most thread-time first. Waits of a few percent of their ' +
      'process\u2019s thread time or less are left out: the wait-for graph has every wait.' }));
    const list = h('ol', { class: 'chain-list', id: 'wait-chains-list' });
    chains.forEach((c, i) => {
      const unit = c.tasks ? ' task-seconds' : ' thread-seconds';
      const seconds = c.seconds == null ? '' : ' \u00b7 ' + fmtNum(c.seconds) + unit;
      list.appendChild(h('li', {
        class: 'chain-row', 'data-rank': i, 'data-pid': c.pid == null ? '' : c.pid, 'data-end': c.end,
        'data-threads': c.threads, 'data-hops': c.hops,
      },
      h('span', { class: 'tag chain-pid', text: c.pid == null ? 'pid ?' : 'pid ' + c.pid }), ' ',
      h('span', { class: 'chain-line', text: c.line }),
      seconds ? h('span', { class: 'muted chain-seconds', text: seconds }) : null));
    });
    root.appendChild(list);
  }

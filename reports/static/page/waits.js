  // @ts-check
  // Report page script, part: the wait sites. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 7. wait sites

  /** A wait site as a row of its table: the site, its place in the report's order (from 1) and
   *  the holders seen there.
   *  @typedef {{ w: Partial<Model.WaitSite>, rank: number, holders: Model.Holder[] }} WaitRow */

  /** @param {PageData} D */
  function renderWaits(D) {
    const root = clear(/** @type {HTMLElement} */ ($('waits-body')));
    if (Array.isArray(D.report.waits)) {
      const waits = D.report.waits
        .map((w, i) => ({ w: obj(w), rank: i + 1 }))
        .filter((x) => Object.keys(x.w).length)
        .map((x) => ({ ...x, holders: arr(x.w.holders).filter((hd) => hd && typeof hd === 'object' && !Array.isArray(hd)) }));
      if (!waits.length) {
        root.appendChild(h('p', { class: 'muted', id: 'waits-empty', text: 'Request threads did not wait on a lock, the GIL, a queue or a pool in this run.' }));
        return;
      }
      root.appendChild(h('p', { class: 'muted small', text:
        'Where request threads blocked, ranked by thread-seconds waited. The holder is what the other ' +
        'threads were doing at the instants someone waited here (share of those instants). Click a heading to sort.' }));
      root.appendChild(waitsTable(waits, D.multiProcess));
      return;
    }
    // Reports without report.waits: the lock_contention finding's sites.
    const lock = arr(D.report.findings).map(obj).find((f) => str(f.id) === 'lock_contention');
    const sites = lock ? arr(lock.sites).map(obj) : [];
    if (sites.length) {
      root.appendChild(h('p', { class: 'muted small', text: 'Lock wait sites from the lock_contention finding (share of request-thread samples).' }));
      root.appendChild(sitesTable(sites));
    } else {
      root.appendChild(h('p', { class: 'muted', text: lock
        ? 'No lock waits were seen in request threads.'
        : 'No wait-site data in this report.' }));
    }
  }

  /** Whole percent, as in the summaries: "34%", "<1%".
   *  @param {unknown} frac */
  function pct0(frac) {
    if (!isNum(frac)) return '\u2014';
    const p = frac * 100;
    return p > 0 && p < 0.5 ? '<1%' : Math.round(p) + '%';
  }

  /** "A → B → C (82%)", each function its own span so long paths wrap at the arrows.
   *  @param {Partial<Model.Holder>} hd */
  function holderLine(hd) {
    const stack = arr(hd.stack).map(str).filter((n) => n !== '');
    const path = stack.length ? stack : [str(hd.function) || '?'];
    const where = fileLine(hd.file, hd.line);
    const title = 'innermost Python frame: ' + visStr(hd.function) + (where ? ' at ' + visStr(where) : '') +
      (isNum(hd.instants) ? '; seen at ' + fmtInt(hd.instants) + ' waiting instants' : '');
    const line = h('span', { class: 'holder', title, 'data-share': isNum(hd.share) ? hd.share : null });
    path.forEach((name, i) => {
      if (i) line.appendChild(h('span', { class: 'arrow', text: ' \u2192 ' }));
      line.appendChild(h('span', { class: 'frame-name', text: name }));
    });
    line.appendChild(h('span', { class: 'holder-share', text: ' (' + pct0(hd.share) + ')' }));
    return line;
  }

  /** @param {WaitRow} x */
  function holderCell(x) {
    const w = x.w;
    const scope = str(w.holder_scope);
    const cell = h('div', { class: 'holders' });
    if (!x.holders.length) {
      cell.appendChild(h('span', { class: 'muted', text: 'no holder seen' + (scope ? ' inside ' + scope : '') }));
      return cell;
    }
    cell.appendChild(holderLine(x.holders[0]));
    const rest = x.holders.slice(1);
    if (rest.length) {
      cell.appendChild(h('details', { class: 'more-holders' },
        h('summary', { text: rest.length + ' other holder' + (rest.length > 1 ? 's' : '') }),
        h('ol', { start: 2 }, rest.map((hd) => h('li', null, holderLine(hd))))));
    }
    if (scope) {
      const n = isNum(w.max_holders) && w.max_holders > 0 ? w.max_holders : null;
      cell.appendChild(h('div', {
        class: 'holder-scope muted small',
        title: 'holders are the threads found in this scope while others waited' +
          (n ? '; the most seen there at once (for a pool, a lower bound of its size)' : ''),
        text: (scope === 'running Python' ? 'threads running Python' : 'inside ' + scope) +
          (n ? ' \u00b7 at most ' + n + ' at once' : ''),
      }));
    }
    return cell;
  }

  /** @param {WaitRow[]} waits @param {boolean} showPid */
  function waitsTable(waits, showPid) {
    const n = (/** @type {unknown} */ v) => (isNum(v) ? v : null);
    /** @type {TableColumn<WaitRow>[]} */
    const cols = [
      { label: '#', value: (x) => x.rank, num: true, ascFirst: true, title: 'sort by rank' },
      {
        label: 'Kind', value: (x) => str(x.w.label) || str(x.w.kind),
        cell: (x) => h('span', { class: 'kind', 'data-kind': str(x.w.kind), title: str(x.w.kind), text: str(x.w.label) || str(x.w.kind) || '?' }),
        cls: 'nowrap',
      },
      {
        label: 'Site', value: (x) => str(x.w.function) + ' ' + basename(x.w.file) + ':' + str(x.w.line),
        cell: (x) => h('div', { class: 'site' },
          h('div', { class: 'mono site-fn', text: str(x.w.function) || '?' }),
          h('div', { class: 'mono path small site-file', title: visStr(fileLine(x.w.file, x.w.line)),
            text: fileLine(basename(x.w.file), x.w.line) }),
          showPid && Number.isInteger(x.w.pid)
            ? h('div', { class: 'small muted site-pid', text: 'process ' + x.w.pid }) : null),
        cls: 'site-col',
      },
      {
        label: 'Waited (thread-s)', value: (x) => n(x.w.thread_seconds), num: true,
        cell: (x) => (isNum(x.w.thread_seconds) ? fmtNum(x.w.thread_seconds) + ' s' : '\u2014'),
        title: 'sort by thread-seconds waited here, summed over threads',
      },
      { label: 'Threads', value: (x) => n(x.w.threads), num: true, title: 'sort by threads that waited here' },
      { label: 'Max waiting', value: (x) => n(x.w.max_concurrent), num: true, title: 'sort by most threads waiting here at one instant' },
      {
        label: 'Share of request time', value: (x) => n(x.w.share), cell: (x) => shareCell(x.w.share), num: true,
        title: 'sort by share of request-thread time spent waiting here',
      },
      {
        label: 'Holder (share of waiting instants)', value: (x) => (x.holders.length ? n(x.holders[0].share) : null),
        cell: holderCell, descFirst: true, cls: 'holder-col',
        title: 'sort by how often the top holder was seen while threads waited',
      },
    ];
    return sortableTable(cols, waits, {
      cls: 'waits', sortCol: 0, sortDir: 'asc',
      rowAttrs: (x) => ({
        class: 'wait-row', 'data-wait-rank': x.rank, 'data-kind': str(x.w.kind),
        'data-thread-seconds': n(x.w.thread_seconds) ?? '', 'data-threads': n(x.w.threads) ?? '',
        'data-max-concurrent': n(x.w.max_concurrent) ?? '', 'data-share': n(x.w.share) ?? '',
        'data-holders': x.holders.length,
      }),
      afterRow: (x, nCols) => {
        const summary = str(x.w.summary);
        if (!summary) return null;
        return h('tr', { class: 'wait-summary-row', 'data-summary-for': x.rank },
          h('td', { class: 'wait-summary', colspan: nCols, text: summary }));
      },
    });
  }

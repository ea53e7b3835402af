  // @ts-check
  // Report page script, part: the CPU account, one stacked bar of where the service's
  // core-seconds went. The parts share one scope: diagnose/render/html.py joins them in
  // PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ CPU account

  // A colour per part of the account (diagnose/model/vocab.py CpuPart); another part takes grey.
  const ACCOUNT_COLORS = {
    python: '#3f9b4a', native: '#1f8a99', collector: '#9b59b6', kernel: '#b7950b',
    children: '#4a74d0', reaped: '#7f8c8d', unexplained: '#c3c8d0',
  };

  /** The account's words (the data's `cpu_account_text`, render/cpu_account_words.py) as a
   *  bar, a legend and the summary; "not measured" where the report has no account.
   *  @param {PageData} D */
  function renderCpuAccount(D) {
    const root = clear(/** @type {HTMLElement} */ ($('cpu-account-body')));
    const words = D.cpuAccountText;
    if (!words || words.measured !== true) {
      const said = words && str(words.summary) ? str(words.summary) : 'not measured: this page was written before the CPU account';
      root.appendChild(h('p', { class: 'muted account-summary', id: 'cpu-account-summary', 'data-measured': 'false', text: said }));
      return;
    }
    root.appendChild(h('p', { class: 'account-summary', id: 'cpu-account-summary', 'data-measured': 'true', text: str(words.summary) }));
    const bar = h('div', { class: 'account-bar', id: 'cpu-account-bar', role: 'img' });
    const legend = h('div', { class: 'account-legend' });
    const spoken = [];
    for (const raw of arr(words.parts)) {
      const p = obj(raw);
      const part = str(p.part);
      const share = isNum(p.share) ? Math.max(0, Math.min(1, p.share)) : null;
      const color = Object.prototype.hasOwnProperty.call(ACCOUNT_COLORS, part)
        ? ACCOUNT_COLORS[/** @type {keyof typeof ACCOUNT_COLORS} */ (part)] : '#8a8f98';
      const tag = str(p.tag);
      const title = str(p.label) + ': ' + str(p.figure) + (tag ? ', ' + tag : '') + ' \u2014 ' + str(p.how);
      if (share != null && share > 0) {
        const seg = h('span', { class: 'account-seg', 'data-part': part, 'data-share': share, title });
        seg.style.width = (share * 100) + '%';
        seg.style.backgroundColor = color;
        bar.appendChild(seg);
      }
      const sw = h('span', { class: 'swatch' });
      sw.style.backgroundColor = color;
      legend.appendChild(h('span', { class: 'account-part', 'data-part': part, 'data-tag': tag || 'not measured', title: str(p.how) },
        sw, h('span', { class: 'account-label', text: str(p.label) }), ' ',
        h('span', { class: tag ? 'account-figure' : 'account-figure muted', text: str(p.figure) }),
        tag === 'estimate' ? h('span', { class: 'tag est', text: 'estimate' }) : null));
      spoken.push(str(p.label) + ' ' + str(p.figure));
    }
    bar.setAttribute('aria-label', spoken.join(', '));
    root.appendChild(bar);
    root.appendChild(legend);
    for (const note of arr(words.notes)) root.appendChild(h('p', { class: 'muted small', text: str(note) }));
  }

  // @ts-check
  // Report page script, part: the verdict header, the findings and the run facts. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 1. verdict header

  // The top finding's advice shown under the verdict: its first lines say what limits the
  // service and the first change to make; the rest stays in the finding.
  const FIRST_SCREEN_ADVICE = 2;

  /** @param {PageData} D */
  function renderHeader(D) {
    const root = /** @type {HTMLElement} */ ($('verdict'));
    const r = D.report;
    const v = obj(r.verdict);
    const s = obj(r.sampling);
    const t = obj(r.target);
    clear(root);

    const top = h('div', { class: 'verdict-top' },
      h('span', { class: 'brand', text: 'diagnose' }),
      badge(v.severity),
      str(v.confidence) === 'low' ? confidenceBadge(v.samples, 'verdict-confidence') : null);
    if (v.primary != null && v.primary !== '') {
      const id = str(v.primary);
      const known = arr(r.findings).some((f) => f && str(f.id) === id);
      let ref;
      if (known) {
        ref = h('button', { type: 'button', class: 'linkish', id: 'primary-finding', text: id });
        ref.addEventListener('click', () => openFinding(id));
      } else {
        ref = h('span', { class: 'mono', id: 'primary-finding', text: id });
      }
      top.appendChild(h('span', { class: 'primary-id' }, 'primary finding: ', ref));
    }
    root.appendChild(top);
    root.appendChild(h('h1', { id: 'verdict-headline', text: str(v.headline) || 'No verdict' }));
    // Two findings within the noise of each other: the verdict names both, why, and each first advice.
    if (v.co_primary != null && v.co_primary !== '') {
      const co = h('div', { class: 'verdict-co-primary', id: 'verdict-co-primary' },
        h('p', { text: 'Co-primary finding: ' + str(v.co_primary) + ' \u2014 ' + str(v.co_primary_reason) }));
      const advice = arr(v.first_advice);
      const list = h('ul', { class: 'first-advice' });
      [v.primary, v.co_primary].forEach((id, i) => {
        if (advice[i]) list.appendChild(h('li', { text: 'First advice for ' + str(id) + ': ' + str(advice[i]) }));
      });
      if (list.childNodes.length) co.appendChild(list);
      root.appendChild(co);
    }
    // Findings folded into the verdict: the same cause seen from another side (arbiter rule 7).
    const also = arr(v.also).map(str).filter((id) => id);
    if (also.length) {
      root.appendChild(h('p', { class: 'verdict-also', id: 'verdict-also',
        text: 'The same cause, also seen as: ' + also.join(', ') }));
    }
    const deadlock = deadlockBlock(r);
    if (deadlock) root.appendChild(deadlock);
    // What fixing the top finding can buy (the findings come ranked: the first is the top one).
    const ranked = arr(r.findings).map(obj);
    const first = ranked.find((f) => v.primary != null && str(f.id) === str(v.primary)) || ranked[0];
    const firstWords = gainWords(D, ranked.indexOf(first));
    if (first && (isNum(first.predicted_gain) || leversOf(first, firstWords).length)) {
      const gain = /** @type {HTMLElement} */ (gainBlock(first, firstWords, 'verdict', 'Predicted gain from fixing the top finding'));
      gain.id = 'verdict-gain';
      gain.setAttribute('data-finding-id', str(first.id));
      root.appendChild(gain);
    }
    // What to change, on the first screen: the top finding's first advice (a co-primary verdict
    // lists each one's above), the rest in the finding below.
    const todo = v.co_primary != null && v.co_primary !== '' ? [] : arr(first ? first.advice : null).map(str).filter((a) => a);
    if (todo.length) {
      const shown = todo.slice(0, FIRST_SCREEN_ADVICE);
      root.appendChild(h('div', { class: 'verdict-advice', id: 'verdict-advice', 'data-finding-id': str(first.id) },
        h('p', { class: 'verdict-advice-title', text: 'What to do' }),
        h('ul', { class: 'advice' }, shown.map((a) => h('li', { text: a }))),
        todo.length > shown.length
          ? h('p', { class: 'small muted', text: (todo.length - shown.length) + ' more in the finding below' }) : null));
    }

    const meta = [];
    if (t.pid != null) meta.push('pid ' + str(t.pid));
    if (isNum(s.duration_s)) meta.push(fmtNum(s.duration_s) + ' s sampled');
    if (isNum(s.samples)) meta.push(fmtInt(s.samples) + ' samples');
    if (D.generatedAt) meta.push('generated ' + D.generatedAt);
    root.appendChild(h('p', { class: 'verdict-meta', text: meta.join(' \u00b7 ') }));

    const notes = arr(s.notes).filter((n) => str(n) !== '');
    const warning = observerWarning(s);
    if (s.partial === true || notes.length || D.dropped || warning) {
      const banner = h('div', {
        class: 'banner' + (warning || s.partial === true ? ' strong' : ''),
        id: 'sampling-banner', role: 'note',
      });
      if (warning) {
        const more = h('button', { type: 'button', class: 'linkish', text: 'what sampling cost the target' });
        more.addEventListener('click', () => {
          const el = $('observer-cost');
          if (el) el.scrollIntoView({ block: 'center' });
        });
        banner.appendChild(h('p', { class: 'banner-title', id: 'observer-warning' },
          '\u26a0 Observer effect: ', h('span', { class: 'warning-text', text: warning })));
        banner.appendChild(h('p', { class: 'small' },
          'The sampler disturbed the process it measured; weigh the findings below with that in mind (see ',
          more, ').'));
      }
      if (s.partial === true) {
        banner.appendChild(h('p', { class: 'banner-title', text: '\u26a0 Warning: target exited during sampling \u2014 partial data' }));
      } else if (notes.length && !warning) {
        banner.appendChild(h('p', { class: 'banner-title', text: '\u26a0 Sampling notes' }));
      }
      if (notes.length) banner.appendChild(h('ul', null, notes.map((n) => h('li', { text: n }))));
      if (D.dropped) {
        banner.appendChild(h('p', { text: D.dropped + ' malformed stack rows were ignored by this page.' }));
      }
      root.appendChild(banner);
    }
  }

  // A deadlock, thread by thread as a thread dump prints it: the lock each thread holds, the one
  // it waits for and who holds that (checks/deadlock.py's `deadlocks` evidence). Text only.
  /** @param {Partial<Model.Report>} r */
  function deadlockBlock(r) {
    const f = arr(r.findings).map(obj).find((x) => str(x.id) === 'deadlock');
    // Each entry read defensively, typed as the check writes it (Model.ReportedDeadlock), so a
    // renamed key fails the type check here as it fails Python's.
    const cycles = f ? arr(obj(f.evidence).deadlocks)
      .map((d) => /** @type {Partial<Model.ReportedDeadlock>} */ (obj(d)))
      .filter((d) => arr(d.threads).length >= 2) : [];
    if (!cycles.length) return null;
    const where = (/** @type {Partial<Model.ReportedLock>} */ l) => {
      const parts = str(l.file).split('/');
      return parts.slice(-2).join('/') + ':' + str(l.line);
    };
    const lock = (/** @type {unknown} */ raw) => {
      const l = /** @type {Partial<Model.ReportedLock>} */ (obj(raw));
      return str(l.qualified || l.name) + ' (' + where(l) + ')';
    };
    const box = h('div', { class: 'verdict-deadlock', id: 'verdict-deadlock' },
      h('p', { class: 'banner-title',
        text: cycles.length === 1 ? 'Found one deadlock:' : 'Found ' + cycles.length + ' deadlocks:' }));
    cycles.forEach((d) => {
      const list = h('ul', { class: 'mono' });
      arr(d.threads).map((t) => /** @type {Partial<Model.DeadlockedThread>} */ (obj(t))).forEach((t) => {
        list.appendChild(h('li', { class: 'deadlock-thread' },
          h('strong', { text: '"' + str(t.thread) + '"' }),
          ' holds ' + lock(t.holds) + ', waits for ' + lock(t.waits_for) + ', held by "' + str(t.held_by) + '"'));
      });
      const victims = arr(d.victims).map((v) => /** @type {Partial<Model.DeadlockVictim>} */ (obj(v)));
      const noun = d.kind === 'await_cycle' ? 'task' : 'thread';  // an await cycle among tasks
      if (victims.length) {
        const named = victims.slice(0, 8).map((v) => str(v.thread)).join(', ');
        const more = victims.length > 8 ? ' and ' + (victims.length - 8) + ' more' : '';
        list.appendChild(h('li', { class: 'deadlock-victims',
          text: (victims.length === 1 ? '1 more ' + noun + ' waits' : victims.length + ' more ' + noun + 's wait') +
            ' behind it: ' + named + more }));
      }
      box.appendChild(list);
    });
    return box;
  }

  /** @param {string} id */
  function openFinding(id) {
    const target = /** @type {HTMLDetailsElement[]} */ (Array.from(document.querySelectorAll('details.finding')))
      .find((d) => d.getAttribute('data-finding-id') === id);
    if (!target) return;
    target.open = true;
    target.scrollIntoView({ block: 'start' });
  }

  /** The finding's gain in words, worded by diagnose (render/wording.py; the page data's
   *  `gain_text`, parallel to the report's findings): {text, tag, figure, estimate, levers:
   *  [{figure, estimate, text}], notes}; {} when the page has none for it.
   *  @param {PageData} D
   *  @param {number} rank @returns {Partial<Model.GainWords>} */
  function gainWords(D, rank) {
    const all = D.gainText;
    return all.length === arr(D.report.findings).length && rank >= 0 ? obj(all[rank]) : {};
  }

  /** The finding's levers that have a figure and words, each with its words: [{l: {kind, gain,
   *  label, basis, upper_bound}, w: {figure, estimate}}]; none when the words do not fit them.
   *  @param {Partial<Model.Finding>} f @param {Partial<Model.GainWords>} words */
  function leversOf(f, words) {
    const levers = arr(f.levers).map(obj).filter((l) => isNum(l.gain) && str(l.label) !== '');
    const said = arr(words.levers).map(obj);
    return said.length === levers.length ? levers.map((l, i) => ({ l, w: said[i] })) : [];
  }

  /** "(estimate)", or "(estimate, upper bound)" for a lever that makes the work free;
   *  "(calibrated)" for one resting on a constant fitted to measured fixes.
   *  @param {unknown} text */
  function estimateTag(text) {
    const calibrated = str(text).startsWith('(calibrated');
    return h('span', {
      class: 'gain-est',
      title: calibrated ? 'an estimate with a constant fitted to measured fixes, not a measurement'
        : 'an estimate from the structure found, not a measurement',
      text: str(text),
    });
  }

  /** "Predicted gain: \u00d72.18 (estimate)" and, beneath it, the inputs of the estimate. A finding
   *  with levers states each instead: "\u00d74.17 if checksum cost nothing (estimate, upper bound)
   *  \u00b7 \u00d71.00 from more cores (estimate)", each lever's inputs beneath.
   *  `prefix` names the classes (f-gain* for a finding, verdict-gain* for the header).
   *  @param {Partial<Model.Finding>} f @param {Partial<Model.GainWords>} words @param {string} prefix
   *  @param {string} [label] */
  function gainBlock(f, words, prefix, label) {
    const g = isNum(f.predicted_gain) ? f.predicted_gain : null;
    const basis = str(f.gain_basis);
    const levers = leversOf(f, words);
    if (g == null && basis === '' && !levers.length) return null;
    const line = h('p', { class: prefix + '-gain-line' }, h('span', { class: 'gain-label', text: (label || 'Predicted gain') + ': ' }));
    if (levers.length) {
      levers.forEach(({ l, w }, i) => {
        if (i) line.appendChild(document.createTextNode(' \u00b7 '));
        line.appendChild(h('span', { class: 'gain-lever', 'data-kind': str(l.kind), 'data-gain': l.gain },
          h('strong', { class: 'gain-value', title: 'throughput with the lever pulled / throughput now', text: str(w.figure) }),
          ' ', h('span', { class: 'lever-label', text: str(l.label) }), ' ', estimateTag(w.estimate)));
      });
    } else if (words.figure == null) {
      line.appendChild(h('span', { class: 'muted gain-value', text: 'not estimated' }));
    } else {
      line.appendChild(h('strong', { class: 'gain-value', title: 'throughput with the fix / throughput now', text: str(words.figure) }));
      line.appendChild(document.createTextNode(' '));
      line.appendChild(estimateTag(words.estimate));
    }
    const bases = levers.length
      ? levers.map(({ l }) => l).filter((l) => str(l.basis) !== '').map((l) => h('p', {
        class: prefix + '-lever-basis gain-basis small', 'data-kind': str(l.kind), text: str(l.basis),
      }))
      : [basis !== '' ? h('p', { class: prefix + '-gain-basis gain-basis small', text: basis }) : null];
    // why the gain is a lower bound, what the check could not see, how such predictions fared
    const notes = arr(words.notes).map((n) => h('p', { class: prefix + '-gain-note gain-note small', text: str(n) }));
    return h('div', { class: prefix + '-gain gain', 'data-gain': g, 'data-levers': levers.length || null },
      line, bases, notes);
  }

  /** evidence.fix, the first advice as a knob: "Knob: OPENBLAS_NUM_THREADS = 1".
   *  @param {Model.JsonValue | undefined} fix */
  function knobLine(fix) {
    const o = obj(fix);
    if (o.knob == null || str(o.knob) === '') return null;
    const v = o.value;
    const value = v == null ? h('span', { class: 'muted', text: '\u2014' })
      : typeof v === 'object' ? valueNode(v, 'value') : h('span', { text: String(v) });
    const stage = o.stage == null || str(o.stage) === '' ? null : str(o.stage);
    return h('p', { class: 'f-knob', 'data-knob': str(o.knob) },
      h('span', { class: 'knob-label', text: 'Knob: ' }),
      h('code', { class: 'knob' }, h('span', { class: 'knob-name', text: str(o.knob) }), ' = ',
        h('span', { class: 'knob-value' }, value)),
      stage ? h('span', { class: 'knob-stage' }, ' for stage ', h('span', { class: 'mono', text: stage })) : null);
  }

  // ------------------------------------------------------------------ 2. findings

  /** @param {PageData} D */
  function renderFindings(D) {
    const root = clear(/** @type {HTMLElement} */ ($('findings-body')));
    const primary = str(obj(D.report.verdict).primary);
    // Ranked by diagnose (score, and among critical findings what fixing them can buy): shown in
    // the report's order, never re-sorted here.
    const findings = arr(D.report.findings).map(obj);
    if (!findings.length) root.appendChild(h('p', { class: 'muted', text: 'No findings.' }));
    findings.forEach((f, rank) => {
      // a check that found nothing, unless the verdict names it as possible (its interval
      // reaches the info line): then it is shown as the finding the headline is about
      if (str(f.severity) === 'ok' && str(f.id) !== primary) {
        root.appendChild(alsoChecked(D, f, rank));
        return;
      }
      const isPrimary = primary !== '' && str(f.id) === primary;
      const det = h('details', {
        class: 'finding' + (isPrimary ? ' primary' : ''),
        id: 'finding-' + rank,
        'data-finding-id': str(f.id),
        'data-rank': rank + 1,
        open: rank < 3,
      });
      det.appendChild(h('summary', null,
        h('span', { class: 'f-rank', text: '#' + (rank + 1) }),
        h('span', { class: 'f-title', text: str(f.title) || str(f.id) }),
        badge(f.severity),
        f.low_confidence === true ? confidenceBadge(f.samples, null, 'f-conf') : null,
        h('span', { class: 'f-score', text: 'score ' + fmtNum(f.score) }),
        gainTag(f, gainWords(D, rank)),
        isPrimary ? h('span', { class: 'tag', text: 'primary' }) : null,
        h('span', { class: 'f-id', text: str(f.id) })));

      const body = h('div', { class: 'finding-body' });
      if (f.summary != null) body.appendChild(h('p', { class: 'f-summary', text: f.summary }));
      const gain = gainBlock(f, gainWords(D, rank), 'f');
      if (gain) body.appendChild(gain);
      const knob = knobLine(obj(f.evidence).fix);
      if (knob) body.appendChild(knob);

      evidenceBlock(D, f, rank, body, knob);

      const sites = arr(f.sites).map(obj);
      if (sites.length) {
        body.appendChild(h('h4', { text: 'Where' }));
        body.appendChild(sitesTable(sites));
      }

      const advice = arr(f.advice);
      if (advice.length) {
        body.appendChild(h('h4', { text: 'What to do' }));
        body.appendChild(h('ul', { class: 'advice' }, advice.map((a) => h('li', { text: a }))));
      }
      det.appendChild(body);
      root.appendChild(det);
    });
    const na = arr(D.report.not_applicable).map(obj).filter((n) => n.id != null);
    if (na.length) {
      root.appendChild(h('div', { class: 'not-applicable', id: 'not-applicable' },
        h('h4', { text: 'Checks that could not run' }),
        h('ul', null, na.map((n) => h('li', null,
          h('span', { class: 'mono', text: str(n.id) }), ': ', h('span', { text: str(n.reason) }))))));
    }
  }

  /** The summary line's gain: "\u00d72.18 est.", or each lever's figure ("\u00d74.17 \u00b7 \u00d71.00 est."),
   *  as worded by diagnose.
   *  @param {Partial<Model.Finding>} f @param {Partial<Model.GainWords>} words */
  function gainTag(f, words) {
    const levers = leversOf(f, words);
    if (levers.length) {
      return h('span', {
        class: 'f-gain-tag', 'data-levers': levers.length,
        title: 'estimates: ' + levers.map(({ l, w }) => str(w.figure) + ' ' + str(l.label)).join('; '),
        text: str(words.tag),
      });
    }
    return words.figure != null ? h('span', {
      class: 'f-gain-tag', title: 'predicted throughput gain if fixed (an estimate)',
      text: str(words.tag),
    }) : null;
  }

  /** What a check that found nothing cleared it with: its summary, else the share its score rests on.
   *  @param {Partial<Model.Finding>} f */
  function clearedBy(f) {
    if (str(f.summary) !== '') return str(f.summary);
    const key = f.basis_key == null ? '' : str(f.basis_key);
    const v = obj(f.evidence)[key];
    return key !== '' && isNum(v) ? key.replace(/_/g, ' ') + ': ' + fmtPct(v) : '';
  }

  /** A check that found nothing (severity ok): one line, "also checked: <title> \u2014 <the figure
   *  that cleared it>", with no gain and no advice; its evidence and sites stay one click away.
   *  @param {PageData} D @param {Partial<Model.Finding>} f @param {number} rank */
  function alsoChecked(D, f, rank) {
    const figure = clearedBy(f);
    const det = h('details', {
      class: 'finding also-checked', id: 'finding-' + rank, 'data-finding-id': str(f.id),
      'data-rank': rank + 1, 'data-severity': 'ok',
    });
    det.appendChild(h('summary', null,
      h('span', { class: 'also-label', text: 'also checked: ' }),
      h('span', { class: 'f-title', text: str(f.title) || str(f.id) }),
      figure !== '' ? h('span', { class: 'also-figure' }, ' \u2014 ', h('span', { text: figure })) : null,
      h('span', { class: 'f-id', text: str(f.id) })));
    const body = h('div', { class: 'finding-body' });
    evidenceBlock(D, f, rank, body, null);
    const sites = arr(f.sites).map(obj);
    if (sites.length) {
      body.appendChild(h('h4', { text: 'Where' }));
      body.appendChild(sitesTable(sites));
    }
    det.appendChild(body);
    return det;
  }

  /** The finding's evidence table: labelled rows when the page has them, else the raw values.
   *  @param {PageData} D @param {Partial<Model.Finding>} f @param {number} rank
   *  @param {HTMLElement} body @param {HTMLElement | null} knob the knob line, when shown */
  function evidenceBlock(D, f, rank, body, knob) {
    const ev = obj(f.evidence);
    const labelled = evidenceRows(D, f, rank);
    if (labelled) {
      // Labels and values with their units, made by diagnose (render/evidence.py).
      if (labelled.length) {
        body.appendChild(h('h4', { text: 'Evidence' }));
        body.appendChild(h('table', { class: 'kv evidence labelled' }, h('tbody', null, labelled.map((r) =>
          h('tr', { 'data-key': r.key, 'data-flag': r.flag == null ? null : str(r.flag) },
            h('th', { scope: 'row', text: str(r.label) || r.key }), evidenceCell(r))))));
      }
    }
    // Older pages: the raw evidence; evidence.fix is the knob line above.
    const evKeys = labelled ? [] : Object.keys(ev).filter((k) => !(k === 'fix' && knob));
    if (evKeys.length) {
      body.appendChild(h('h4', { text: 'Evidence' }));
      body.appendChild(h('table', { class: 'kv evidence' }, h('tbody', null, evKeys.map((k) =>
        h('tr', { 'data-key': k }, h('th', { scope: 'row', text: k }),
          h('td', { class: isNum(ev[k]) ? 'num' : '' }, valueNode(ev[k], k)))))));
    }
  }

  /** "low confidence: 41 samples": the shares behind a finding (or the verdict) rest on too few
   *  samples to be trusted.
   *  @param {unknown} samples @param {string | null} id @param {string} [cls] */
  function confidenceBadge(samples, id, cls) {
    return h('span', {
      class: 'badge conf-low' + (cls ? ' ' + cls : ''), id: id || null,
      'data-samples': isNum(samples) ? samples : null,
      title: 'few samples behind these shares: they could be far off; sample longer',
      text: 'low confidence' + (isNum(samples) ? ': ' + fmtInt(samples) + ' samples' : ''),
    });
  }

  /** The finding's evidence as labelled rows (page data `evidence_text`, parallel to the
   *  report's findings), or null when the page has none that fits this finding.
   *  @param {PageData} D @param {Partial<Model.Finding>} f @param {number} rank */
  function evidenceRows(D, f, rank) {
    const all = D.evidenceText;
    if (!all || all.length !== arr(D.report.findings).length || !Array.isArray(all[rank])) return null;
    // Only rows made for exactly this evidence, key for key: never another finding's values.
    const keys = Object.keys(obj(f.evidence)).filter((k) => !D.evidenceHidden.has(k));
    const rows = all[rank].map(obj);
    const fits = rows.length === keys.length && rows.every((r, i) => r.key === keys[i]);
    return fits ? rows : null;
  }

  /** A labelled evidence value: its text, or a name/value list for a dict.
   *  @param {Partial<Model.EvidenceRow>} r */
  function evidenceCell(r) {
    const iv = obj(r.interval);
    const td = h('td', {
      class: 'ev-text',
      title: isNum(iv.samples) ? 'range: 95% Wilson interval over ' + fmtInt(iv.samples) + ' samples' : null,
    });
    const items = arr(r.items).filter(Array.isArray);
    if (items.length) {
      td.appendChild(h('dl', { class: 'kv-nested' }, items.map((it) => [
        h('dt', { text: str(it[0]) }), h('dd', { text: str(it[1]) })])));
      if (r.flag != null) td.appendChild(h('span', { class: 'ev-flag', text: '(' + str(r.flag) + ')' }));
    } else {
      putText(td, str(r.text));
    }
    return td;
  }

  /** Keys whose numbers are fractions, shown as percentages: *_share, *_shares, *_share_of_*,
   *  *_share_per_*, share_of_*, anything with "utilization", *_fraction, *error_rate.
   *  @param {unknown} k */
  function isShareKey(k) {
    const s = str(k).toLowerCase();
    return /(^|_)shares?($|_)/.test(s) || s.includes('utilization') || /(^|_)(fraction|error_rate)$/.test(s);
  }

  const MAX_VALUE_DEPTH = 4;

  /** A value of any JSON shape as DOM: numbers rounded (percentages for share keys, inherited by
   *  nested values), null as a dash, booleans as yes/no, objects as a nested key/value list,
   *  arrays as a list. Never JSON text.
   *  @param {unknown} v @param {unknown} key @param {boolean} [asShare] @param {number} [depth]
   *  @returns {HTMLElement} */
  function valueNode(v, key, asShare, depth) {
    const share = asShare === true || isShareKey(key);
    const d = depth || 0;
    if (v == null) return h('span', { class: 'muted', text: '\u2014' });
    if (typeof v === 'boolean') return h('span', { text: v ? 'yes' : 'no' });
    // a process id is a name, not a quantity: no thousands separator
    if (isNum(v) && /(^|_)pids?$/.test(str(key).toLowerCase())) return h('span', { class: 'v-num', text: String(v) });
    if (isNum(v)) return h('span', { class: 'v-num', text: share ? fmtPct(v) : fmtNum(v) });
    if (typeof v !== 'object') return h('span', { text: str(v) });
    if (d >= MAX_VALUE_DEPTH) return h('span', { class: 'muted', text: '\u2026' });
    if (Array.isArray(v)) {
      if (!v.length) return h('span', { class: 'muted', text: 'none' });
      if (v.every((x) => x == null || typeof x !== 'object')) {
        return h('span', null, v.map((x, i) => [i ? ', ' : null, valueNode(x, key, share, d + 1)]));
      }
      return h('ol', { class: 'kv-list' }, v.map((x) => h('li', null, valueNode(x, key, share, d + 1))));
    }
    const o = /** @type {Record<string, unknown>} */ (v);
    const keys = Object.keys(o);
    if (!keys.length) return h('span', { class: 'muted', text: 'none' });
    return h('dl', { class: 'kv-nested' }, keys.map((k) => [
      h('dt', { text: k }), h('dd', null, valueNode(o[k], k, share, d + 1))]));
  }

  /** @param {unknown} share */
  function shareCell(share) {
    if (!isNum(share)) return h('span', { class: 'muted', text: '\u2014' });
    const bar = h('span', { class: 'share-bar' });
    const fill = h('span', { class: 'share-fill' });
    fill.style.width = Math.max(0, Math.min(100, share * 100)) + '%';
    bar.appendChild(fill);
    return h('span', { class: 'share' }, bar, h('span', { class: 'share-pct', text: fmtPct(share) }));
  }

  /** Ranked sites table. `share` is a fraction of samples in [0, 1].
   *  @param {Partial<Model.Site>[]} sites */
  function sitesTable(sites) {
    return h('div', { class: 'table-wrap' }, h('table', { class: 'data sites' },
      h('thead', null, h('tr', null,
        h('th', { scope: 'col', class: 'num', text: '#' }),
        h('th', { scope: 'col', text: 'Function' }),
        h('th', { scope: 'col', text: 'File:line' }),
        h('th', { scope: 'col', class: 'num', text: 'Share' }))),
      h('tbody', null, sites.map((s, i) => h('tr', null,
        h('td', { class: 'num', text: String(i + 1) }),
        h('td', { class: 'mono', text: s.function }),
        h('td', { class: 'mono path', text: fileLine(s.file, s.line) }),
        h('td', { class: 'num' }, shareCell(s.share)))))));
  }

  // ------------------------------------------------------------------ 3. run facts

  /** Seconds since the epoch as a UTC time ("2026-12-04 06:38:43").
   *  @param {unknown} v */
  function utcTime(v) {
    if (!isNum(v)) return '\u2014';
    return new Date(v * 1000).toISOString().slice(0, 19).replace('T', ' ');
  }

  /** @param {PageData} D */
  function renderFacts(D) {
    const root = clear(/** @type {HTMLElement} */ ($('facts-body')));
    const t = obj(D.report.target);
    const s = obj(D.report.sampling);
    const yesNo = (/** @type {unknown} */ b) => (b === true ? 'yes' : b === false ? 'no' : '\u2014');
    const unit = (/** @type {unknown} */ v, /** @type {string} */ u) => (isNum(v) ? fmtNum(v) + u : '\u2014');
    /** @type {[string, string, string | Node][]} */
    const facts = [
      ['pid', 'PID', str(t.pid)],
      ['python', 'Python', str(t.python)],
      ['cores', 'CPU cores', fmtNum(t.cores)],
      ['threads', 'Threads', fmtNum(t.threads)],
      ['duration', 'Duration', unit(s.duration_s, ' s')],
      ['samples', 'Samples', fmtInt(s.samples)],
      ['native', 'Native frames', yesNo(s.native)],
      ['mode', 'Mode', str(s.mode)],
      ['partial', 'Partial', s.partial === true ? 'yes \u2014 target exited' : s.partial === false ? 'no' : '\u2014'],
    ];
    // Optional facts: shown when the report has them. Rate, errors and the sampler's own cost
    // are in the observer block below.
    /** @type {(OptionalFact<Model.Target> | OptionalFact<Model.Sampling>)[]} */
    const optional = [
      [t, 'cpu_quota_cores', 'cpu-quota', 'CPU quota (cores)', (v) => unit(v, '')],
      [s, 'requested_duration_s', 'requested-duration', 'Requested duration', (v) => unit(v, ' s')],
      [s, 'thread_samples', 'thread-samples', 'Thread samples', fmtInt],
      [s, 'state_estimated', 'state-estimated', 'States estimated', yesNo],
      [s, 'proc_interval_s', 'proc-interval', '/proc read every', (v) => unit(v, ' s')],
      [s, 'pyspy_version', 'pyspy-version', 'py-spy version', str],
      [s, 'started_at', 'started-at', 'Started (UTC)', utcTime],
    ];
    for (const [src, k, key, label, fmt] of optional) {
      if (k in src) facts.push([key, label, fmt(/** @type {Record<string, unknown>} */ (src)[k])]);
    }
    // Anything newer in target/sampling that this page does not know yet: show it plainly.
    // (each a key of Model.Target or Model.Sampling: a renamed one fails the type check)
    /** @type {string[]} */
    const knownKeys = /** @satisfies {(keyof Model.Target | keyof Model.Sampling)[]} */ (['pid', 'python', 'cmdline', 'threads', 'cores', 'duration_s', 'rate_hz', 'samples', 'errors',
      'native', 'mode', 'partial', 'notes', 'achieved_rate_hz', 'paused_share', 'observer', 'plan',
      'pyspy_cpu_s', 'pyspy_cpu_share_of_cores']);
    const known = new Set(knownKeys.concat(optional.map((o) => o[1])));
    for (const src of [t, s]) {
      for (const k of Object.keys(src)) {
        if (!known.has(k)) facts.push(['extra', k.replace(/_/g, ' '), valueNode(/** @type {Record<string, unknown>} */ (src)[k], k)]);
      }
    }
    const dl = h('dl', { class: 'facts' });
    for (const [key, k, v] of facts) {
      // A list or a nested map takes the whole row: in a grid cell it ran into its neighbours.
      const nested = v instanceof Element && (v.tagName === 'DL' || v.tagName === 'OL');
      dl.appendChild(h('div', { class: nested ? 'fact nested' : 'fact', 'data-fact': key }, h('dt', { text: k }),
        v instanceof Node ? h('dd', null, v) : h('dd', { text: v || '\u2014' })));
    }
    root.appendChild(dl);
    root.appendChild(observerBlock(s, D.observerCpuText));
    const cmd = Array.isArray(t.cmdline) ? t.cmdline.map(shellQuote).join(' ') : str(t.cmdline);
    root.appendChild(h('div', { class: 'cmdline' },
      h('div', { class: 'cmd-label', text: 'Command line' }),
      h('code', { id: 'cmdline', text: cmd || '\u2014' })));
  }

  /** sampling.observer, or what older reports had of it in sampling itself.
   *  @param {Partial<Model.Sampling>} s */
  function observerOf(s) {
    const o = obj(s.observer);
    /** @type {(k: keyof Model.Observer, alt?: unknown) => unknown} */
    const pick = (k, alt) => (k in o ? o[k] : alt === undefined ? null : alt);
    return {
      paused_share: pick('paused_share', s.paused_share),
      pyspy_cpu_s: pick('pyspy_cpu_s', s.pyspy_cpu_s),
      pyspy_cpu_share_of_cores: pick('pyspy_cpu_share_of_cores', s.pyspy_cpu_share_of_cores),
      requested_rate_hz: pick('requested_rate_hz', s.rate_hz),
      achieved_rate_hz: pick('achieved_rate_hz', s.achieved_rate_hz),
      errors: pick('errors', s.errors),
      error_rate: pick('error_rate'),
      torn_stacks_possible: pick('torn_stacks_possible'),
      plan: pick('plan', s.plan),
      warning: pick('warning'),
    };
  }

  /** @param {Partial<Model.Sampling>} s */
  function observerWarning(s) {
    const w = observerOf(s).warning;
    return w == null || str(w) === '' ? '' : str(w);
  }

  /** "What sampling cost the target": the observer's own effect on what it measured.
   *  `cpuText`: the observer's CPU beside the target's, in words ('' when not measured).
   *  @param {Partial<Model.Sampling>} s @param {string} cpuText */
  function observerBlock(s, cpuText) {
    const o = observerOf(s);
    const num = (/** @type {unknown} */ v) => (isNum(v) ? v : null);
    /** @type {ElementAttrs} */
    const attrs = { id: 'observer-cost', class: 'observer', 'aria-labelledby': 'observer-h' };
    for (const k of /** @satisfies {(keyof typeof o)[]} */ (['paused_share', 'pyspy_cpu_s', 'pyspy_cpu_share_of_cores', 'requested_rate_hz',
      'achieved_rate_hz', 'errors', 'error_rate'])) {
      if (num(o[k]) != null) attrs['data-' + k.replace(/_/g, '-')] = String(o[k]);
    }
    // The observer's CPU over the window (diagnose and its recorders) beside the target's.
    const cpuFigures = obj(s.observer);
    for (const k of /** @satisfies {(keyof Model.Observer)[]} */ (['observer_cpu_s', 'observer_cores', 'target_cores'])) {
      if (num(cpuFigures[k]) != null) attrs['data-' + k.replace(/_/g, '-')] = String(cpuFigures[k]);
    }
    if (typeof o.torn_stacks_possible === 'boolean') attrs['data-torn-stacks-possible'] = String(o.torn_stacks_possible);
    const warning = observerWarning(s);
    attrs['data-warning'] = warning ? 'true' : 'false';
    const box = h('div', attrs);
    box.appendChild(h('h3', { id: 'observer-h', text: 'What sampling cost the target' }));

    const notMeasured = 'not measured';
    let rate;
    const achieved = num(o.achieved_rate_hz);
    const requested = num(o.requested_rate_hz);
    if (achieved != null && requested) {
      rate = fmtNum(achieved) + ' of ' + fmtNum(requested) + ' Hz (' + fmtPct(achieved / requested) + ')';
    } else if (achieved != null) {
      rate = fmtNum(achieved) + ' Hz (requested: \u2014)';
    } else if (requested) {
      rate = 'requested ' + fmtNum(requested) + ' Hz, achieved ' + notMeasured;
    } else {
      rate = notMeasured;
    }
    let cpu = notMeasured;
    if (num(o.pyspy_cpu_s) != null) {
      cpu = fmtNum(o.pyspy_cpu_s) + ' s' +
        (num(o.pyspy_cpu_share_of_cores) != null ? ' (' + fmtPct(o.pyspy_cpu_share_of_cores) + ' of the cores)' : '');
    } else if (num(o.pyspy_cpu_share_of_cores) != null) {
      cpu = fmtPct(o.pyspy_cpu_share_of_cores) + ' of the cores';
    }
    let errors = notMeasured;
    if (num(o.errors) != null) {
      errors = fmtInt(o.errors) + (num(o.error_rate) != null && /** @type {number} */ (o.errors) > 0 ? ' (' + fmtPct(o.error_rate) + ' of samples)' : '');
    }
    const torn = o.torn_stacks_possible === true ? 'possible (non-blocking sampling)'
      : o.torn_stacks_possible === false ? 'no' : notMeasured;
    const items = [
      ['paused', 'Target paused by the sampler',
        num(o.paused_share) != null ? fmtPct(o.paused_share) : notMeasured,
        'share of /proc observations of target threads that found them stopped by py-spy'],
      ['pyspy-cpu', 'py-spy CPU', cpu, 'CPU time py-spy itself used; on a small machine it competes with the target'],
      ['observer-cpu', 'Observer CPU', cpuText || notMeasured,
        'CPU diagnose and every process it started (py-spy\'s recorders) used over the window, beside the target\'s own, measured from /proc'],
      ['rate', 'Achieved / requested rate', rate, 'sampler ticks per second, against the rate asked for'],
      ['errors', 'Sampling errors', errors, 'samples py-spy could not take'],
      ['torn', 'Stacks may be torn', torn,
        'non-blocking sampling reads a thread while it runs, so a stack can mix frames from two moments'],
    ];
    const dl = h('dl', { class: 'facts observer-facts' });
    for (const [key, label, value, title] of items) {
      dl.appendChild(h('div', { class: 'fact', 'data-observer': key, title },
        h('dt', { text: label }), h('dd', { class: value === notMeasured ? 'muted' : null, text: value })));
    }
    box.appendChild(dl);
    const plan = o.plan == null || str(o.plan) === '' ? '' : str(o.plan);
    box.appendChild(h('p', { class: 'observer-plan small', id: 'observer-plan' },
      h('span', { class: 'plan-label', text: 'Sampling plan: ' }),
      plan ? h('span', { text: plan }) : h('span', { class: 'muted', text: 'not recorded for this run' })));
    if (warning) {
      box.appendChild(h('p', { class: 'observer-warn', text: '\u26a0 ' + warning }));
    }
    return box;
  }

  /** Display-only quoting so argument boundaries stay visible.
   *  @param {unknown} a */
  function shellQuote(a) {
    const s = str(a);
    if (s !== '' && /^[\w@%+=:,./<>\[\]-]+$/.test(s)) return s;
    return "'" + s.replace(/'/g, "'\\''") + "'";
  }

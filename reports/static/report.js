/* diagnose HTML report: page script. Plain ES2020, no libraries, no network.
 *
 * Safety rule for this file: profile data (function/file/thread names, command lines, notes...)
 * reaches the page only through createElement + textContent / createTextNode, setAttribute on
 * non-URL attributes, or canvas fillText. No HTML-string sinks, no string-to-code. Invisible and
 * bidi-control characters are shown as visible "U+XXXX" markers so names cannot disguise
 * themselves or reorder surrounding text.
 */
(function () {
  'use strict';

  // ------------------------------------------------------------------ constants

  const WAIT_STATES = ['gil', 'lock', 'io', 'idle'];
  const BUSY_STATES = ['python', 'native'];
  // diagnose uses ok < info < warning < critical; high/medium/low are accepted too.
  const SEVERITIES = ['critical', 'warning', 'info', 'ok', 'high', 'medium', 'low'];
  const STATE_COLORS = {
    python: '#3f9b4a', native: '#1f8a99', gil: '#e8912d', lock: '#d1434b',
    io: '#4a74d0', idle: '#c3c8d0', unknown: '#8a8f98',
  };
  const STATE_FALLBACK = ['#9b59b6', '#b7950b', '#16a085', '#c0392b', '#7f8c8d'];
  const NO_SAMPLE_COLOR = '#f1f3f6';
  const CATEGORY_HSL = {
    preprocess: [195, 60, 66], model: [265, 50, 74], postprocess: [135, 40, 64],
    sync: [355, 70, 72], io: [218, 65, 74], runtime: [40, 80, 64], other: [220, 10, 76],
  };
  const CATEGORY_FALLBACK_HUES = [20, 300, 90, 170, 240, 330, 60, 120];
  const FLAME_ROW_H = 18;
  const FLAME_MAX_DRAWN = 4000;
  const FLAME_LABEL_MIN_PX = 26;
  const LANE_H = 16;
  const LANE_GAP = 3;
  const AXIS_H = 22;

  // Attributes that can carry a URL or code: never set from here.
  const FORBIDDEN_ATTRS = new Set([
    'href', 'src', 'srcset', 'srcdoc', 'action', 'formaction', 'xlink:href', 'style', 'data',
    'poster', 'background', 'ping', 'manifest', 'codebase', 'cite', 'longdesc', 'usemap',
  ]);
  // C0/C1 controls, bidi embeddings/overrides/isolates/marks, zero-width and other invisible formatting.
  const INVISIBLE_RE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/g;

  // ------------------------------------------------------------------ small helpers

  const $ = (id) => document.getElementById(id);
  const arr = (v) => (Array.isArray(v) ? v : []);
  const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const isIdx = (v, n) => Number.isInteger(v) && v >= 0 && v < n;

  function str(v) {
    if (v == null) return '';
    if (typeof v === 'string') return v;
    if (typeof v === 'object') {
      try { return JSON.stringify(v); } catch (e) { return '[object]'; }
    }
    return String(v);
  }

  function codePoint(ch) {
    return 'U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
  }

  /** Plain string with invisible characters replaced by visible markers (for attributes,
   *  <option> labels and canvas text). */
  function visStr(v) {
    return str(v).replace(INVISIBLE_RE, (ch) => '\u27e8' + codePoint(ch) + '\u27e9');
  }

  /** Append v as text to parent; invisible characters become highlighted marker spans. */
  function putText(parent, v) {
    const s = str(v);
    INVISIBLE_RE.lastIndex = 0;
    let last = 0;
    let m;
    while ((m = INVISIBLE_RE.exec(s)) !== null) {
      if (m.index > last) parent.appendChild(document.createTextNode(s.slice(last, m.index)));
      const mark = document.createElement('span');
      mark.className = 'ctl';
      mark.textContent = codePoint(m[0]);
      mark.setAttribute('title', 'invisible or control character ' + codePoint(m[0]) + ', shown as text');
      parent.appendChild(mark);
      last = m.index + m[0].length;
    }
    if (last < s.length) parent.appendChild(document.createTextNode(s.slice(last)));
    return parent;
  }

  /** createElement with safe attribute handling. attrs: class, text, on:{event:fn}, css:{prop:val},
   *  any other key -> setAttribute (URL/event attributes are refused). */
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v == null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') putText(e, v);
        else if (k === 'on') for (const ev of Object.keys(v)) e.addEventListener(ev, v[ev]);
        else if (k === 'css') for (const p of Object.keys(v)) e.style[p] = v[p];
        else if (/^on/i.test(k) || FORBIDDEN_ATTRS.has(k.toLowerCase())) throw new Error('refused attribute ' + k);
        else e.setAttribute(k, v === true ? '' : str(v));
      }
    }
    appendKids(e, kids);
    return e;
  }

  function appendKids(e, kids) {
    for (const kid of kids) {
      if (kid == null || kid === false) continue;
      if (Array.isArray(kid)) appendKids(e, kid);
      else if (kid instanceof Node) e.appendChild(kid);
      else putText(e, kid);
    }
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
    return e;
  }

  function fmtInt(n) {
    return isNum(n) ? Math.round(n).toLocaleString('en-US') : '\u2014';
  }

  function fmtNum(n) {
    if (!isNum(n)) return str(n) || '\u2014';
    if (Number.isInteger(n)) return n.toLocaleString('en-US');
    const a = Math.abs(n);
    if (a >= 1000) return Math.round(n).toLocaleString('en-US');
    if (a >= 100) return n.toFixed(1);
    if (a >= 1) return String(Number(n.toFixed(2)));
    return String(Number(n.toPrecision(3)));
  }

  function fmtPct(frac) {
    if (!isNum(frac)) return '\u2014';
    const p = frac * 100;
    if (p === 0) return '0%';
    if (Math.abs(p) < 0.1) return '<0.1%';
    return (Math.abs(p) >= 99.95 ? p.toFixed(0) : p.toFixed(1)) + '%';
  }

  function fmtSec(s, total) {
    if (!isNum(s)) return '\u2014';
    const digits = total >= 100 ? 1 : total >= 1 ? 2 : 3;
    return s.toFixed(digits) + ' s';
  }

  function basename(path) {
    const s = str(path);
    const i = Math.max(s.lastIndexOf('/'), s.lastIndexOf('\\'));
    return i >= 0 ? s.slice(i + 1) : s;
  }

  function fileLine(file, line) {
    const f = str(file);
    return isNum(line) && line > 0 ? f + ':' + line : f;
  }

  function sevClass(sev) {
    const s = str(sev).toLowerCase();
    return 'badge sev-' + (SEVERITIES.includes(s) ? s : 'other');
  }

  function badge(sev) {
    return h('span', { class: sevClass(sev), text: str(sev) || 'unknown' });
  }

  function debounce(fn, ms) {
    let t = 0;
    return (...a) => {
      clearTimeout(t);
      t = setTimeout(() => fn(...a), ms);
    };
  }

  function hashStr(s) {
    let x = 2166136261;
    for (let i = 0; i < s.length; i++) {
      x ^= s.charCodeAt(i);
      x = Math.imul(x, 16777619);
    }
    return x >>> 0;
  }

  // ------------------------------------------------------------------ tooltip

  const tip = {
    el: null,
    show(lines, ev) {
      const el = this.el;
      if (!el) return;
      clear(el);
      lines.forEach((line, i) => {
        if (line == null) return;
        const row = h('div', { class: i === 0 ? 'tip-title' : 'tip-line' });
        if (Array.isArray(line)) {
          row.appendChild(h('span', { class: 'tip-key', text: line[0] }));
          row.appendChild(h('span', { class: 'tip-val', text: line[1] }));
        } else {
          putText(row, line);
        }
        el.appendChild(row);
      });
      el.hidden = false;
      this.move(ev);
    },
    move(ev) {
      const el = this.el;
      if (!el || el.hidden || !ev) return;
      const pad = 14;
      const r = el.getBoundingClientRect();
      let x = ev.clientX + pad;
      let y = ev.clientY + pad;
      if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
      if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - pad;
      el.style.left = Math.max(4, x) + 'px';
      el.style.top = Math.max(4, y) + 'px';
    },
    hide() {
      if (this.el) this.el.hidden = true;
    },
  };

  // ------------------------------------------------------------------ data preparation

  function loadData() {
    const node = $('diagnose-data');
    if (!node) return null;
    try {
      const d = JSON.parse(node.textContent);
      return d && typeof d === 'object' ? d : null;
    } catch (e) {
      return null;
    }
  }

  function prepare(raw) {
    const report = obj(raw.report);
    const states = arr(raw.states).map(str);
    const categories = arr(raw.categories).map(str);
    const threads = arr(raw.threads).map((t, i) => {
      const o = obj(t);
      return {
        index: i, tid: o.tid, name: str(o.name), role: str(o.role),
        pid: Number.isInteger(o.pid) ? o.pid : null,
        samples: isNum(o.samples) ? o.samples : 0,
        states: obj(o.states),
        os: o.os && typeof o.os === 'object' ? o.os : null,
      };
    });
    const flame = obj(raw.flame);
    const strings = arr(flame.strings).map(str);
    const sAt = (i) => (isIdx(i, strings.length) ? strings[i] : '?');
    const frames = arr(flame.frames).map((f) => {
      const a = arr(f);
      return {
        name: sAt(a[0]), file: sAt(a[1]),
        line: Number.isInteger(a[2]) ? a[2] : null,
        cat: isIdx(a[3], categories.length) ? a[3] : -1,
      };
    });
    const nF = frames.length;
    const stacks = [];
    let dropped = 0;
    for (const row of arr(flame.stacks)) {
      const fr = Array.isArray(row) ? row[0] : null;
      const count = Array.isArray(row) ? row[3] : null;
      let ok = Array.isArray(fr) && isNum(count) && count > 0;
      if (ok) {
        for (let i = 0; i < fr.length; i++) {
          if (!isIdx(fr[i], nF)) { ok = false; break; }
        }
      }
      if (!ok) { dropped++; continue; }
      stacks.push({
        frames: fr,
        thread: isIdx(row[1], threads.length) ? row[1] : -1,
        state: isIdx(row[2], states.length) ? row[2] : -1,
        count,
      });
    }
    const tl = obj(raw.timeline);
    // Threads of several processes (a master and its workers): their labels carry the pid.
    const multiProcess = new Set(threads.map((t) => t.pid).filter((p) => p != null)).size > 1;
    return {
      report, states, categories, threads, frames, stacks, dropped, multiProcess,
      generatedAt: str(raw.generated_at),
      // Per finding, its evidence as labelled rows with units (absent in older pages).
      evidenceText: Array.isArray(raw.evidence_text) ? raw.evidence_text : null,
      timeline: {
        interval: isNum(tl.interval_s) && tl.interval_s > 0 ? tl.interval_s : 0,
        steps: Number.isInteger(tl.steps) && tl.steps > 0 ? tl.steps : 0,
        lanes: arr(tl.lanes).map(obj),
      },
    };
  }

  /** A thread as people read it: "4340 \u00b7 MainThread" when threads come from several
   *  processes, the bare name otherwise. */
  function threadLabel(D, t) {
    return D.multiProcess && t.pid != null ? t.pid + ' \u00b7 ' + t.name : t.name;
  }

  function stateColor(D, si) {
    if (si < 0 || !isIdx(si, D.states.length)) return NO_SAMPLE_COLOR;
    const name = D.states[si];
    return Object.prototype.hasOwnProperty.call(STATE_COLORS, name)
      ? STATE_COLORS[name] : STATE_FALLBACK[si % STATE_FALLBACK.length];
  }

  function categoryHsl(D, ci) {
    if (ci < 0) return [220, 8, 80];
    const name = D.categories[ci];
    if (Object.prototype.hasOwnProperty.call(CATEGORY_HSL, name)) return CATEGORY_HSL[name];
    return [CATEGORY_FALLBACK_HUES[ci % CATEGORY_FALLBACK_HUES.length], 55, 70];
  }

  function categoryColor(D, ci) {
    const c = categoryHsl(D, ci);
    return 'hsl(' + c[0] + ',' + c[1] + '%,' + c[2] + '%)';
  }

  function legendItem(color, label, extraClass) {
    const sw = h('span', { class: 'swatch' + (extraClass ? ' ' + extraClass : '') });
    sw.style.backgroundColor = color;
    return h('span', { class: 'legend-item' }, sw, h('span', { text: label }));
  }

  function stateLegend(D) {
    const box = h('div', { class: 'legend', 'aria-label': 'thread states' });
    D.states.forEach((s, i) => box.appendChild(legendItem(stateColor(D, i), s)));
    box.appendChild(legendItem(NO_SAMPLE_COLOR, 'no sample', 'hollow'));
    return box;
  }

  // ------------------------------------------------------------------ generic sortable table

  /** columns: [{label, value(row) -> sortable, cell(row) -> Node|string, num, descFirst, ascFirst,
   *  title, cls}]. opts: {cls, sortCol, sortDir, rowAttrs(row) -> {attr: value},
   *  afterRow(row, nCols) -> <tr>|null: a detail row kept under its row whatever the order}. */
  function sortableTable(columns, rows, opts) {
    const o = opts || {};
    const table = h('table', { class: 'data sortable' + (o.cls ? ' ' + o.cls : '') });
    const thead = h('thead');
    const tbody = h('tbody');
    const headRow = h('tr');
    let sortCol = isIdx(o.sortCol, columns.length) ? o.sortCol : -1;
    let sortDir = o.sortDir === 'asc' ? 1 : -1;

    const ths = columns.map((c, ci) => {
      const btn = h('button', { type: 'button', class: 'sort-btn', title: c.title || 'sort by ' + c.label, text: c.label });
      const th = h('th', { scope: 'col', class: (c.num ? 'num ' : '') + (c.cls || '') }, btn);
      btn.addEventListener('click', () => {
        if (sortCol === ci) sortDir = -sortDir;
        else { sortCol = ci; sortDir = c.ascFirst ? 1 : c.num || c.descFirst ? -1 : 1; }
        fill();
      });
      headRow.appendChild(th);
      return th;
    });
    thead.appendChild(headRow);
    table.appendChild(thead);
    table.appendChild(tbody);
    const built = new Array(rows.length);

    function cmp(a, b) {
      const an = a == null || a === '' || (typeof a === 'number' && !Number.isFinite(a));
      const bn = b == null || b === '' || (typeof b === 'number' && !Number.isFinite(b));
      if (an || bn) return an === bn ? 0 : an ? 1 : -1; // empty always last
      if (typeof a === 'number' && typeof b === 'number') return (a - b) * sortDir;
      return str(a).localeCompare(str(b), 'en', { numeric: true }) * sortDir;
    }

    function fill() {
      const order = rows.map((r, i) => i);
      if (sortCol >= 0) {
        const c = columns[sortCol];
        const keys = rows.map((r) => c.value(r));
        order.sort((x, y) => cmp(keys[x], keys[y]) || x - y);
      }
      ths.forEach((th, ci) => {
        if (ci === sortCol) th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending');
        else th.removeAttribute('aria-sort');
      });
      // Rows are built once and only reordered, so what a reader opened in them stays open.
      for (const i of order) {
        if (!built[i]) built[i] = buildRow(rows[i]);
        for (const tr of built[i]) tbody.appendChild(tr);
      }
    }

    function buildRow(r) {
      const tr = h('tr');
      if (o.rowAttrs) {
        const attrs = o.rowAttrs(r);
        for (const k of Object.keys(attrs)) tr.setAttribute(k, str(attrs[k]));
      }
      columns.forEach((c) => {
        const v = c.cell ? c.cell(r) : c.value(r);
        const td = h('td', { class: (c.num ? 'num ' : '') + (c.cls || '') });
        appendKids(td, [v instanceof Node ? v : typeof v === 'number' ? fmtNum(v) : v]);
        tr.appendChild(td);
      });
      const extra = o.afterRow ? o.afterRow(r, columns.length) : null;
      return extra ? [tr, extra] : [tr];
    }
    fill();
    return h('div', { class: 'table-wrap' }, table);
  }

  // ------------------------------------------------------------------ 1. verdict header

  function renderHeader(D) {
    const root = $('verdict');
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
    // What fixing the top finding can buy (the findings come ranked: the first is the top one).
    const ranked = arr(r.findings).map(obj);
    const first = ranked.find((f) => v.primary != null && str(f.id) === str(v.primary)) || ranked[0];
    if (first && isNum(first.predicted_gain)) {
      const gain = gainBlock(first, 'verdict', 'Predicted gain from fixing the top finding');
      gain.id = 'verdict-gain';
      gain.setAttribute('data-finding-id', str(first.id));
      root.appendChild(gain);
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

  function openFinding(id) {
    const target = Array.from(document.querySelectorAll('details.finding'))
      .find((d) => d.getAttribute('data-finding-id') === id);
    if (!target) return;
    target.open = true;
    target.scrollIntoView({ block: 'start' });
  }

  /** A predicted throughput ratio: "\u00d72.18". */
  function fmtGain(g) {
    return isNum(g) ? '\u00d7' + g.toFixed(2) : '\u2014';
  }

  /** "Predicted gain: \u00d72.18 (estimate)" and, beneath it, the inputs of the estimate.
   *  `prefix` names the classes (f-gain* for a finding, verdict-gain* for the header). */
  function gainBlock(f, prefix, label) {
    const g = isNum(f.predicted_gain) ? f.predicted_gain : null;
    const basis = str(f.gain_basis);
    if (g == null && basis === '') return null;
    const line = h('p', { class: prefix + '-gain-line' }, h('span', { class: 'gain-label', text: (label || 'Predicted gain') + ': ' }));
    if (g == null) {
      line.appendChild(h('span', { class: 'muted gain-value', text: 'not estimated' }));
    } else {
      line.appendChild(h('strong', { class: 'gain-value', title: 'throughput with the fix / throughput now', text: fmtGain(g) }));
      line.appendChild(document.createTextNode(' '));
      line.appendChild(h('span', { class: 'gain-est', title: 'an estimate from the structure found, not a measurement', text: '(estimate)' }));
    }
    return h('div', { class: prefix + '-gain gain', 'data-gain': g },
      line, basis !== '' ? h('p', { class: prefix + '-gain-basis gain-basis small', text: basis }) : null);
  }

  /** evidence.fix, the first advice as a knob: "Knob: OPENBLAS_NUM_THREADS = 1". */
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

  function renderFindings(D) {
    const root = clear($('findings-body'));
    const primary = str(obj(D.report.verdict).primary);
    // Ranked by diagnose (score, and among critical findings what fixing them can buy): shown in
    // the report's order, never re-sorted here.
    const findings = arr(D.report.findings).map(obj);
    if (!findings.length) root.appendChild(h('p', { class: 'muted', text: 'No findings.' }));
    findings.forEach((f, rank) => {
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
        isNum(f.predicted_gain) ? h('span', {
          class: 'f-gain-tag', title: 'predicted throughput gain if fixed (an estimate)',
          text: fmtGain(f.predicted_gain) + ' est.',
        }) : null,
        isPrimary ? h('span', { class: 'tag', text: 'primary' }) : null,
        h('span', { class: 'f-id', text: str(f.id) })));

      const body = h('div', { class: 'finding-body' });
      if (f.summary != null) body.appendChild(h('p', { class: 'f-summary', text: f.summary }));
      const gain = gainBlock(f, 'f');
      if (gain) body.appendChild(gain);
      const knob = knobLine(obj(f.evidence).fix);
      if (knob) body.appendChild(knob);

      const ev = obj(f.evidence);
      const labelled = evidenceRows(D, f, rank);
      if (labelled) {
        // Labels and values with their units, made by diagnose (evidence_labels.py).
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

  /** "low confidence: 41 samples": the shares behind a finding (or the verdict) rest on too few
   *  samples to be trusted. */
  function confidenceBadge(samples, id, cls) {
    return h('span', {
      class: 'badge conf-low' + (cls ? ' ' + cls : ''), id: id || null,
      'data-samples': isNum(samples) ? samples : null,
      title: 'few samples behind these shares: they could be far off; sample longer',
      text: 'low confidence' + (isNum(samples) ? ': ' + fmtInt(samples) + ' samples' : ''),
    });
  }

  /** The finding's evidence as labelled rows (page data `evidence_text`, parallel to the
   *  report's findings), or null when the page has none that fits this finding. */
  function evidenceRows(D, f, rank) {
    const all = D.evidenceText;
    if (!all || all.length !== arr(D.report.findings).length || !Array.isArray(all[rank])) return null;
    // Only rows made for exactly this evidence, key for key: never another finding's values.
    const keys = Object.keys(obj(f.evidence)).filter((k) => k !== 'fix');
    const rows = all[rank].map(obj);
    const fits = rows.length === keys.length && rows.every((r, i) => r.key === keys[i]);
    return fits ? rows : null;
  }

  /** A labelled evidence value: its text, or a name/value list for a dict. */
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
   *  *_share_per_*, share_of_*, anything with "utilization", *_fraction, *error_rate. */
  function isShareKey(k) {
    const s = str(k).toLowerCase();
    return /(^|_)shares?($|_)/.test(s) || s.includes('utilization') || /(^|_)(fraction|error_rate)$/.test(s);
  }

  const MAX_VALUE_DEPTH = 4;

  /** A value of any JSON shape as DOM: numbers rounded (percentages for share keys, inherited by
   *  nested values), null as a dash, booleans as yes/no, objects as a nested key/value list,
   *  arrays as a list. Never JSON text. */
  function valueNode(v, key, asShare, depth) {
    const share = asShare === true || isShareKey(key);
    const d = depth || 0;
    if (v == null) return h('span', { class: 'muted', text: '\u2014' });
    if (typeof v === 'boolean') return h('span', { text: v ? 'yes' : 'no' });
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
    const keys = Object.keys(v);
    if (!keys.length) return h('span', { class: 'muted', text: 'none' });
    return h('dl', { class: 'kv-nested' }, keys.map((k) => [
      h('dt', { text: k }), h('dd', null, valueNode(v[k], k, share, d + 1))]));
  }

  function shareCell(share) {
    if (!isNum(share)) return h('span', { class: 'muted', text: '\u2014' });
    const bar = h('span', { class: 'share-bar' });
    const fill = h('span', { class: 'share-fill' });
    fill.style.width = Math.max(0, Math.min(100, share * 100)) + '%';
    bar.appendChild(fill);
    return h('span', { class: 'share' }, bar, h('span', { class: 'share-pct', text: fmtPct(share) }));
  }

  /** Ranked sites table. `share` is a fraction of samples in [0, 1]. */
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

  function renderFacts(D) {
    const root = clear($('facts-body'));
    const t = obj(D.report.target);
    const s = obj(D.report.sampling);
    const yesNo = (b) => (b === true ? 'yes' : b === false ? 'no' : '\u2014');
    const unit = (v, u) => (isNum(v) ? fmtNum(v) + u : '\u2014');
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
    const optional = [
      [t, 'cpu_quota_cores', 'cpu-quota', 'CPU quota (cores)', (v) => unit(v, '')],
      [s, 'requested_duration_s', 'requested-duration', 'Requested duration', (v) => unit(v, ' s')],
      [s, 'thread_samples', 'thread-samples', 'Thread samples', fmtInt],
      [s, 'state_estimated', 'state-estimated', 'States estimated', yesNo],
      [s, 'proc_interval_s', 'proc-interval', '/proc read every', (v) => unit(v, ' s')],
      [s, 'pyspy_version', 'pyspy-version', 'py-spy version', str],
    ];
    for (const [src, k, key, label, fmt] of optional) {
      if (k in src) facts.push([key, label, fmt(src[k])]);
    }
    // Anything newer in target/sampling that this page does not know yet: show it plainly.
    const known = new Set(['pid', 'python', 'cmdline', 'threads', 'cores', 'duration_s', 'rate_hz', 'samples', 'errors',
      'native', 'mode', 'partial', 'notes', 'achieved_rate_hz', 'paused_share', 'observer', 'plan',
      'pyspy_cpu_s', 'pyspy_cpu_share_of_cores']
      .concat(optional.map((o) => o[1])));
    for (const src of [t, s]) {
      for (const k of Object.keys(src)) {
        if (!known.has(k)) facts.push(['extra', k, valueNode(src[k], k)]);
      }
    }
    const dl = h('dl', { class: 'facts' });
    for (const [key, k, v] of facts) {
      dl.appendChild(h('div', { class: 'fact', 'data-fact': key }, h('dt', { text: k }),
        v instanceof Node ? h('dd', null, v) : h('dd', { text: v || '\u2014' })));
    }
    root.appendChild(dl);
    root.appendChild(observerBlock(s));
    const cmd = Array.isArray(t.cmdline) ? t.cmdline.map(shellQuote).join(' ') : str(t.cmdline);
    root.appendChild(h('div', { class: 'cmdline' },
      h('div', { class: 'cmd-label', text: 'Command line' }),
      h('code', { id: 'cmdline', text: cmd || '\u2014' })));
  }

  /** sampling.observer, or what older reports had of it in sampling itself. */
  function observerOf(s) {
    const o = obj(s.observer);
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

  function observerWarning(s) {
    const w = observerOf(s).warning;
    return w == null || str(w) === '' ? '' : str(w);
  }

  /** "What sampling cost the target": the observer's own effect on what it measured. */
  function observerBlock(s) {
    const o = observerOf(s);
    const num = (v) => (isNum(v) ? v : null);
    const attrs = { id: 'observer-cost', class: 'observer', 'aria-labelledby': 'observer-h' };
    for (const k of ['paused_share', 'pyspy_cpu_s', 'pyspy_cpu_share_of_cores', 'requested_rate_hz',
      'achieved_rate_hz', 'errors', 'error_rate']) {
      if (num(o[k]) != null) attrs['data-' + k.replace(/_/g, '-')] = String(o[k]);
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
      errors = fmtInt(o.errors) + (num(o.error_rate) != null && o.errors > 0 ? ' (' + fmtPct(o.error_rate) + ' of samples)' : '');
    }
    const torn = o.torn_stacks_possible === true ? 'possible (non-blocking sampling)'
      : o.torn_stacks_possible === false ? 'no' : notMeasured;
    const items = [
      ['paused', 'Target paused by the sampler',
        num(o.paused_share) != null ? fmtPct(o.paused_share) : notMeasured,
        'share of /proc observations of target threads that found them stopped by py-spy'],
      ['pyspy-cpu', 'py-spy CPU', cpu, 'CPU time py-spy itself used; on a small machine it competes with the target'],
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

  /** Display-only quoting so argument boundaries stay visible. */
  function shellQuote(a) {
    const s = str(a);
    if (s !== '' && /^[\w@%+=:,./<>\[\]-]+$/.test(s)) return s;
    return "'" + s.replace(/'/g, "'\\''") + "'";
  }

  // ------------------------------------------------------------------ 4. flame graph

  function renderFlame(D) {
    const root = clear($('flame-body'));
    const waitSet = new Set(WAIT_STATES);
    const busySet = new Set(BUSY_STATES);
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
    let lower = null; // lazily lower-cased names/files for search

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
      if (F.cache.size > 6) F.cache.delete(F.cache.keys().next().value);
      return tree;
    }

    function sortedKids(n) {
      if (n.sorted === null) {
        n.sorted = n.kids ? Array.from(n.kids.values()).sort((a, b) => b.total - a.total || a.key - b.key) : [];
      }
      return n.sorted;
    }

    function zoomNode() {
      let n = F.tree.root;
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

    function pathTo(n) {
      const p = [];
      for (let x = n; x && x.parent; x = x.parent) p.push(x);
      return p.reverse();
    }

    function nodeName(n) { return n.frame < 0 ? 'all' : D.frames[n.frame].name; }
    function nodeFile(n) { return n.frame < 0 ? '' : D.frames[n.frame].file; }

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
      const m = new Uint8Array(nF);
      for (let i = 0; i < nF; i++) m[i] = lower[i][0].includes(q) || lower[i][1].includes(q) ? 1 : 0;
      F.match = m;
    }

    function matchedUnder(node) {
      // Samples under `node` whose stack contains a matching frame (each sample counted once).
      const m = F.match;
      for (let a = node; a && a.frame >= 0; a = a.parent) if (m[a.frame]) return node.total;
      let sum = 0;
      const st = [node];
      while (st.length) {
        const n = st.pop();
        if (n.frame >= 0 && m[n.frame]) { sum += n.total; continue; }
        if (n.kids) for (const c of n.kids.values()) st.push(c);
      }
      return sum;
    }

    function updateSearch(zoom) {
      const tree = F.tree;
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
      const items = [];
      const viewTotal = tree.root.total;

      if (zoom !== tree.root) items.push([tree.root, 0, 1, 'ancestor']);
      for (const a of pathTo(zoom).slice(0, -1)) items.push([a, 0, 1, 'ancestor']);
      items.push([zoom, 0, 1, zoom === tree.root ? '' : 'zoomed']);

      let maxDepth = zoom.depth;
      if (zoom.total > 0) {
        // Choose a minimum width so the number of drawn frames stays bounded.
        let minSamples = zoom.total / width;
        const countAbove = (min) => {
          let n = 0;
          const st = [zoom];
          while (st.length) {
            const x = st.pop();
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
          const [x, off] = st.pop();
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

    function nodeOf(ev) {
      const el = ev.target instanceof Element ? ev.target.closest('.flame-node') : null;
      if (!el || !graph.contains(el)) return null;
      return F.tree.nodes[Number(el.getAttribute('data-node'))] || null;
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
      const viewTotal = F.tree.root.total || 1;
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
        zoom !== F.tree.root && zoom.total ? ['share of zoom', fmtPct(n.total / zoom.total)] : null,
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
      $('flame-section').scrollIntoView({ block: 'start' });
    };

    draw();
  }

  // ------------------------------------------------------------------ 5. per-thread table

  function renderThreads(D) {
    const root = clear($('threads-body'));
    if (!D.threads.length) {
      root.appendChild(h('p', { class: 'muted', text: 'No threads were sampled.' }));
      return;
    }
    const hasOs = D.threads.some((t) => t.os);
    const stateCount = (t, s) => (isNum(t.states[s]) ? t.states[s] : 0);
    const stateTotal = (t) => D.states.reduce((a, s) => a + stateCount(t, s), 0);
    const busyShare = (t) => {
      const tot = stateTotal(t);
      return tot ? BUSY_STATES.reduce((a, s) => a + stateCount(t, s), 0) / tot : null;
    };
    const osNum = (t, k) => (t.os && isNum(t.os[k]) ? t.os[k] : null);

    function statesCell(t) {
      const tot = stateTotal(t);
      const bar = h('div', { class: 'sbar', role: 'img' });
      const parts = [];
      D.states.forEach((s, i) => {
        const c = stateCount(t, s);
        if (!c || !tot) return;
        const seg = h('span', { class: 'sbar-seg', title: s + ' ' + fmtPct(c / tot) });
        seg.style.width = (c / tot * 100) + '%';
        seg.style.backgroundColor = stateColor(D, i);
        bar.appendChild(seg);
        parts.push([s, c / tot]);
      });
      parts.sort((a, b) => b[1] - a[1]);
      const label = parts.map((p) => p[0] + ' ' + fmtPct(p[1])).join(' \u00b7 ');
      bar.setAttribute('aria-label', label);
      return h('div', { class: 'states-cell' }, bar, h('div', { class: 'sbar-text', text: label || 'no samples' }));
    }

    const cols = [
      {
        label: 'Thread', value: (t) => threadLabel(D, t),
        cell: (t) => {
          const b = h('button', { type: 'button', class: 'linkish mono', title: 'show this thread in the flame graph', text: t.name || '(unnamed)' });
          b.addEventListener('click', () => { if (renderFlame.showThread) renderFlame.showThread(t.index); });
          if (!D.multiProcess || t.pid == null) return b;
          return h('span', { class: 'thread-label' },
            h('span', { class: 'mono pid-prefix', title: 'process ' + t.pid, text: t.pid + ' \u00b7 ' }), b);
        },
        title: D.multiProcess ? 'sort by process, then thread name' : null,
      },
      { label: 'TID', value: (t) => (isNum(t.tid) ? t.tid : str(t.tid)), cell: (t) => str(t.tid), num: true },
      { label: 'Role', value: (t) => t.role, cls: 'nowrap' },
      { label: 'Samples', value: (t) => t.samples, num: true },
      { label: 'States', value: busyShare, cell: statesCell, descFirst: true, title: 'sort by busy share (python + native)', cls: 'states-col' },
    ];
    if (hasOs) {
      cols.push(
        { label: 'CPU s', value: (t) => osNum(t, 'cpu_s'), num: true },
        { label: 'Run-queue wait s', value: (t) => osNum(t, 'runqueue_wait_s'), num: true },
        { label: 'Vol. ctx', value: (t) => osNum(t, 'voluntary_ctx'), num: true, title: 'voluntary context switches' },
        { label: 'Invol. ctx', value: (t) => osNum(t, 'involuntary_ctx'), num: true, title: 'involuntary context switches' });
    }
    root.appendChild(stateLegend(D));
    root.appendChild(sortableTable(cols, D.threads, {
      cls: 'threads', sortCol: 3, sortDir: 'desc',
      rowAttrs: (t) => (t.pid != null
        ? { 'data-thread-index': t.index, 'data-role': t.role, 'data-pid': t.pid }
        : { 'data-thread-index': t.index, 'data-role': t.role }),
    }));
    if (!hasOs) root.appendChild(h('p', { class: 'muted small', text: 'OS counters were not available for this run.' }));
  }

  // ------------------------------------------------------------------ 6. timeline

  function renderTimeline(D) {
    const root = clear($('timeline-body'));
    const tl = D.timeline;
    const lanes = tl.lanes.map((l) => {
      const thread = isIdx(l.thread, D.threads.length) ? D.threads[l.thread] : null;
      const runs = arr(l.runs);
      const starts = [];
      const states = [];
      let pos = 0;
      for (const r of runs) {
        const rr = arr(r);
        const len = Number.isInteger(rr[1]) && rr[1] > 0 ? rr[1] : 0;
        if (!len) continue;
        starts.push(pos);
        states.push(isIdx(rr[0], D.states.length) ? rr[0] : -1);
        pos += len;
      }
      starts.push(pos);
      return { thread, name: thread ? threadLabel(D, thread) : 'thread ' + str(l.thread), starts, states, len: pos };
    });
    const steps = Math.max(tl.steps, ...lanes.map((l) => l.len), 0);

    const wrap = h('div', {
      id: 'timeline', class: 'timeline',
      'data-lanes': lanes.length, 'data-steps': steps, 'data-interval-s': tl.interval,
      'data-lane-height': LANE_H + LANE_GAP,
    });
    root.appendChild(stateLegend(D));
    root.appendChild(wrap);
    if (!lanes.length || !steps) {
      wrap.appendChild(h('p', { class: 'muted', text: 'No timeline data.' }));
      return;
    }
    const canvas = h('canvas', { id: 'timeline-canvas', 'aria-label': 'per-thread state timeline', role: 'img' });
    wrap.appendChild(canvas);
    const interval = tl.interval;
    const totalS = steps * interval;
    let geom = null;

    function truncate(ctx, text, maxW) {
      if (ctx.measureText(text).width <= maxW) return text;
      let lo = 0;
      let hi = text.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (ctx.measureText(text.slice(0, mid) + '\u2026').width <= maxW) lo = mid;
        else hi = mid - 1;
      }
      return text.slice(0, lo) + '\u2026';
    }

    function draw() {
      const cssW = Math.max(300, wrap.clientWidth || 900);
      const labelW = Math.min(180, Math.round(cssW * 0.24));
      const plotX = labelW + 6;
      const plotW = cssW - plotX - 8;
      const cssH = lanes.length * (LANE_H + LANE_GAP) + AXIS_H;
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
      canvas.style.width = cssW + 'px';
      canvas.style.maxWidth = '100%';
      canvas.style.height = 'auto';
      const ctx = canvas.getContext('2d');
      if (!ctx) return;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, cssW, cssH);
      ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';
      ctx.textBaseline = 'middle';
      const scale = plotW / steps;
      lanes.forEach((lane, i) => {
        const y = i * (LANE_H + LANE_GAP);
        ctx.fillStyle = '#24292f';
        ctx.fillText(truncate(ctx, visStr(lane.name), labelW - 4), 0, y + LANE_H / 2);
        ctx.fillStyle = NO_SAMPLE_COLOR;
        ctx.fillRect(plotX, y, plotW, LANE_H);
        for (let r = 0; r < lane.states.length; r++) {
          const s = lane.states[r];
          if (s < 0) continue;
          const x0 = plotX + Math.min(lane.starts[r], steps) * scale;
          const x1 = plotX + Math.min(lane.starts[r + 1], steps) * scale;
          if (x1 <= x0) continue;
          ctx.fillStyle = stateColor(D, s);
          ctx.fillRect(x0, y, Math.max(x1 - x0, 0.75), LANE_H);
        }
      });
      // time axis
      const axisY = lanes.length * (LANE_H + LANE_GAP);
      ctx.strokeStyle = '#8c959f';
      ctx.fillStyle = '#57606a';
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(plotX, axisY + 0.5);
      ctx.lineTo(plotX + plotW, axisY + 0.5);
      ctx.stroke();
      if (totalS > 0) {
        const target = Math.max(2, Math.floor(plotW / 90));
        const raw = totalS / target;
        const mag = Math.pow(10, Math.floor(Math.log10(raw)));
        const tick = [1, 2, 5, 10].map((m) => m * mag).find((t) => t >= raw) || raw;
        ctx.textBaseline = 'top';
        for (let t = 0; t <= totalS + 1e-9; t += tick) {
          const x = plotX + (t / totalS) * plotW;
          ctx.beginPath();
          ctx.moveTo(Math.round(x) + 0.5, axisY);
          ctx.lineTo(Math.round(x) + 0.5, axisY + 4);
          ctx.stroke();
          const label = Number(t.toPrecision(6)) + ' s';
          const w = ctx.measureText(label).width;
          ctx.fillText(label, Math.min(Math.max(plotX, x - w / 2), plotX + plotW - w), axisY + 6);
        }
      }
      geom = { cssW, cssH, plotX, plotW, scale, labelW };
    }

    function hit(ev) {
      if (!geom) return null;
      const rect = canvas.getBoundingClientRect();
      const k = geom.cssW / rect.width; // canvas may be scaled down by CSS
      const x = (ev.clientX - rect.left) * k;
      const y = (ev.clientY - rect.top) * k;
      const i = Math.floor(y / (LANE_H + LANE_GAP));
      if (i < 0 || i >= lanes.length || y - i * (LANE_H + LANE_GAP) > LANE_H) return null;
      const lane = lanes[i];
      if (x < geom.plotX) return { lane, label: true };
      const step = Math.floor((x - geom.plotX) / geom.scale);
      if (step < 0 || step >= steps) return null;
      let lo = 0;
      let hi = lane.states.length - 1;
      let run = -1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (lane.starts[mid] <= step) { run = mid; lo = mid + 1; } else hi = mid - 1;
      }
      if (run >= 0 && step >= lane.starts[run + 1]) run = -1;
      return { lane, step, run };
    }

    canvas.addEventListener('mousemove', (ev) => {
      const r = hit(ev);
      if (!r) { tip.hide(); return; }
      const t = r.lane.thread;
      const who = r.lane.name;
      if (r.label) {
        tip.show([who, t && t.pid != null ? ['pid', String(t.pid)] : null, t ? ['tid', str(t.tid)] : null,
          t ? ['role', t.role] : null, t ? ['samples', fmtInt(t.samples)] : null], ev);
        return;
      }
      const s = r.run >= 0 ? r.lane.states[r.run] : -1;
      const stateName = s >= 0 ? D.states[s] : 'no sample';
      const lines = [who, ['state', stateName], ['time', fmtSec(r.step * interval, totalS)]];
      if (r.run >= 0) {
        const a = r.lane.starts[r.run] * interval;
        const b = r.lane.starts[r.run + 1] * interval;
        lines.push(['run', fmtSec(a, totalS) + ' \u2013 ' + fmtSec(b, totalS) + ' (' + fmtSec(b - a, totalS) + ')']);
      }
      tip.show(lines, ev);
    });
    canvas.addEventListener('mouseleave', () => tip.hide());
    window.addEventListener('resize', debounce(draw, 150));
    draw();
  }

  // ------------------------------------------------------------------ 7. wait sites

  function renderWaits(D) {
    const root = clear($('waits-body'));
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

  /** Whole percent, as in the summaries: "34%", "<1%". */
  function pct0(frac) {
    if (!isNum(frac)) return '\u2014';
    const p = frac * 100;
    return p > 0 && p < 0.5 ? '<1%' : Math.round(p) + '%';
  }

  /** "A → B → C (82%)", each function its own span so long paths wrap at the arrows. */
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

  function waitsTable(waits, showPid) {
    const n = (v) => (isNum(v) ? v : null);
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

  // ------------------------------------------------------------------ 8. processes

  const ROLE_RANK = { master: 0, single: 1, worker: 2, helper: 3 };
  const ROLE_ORDER = ['master', 'single', 'worker', 'helper'];
  const CMD_MAX_CHARS = 80;
  const TREE_MAX_INDENT = 6;

  function roleRank(role) {
    return Object.prototype.hasOwnProperty.call(ROLE_RANK, role) ? ROLE_RANK[role] : ROLE_ORDER.length;
  }

  /** The first `max` characters (code points, so no pair is split) of s, with an ellipsis when cut. */
  function truncateText(s, max) {
    const cps = Array.from(s);
    return cps.length <= max ? s : cps.slice(0, max - 1).join('') + '\u2026';
  }

  function cmdlineText(cmd) {
    return Array.isArray(cmd) ? cmd.map(shellQuote).join(' ') : str(cmd);
  }

  /** CPU seconds over the window as cores kept busy: "0.93 cores". */
  function fmtCores(v) {
    if (!isNum(v)) return '\u2014';
    if (v > 0 && v < 0.005) return '<0.01 cores';
    return v.toFixed(2) + (v.toFixed(2) === '1.00' ? ' core' : ' cores');
  }

  /** A duration: "118 ms" below a second, "1.25 s" from one. */
  function fmtDuration(s) {
    if (!isNum(s)) return '\u2014';
    if (Math.abs(s) < 1) return fmtNum(Number((s * 1000).toPrecision(3))) + ' ms';
    return fmtNum(s) + ' s';
  }

  /** Processes in tree order: each process followed by its children (by ppid), masters first.
   *  Sets x.depth and x.order. A ppid cycle cannot hide a process: what no root reaches is listed
   *  at the top level. */
  function processTree(procs) {
    const byPid = new Map();
    for (const x of procs) if (x.pid != null && !byPid.has(x.pid)) byPid.set(x.pid, x);
    const kids = new Map();
    const roots = [];
    for (const x of procs) {
      const parent = x.ppid != null && x.ppid !== x.pid ? byPid.get(x.ppid) : undefined;
      if (parent && parent !== x) {
        if (!kids.has(parent)) kids.set(parent, []);
        kids.get(parent).push(x);
      } else {
        roots.push(x);
      }
    }
    const byRole = (a, b) => roleRank(a.role) - roleRank(b.role) ||
      (a.pid == null ? 1 : 0) - (b.pid == null ? 1 : 0) || (a.pid || 0) - (b.pid || 0) || a.i - b.i;
    const out = [];
    const seen = new Set();
    const visit = (root) => {
      const stack = [[root, 0]];
      while (stack.length) {
        const [x, depth] = stack.pop();
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

  function renderProcesses(D) {
    const section = $('processes');
    const root = $('processes-body');
    if (!section || !root) return;
    clear(root);
    const procs = arr(D.report.processes).map(obj).filter((p) => Object.keys(p).length)
      .map((p, i) => ({
        p, i, role: str(p.role),
        pid: Number.isInteger(p.pid) ? p.pid : null,
        ppid: Number.isInteger(p.ppid) ? p.ppid : null,
      }));
    // One process: the run facts above already describe it.
    section.hidden = procs.length < 2;
    if (procs.length < 2) return;
    const rows = processTree(procs);

    const counts = new Map();
    for (const x of rows) counts.set(x.role || 'unknown', (counts.get(x.role || 'unknown') || 0) + 1);
    const roles = Array.from(counts.keys()).sort((a, b) => roleRank(a) - roleRank(b));
    const cores = rows.map((x) => x.p.cpu_cores).filter(isNum);
    const summary = rows.length + ' processes: ' +
      roles.map((r) => counts.get(r) + ' ' + r + (counts.get(r) > 1 ? 's' : '')).join(', ') +
      (cores.length ? ' \u00b7 ' + fmtCores(cores.reduce((a, b) => a + b, 0)) + ' busy together' : '');
    root.appendChild(h('p', { id: 'processes-summary', text: summary }));
    root.appendChild(h('p', { class: 'muted small', text:
      'Workers are listed under the process that started them. CPU is the CPU time of the process ' +
      'over the window, in cores kept busy; busy is the share of its thread samples running or ' +
      'runnable. Click a heading to sort, "PID" to get the tree back.' }));

    const duration = obj(D.report.sampling).duration_s;
    const findingIds = new Set(arr(D.report.findings).map(obj).map((f) => str(f.id)).filter((id) => id !== ''));
    const n = (v) => (isNum(v) ? v : null);
    const lifetime = (x) => [
      isNum(x.p.started_s) ? 'started at ' + fmtSec(x.p.started_s, duration) : null,
      isNum(x.p.exited_s) ? 'exited at ' + fmtSec(x.p.exited_s, duration) : null,
    ].filter(Boolean).join(', ');
    const topFinding = (x) => (x.p.top_finding && typeof x.p.top_finding === 'object' &&
      !Array.isArray(x.p.top_finding) ? x.p.top_finding : null);

    function pidCell(x) {
      const cell = h('span', {
        class: 'ptree', 'data-depth': x.depth,
        title: x.ppid != null ? 'parent process ' + x.ppid : null,
      });
      cell.style.paddingLeft = Math.min(x.depth, TREE_MAX_INDENT) * 1.2 + 'em';
      if (x.depth) cell.appendChild(h('span', { class: 'ptree-branch', 'aria-hidden': 'true', text: '\u2514\u2009' }));
      cell.appendChild(h('span', { class: 'mono ptree-pid', text: x.pid != null ? String(x.pid) : str(x.p.pid) || '?' }));
      return cell;
    }

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

    function cmdCell(x) {
      const full = cmdlineText(x.p.cmdline);
      if (!full) return h('span', { class: 'muted', text: '\u2014' });
      const shown = truncateText(full, CMD_MAX_CHARS);
      return h('code', { class: 'pcmd', title: visStr(full), 'data-truncated': shown === full ? 'false' : 'true', text: shown });
    }

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
        label: 'Top finding', value: (x) => (topFinding(x) ? n(topFinding(x).score) : null), descFirst: true,
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

  // ------------------------------------------------------------------ 9. event loops

  // [key, label, report field, color, explanation]
  const LOOP_PARTS = [
    ['idle', 'idle in selector', 'idle_share', '#c3c8d0', 'the loop waited for events: nothing was ready to run'],
    ['framework', 'framework', 'framework_share', '#6d97d6',
      'the event loop and the server framework themselves: scheduling, protocol parsing, transports'],
    ['app', 'app\u2019s synchronous work', 'app_share', '#d1434b',
      'the app\u2019s coroutines and callbacks running between two awaits: the loop serves nothing else meanwhile'],
  ];
  const CALLBACK_KINDS = { cpu: 'CPU work', blocking_call: 'blocking call', framework: 'framework' };

  function renderEventLoops(D) {
    const section = $('event-loops');
    const root = $('event-loops-body');
    if (!section || !root) return;
    clear(root);
    const loops = arr(D.report.event_loops).map(obj).filter((l) => Object.keys(l).length);
    section.hidden = !loops.length;
    if (!loops.length) return;
    root.appendChild(h('p', { class: 'muted small', text:
      'Where each event loop\u2019s thread spent its samples. While the app\u2019s synchronous code runs ' +
      '(computing, or stuck in a blocking call), the loop runs nothing else: every other request of ' +
      'that process waits.' }));
    loops.forEach((l, i) => root.appendChild(loopBlock(D, l, i)));
  }

  function loopBlock(D, l, i) {
    const pid = Number.isInteger(l.pid) ? l.pid : null;
    const attrs = { class: 'loop', id: 'loop-' + i, 'data-pid': pid, 'data-tid': l.tid == null ? null : str(l.tid), 'data-flavor': str(l.flavor) };
    for (const [key, , field] of LOOP_PARTS) if (isNum(l[field])) attrs['data-' + key + '-share'] = String(l[field]);
    const box = h('div', attrs);

    const thread = D.threads.find((t) => l.tid != null && t.tid === l.tid && (pid == null || t.pid == null || t.pid === pid));
    // The thread's name: `thread` in the documented shape, `name` in what some reports wrote.
    const name = str(l.thread) || str(l.name) || (thread ? thread.name : '') || 'thread ' + str(l.tid);
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
    const site = (o) => h('div', { class: 'site' },
      h('div', { class: 'mono site-fn', text: str(o.function) || '?' }),
      h('div', { class: 'mono path small site-file', title: visStr(fileLine(o.file, o.line)), text: fileLine(basename(o.file), o.line) }));
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
          const label = Object.prototype.hasOwnProperty.call(CALLBACK_KINDS, k) ? CALLBACK_KINDS[k] : k || '?';
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

  // ------------------------------------------------------------------ 10. service structure

  const STAGE_ROLES = {
    stage: 'stage', batcher: 'batcher', request: 'request', event_loop: 'event loop',
    supervisor: 'supervisor', idle: 'idle', other: 'other',
  };
  // kind -> [words between the waiter and the resource, explanation]
  const EDGE_KINDS = {
    starved: ['starved on', 'waits in get on its input queue for the stage that feeds it'],
    backpressure: ['backpressure on', 'blocked in put into a full queue until the stage that drains it takes an item'],
    result: ['waiting for', 'waits for the results of work it handed to another stage'],
    lock: ['waiting on', 'waits for a lock while the holder keeps it'],
    gil: ['waiting for', 'waits for the GIL while the holder runs Python'],
  };
  // [field, column label, words in a stage box, explanation]
  const STAGE_WAITS = [
    ['blocked_put_share', 'Blocked on put', 'blocked on put', 'blocked putting into a full queue: the stage after it is slower'],
    ['starved_share', 'Starved on get', 'starved on get', 'waiting in get on an empty input queue: the stage before it is slower'],
    ['result_wait_share', 'Waiting for results', 'waiting for results', 'waiting for results another stage produces'],
  ];
  const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

  function stageOf(raw, i) {
    const s = obj(raw);
    const names = (v) => arr(v).map(str).filter((q) => q !== '');
    return {
      s, i, name: str(s.name) || str(s.function) || '?', role: str(s.role),
      threads: arr(s.tids).length, gets: names(s.gets), puts: names(s.puts),
    };
  }

  /** The stages of the pipeline in queue order: a stage that puts to queue Q before the stage
   *  that gets from Q. Stages are in it when a queue joins them to another stage (else, the
   *  stages and batchers). Ties, separate chains and cycles fall back to the list order, and a
   *  chain is kept together. */
  function pipelineOrder(stages) {
    const producers = new Map();
    const consumers = new Map();
    const add = (m, q, k) => { if (!m.has(q)) m.set(q, []); m.get(q).push(k); };
    stages.forEach((st, k) => {
      st.puts.forEach((q) => add(producers, q, k));
      st.gets.forEach((q) => add(consumers, q, k));
    });
    const next = stages.map(() => []);
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
    if (members.length < 2) members = stages.map((st, k) => k).filter((k) => ['stage', 'batcher'].includes(stages[k].role));
    const inSet = new Set(members);
    const indeg = new Map(members.map((k) => [k, 0]));
    for (const p of members) for (const c of next[p]) if (inSet.has(c)) indeg.set(c, indeg.get(c) + 1);
    for (const k of members) next[k].sort((a, b) => a - b);
    const order = [];
    const placed = new Set();
    let last = -1;
    while (order.length < members.length) {
      const free = (k) => !placed.has(k) && inSet.has(k) && indeg.get(k) === 0;
      let pick = last >= 0 ? next[last].find(free) : undefined;
      if (pick === undefined) pick = members.find(free);
      if (pick === undefined) pick = members.find((k) => !placed.has(k)); // a cycle
      placed.add(pick);
      order.push(pick);
      for (const c of next[pick]) if (inSet.has(c) && !placed.has(c)) indeg.set(c, indeg.get(c) - 1);
      last = pick;
    }
    return order.map((k) => stages[k]);
  }

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
    const roles = new Map();
    for (const p of arr(D.report.processes).map(obj)) if (Number.isInteger(p.pid)) roles.set(p.pid, str(p.role));
    entries.forEach((x, i) => root.appendChild(structureBlock(x.e, x.stages, i, roles, entries.length)));
  }

  function structureBlock(e, stages, i, roles, count) {
    const pid = Number.isInteger(e.pid) ? e.pid : null;
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
    const isBottleneck = (st) => bottleneck != null && st.name === bottleneck;
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

  function stageWaits(st) {
    const out = [];
    for (const [field, , words] of STAGE_WAITS) {
      const v = st.s[field];
      if (isNum(v) && v >= 0.01) out.push(words + ' ' + fmtPct(v));
    }
    return out.join(' \u00b7 ');
  }

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

  function stagesTable(stages, isBottleneck) {
    const n = (v) => (isNum(v) ? v : null);
    const queues = (list) => (list.length ? h('span', { class: 'mono', text: list.join(', ') }) : h('span', { class: 'muted', text: '\u2014' }));
    const cols = [
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
    ].concat(STAGE_WAITS.map(([field, label, , explain]) => ({
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

  /** "decode_stage —backpressure on queue decoded→ model_stage" */
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

  function edgesTable(edges, bottleneck) {
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

  // ------------------------------------------------------------------ footer, print, main

  function renderFooter(D) {
    const f = $('footer');
    if (!f) return;
    clear(f);
    putText(f, 'diagnose report \u00b7 schema ' + str(D.report.schema_version || '?') +
      (D.generatedAt ? ' \u00b7 generated ' + D.generatedAt : '') + ' \u00b7 self-contained, works offline');
  }

  function setupPrint() {
    let reopened = [];
    window.addEventListener('beforeprint', () => {
      reopened = Array.from(document.querySelectorAll('details:not([open])'));
      reopened.forEach((d) => { d.open = true; });
    });
    window.addEventListener('afterprint', () => {
      reopened.forEach((d) => { d.open = false; });
      reopened = [];
    });
  }

  function showFatal(msg) {
    const root = $('verdict') || document.body;
    root.appendChild(h('div', { class: 'banner error', role: 'alert', text: msg }));
  }

  function main() {
    document.documentElement.classList.remove('no-js');
    tip.el = $('tooltip');
    const raw = loadData();
    if (!raw) {
      showFatal('The report data could not be read; the file may be truncated.');
      return;
    }
    const D = prepare(raw);
    const parts = [
      ['verdict', renderHeader], ['findings', renderFindings], ['facts', renderFacts],
      ['processes', renderProcesses], ['structure', renderStructure], ['flame', renderFlame], ['threads', renderThreads],
      ['timeline', renderTimeline], ['waits', renderWaits], ['event loops', renderEventLoops],
      ['footer', renderFooter],
    ];
    for (const [name, fn] of parts) {
      try {
        fn(D);
      } catch (err) {
        // A bug in one section must not blank the others.
        console.error('diagnose report: section ' + name + ' failed', err);
        showFatal('Part of this report (' + name + ') could not be displayed.');
      }
    }
    setupPrint();
    document.documentElement.setAttribute('data-ready', 'true');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();

  // @ts-check
/* diagnose HTML report: page script. Plain ES2020, no libraries, no network.
 *
 * Safety rule for this file: profile data (function/file/thread names, command lines, notes...)
 * reaches the page only through createElement + textContent / createTextNode, setAttribute on
 * non-URL attributes, or canvas fillText. No HTML-string sinks, no string-to-code. Invisible and
 * bidi-control characters are shown as visible "U+XXXX" markers so names cannot disguise
 * themselves or reorder surrounding text.
 */
  // Report page script, part: constants, text helpers, tooltip, data preparation, sortable table. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ constants

  // The words of the report (severities and their order, thread states, roles) are not declared
  // here: the page reads them from its data's `vocabulary` (diagnose/model/vocab.py), in prepare().
  // Badge words other tools use, styled as the severity they stand for (high = critical, ...).
  const SEVERITY_ALIASES = ['high', 'medium', 'low'];
  // The colours of the vocabulary's thread states, in its order (python, native, gil, lock, io,
  // idle, unknown); a state past the end takes a fallback colour.
  const STATE_PALETTE = ['#3f9b4a', '#1f8a99', '#e8912d', '#d1434b', '#4a74d0', '#c3c8d0', '#8a8f98'];
  const STATE_FALLBACK = ['#9b59b6', '#b7950b', '#16a085', '#c0392b', '#7f8c8d'];
  const NO_SAMPLE_COLOR = '#f1f3f6';
  /** @type {Record<string, number[]>} */
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
  // C0/C1 controls, bidi embeddings/overrides/isolates/marks, zero-width and other invisible formatting:
  // the set of diagnose/render/text_safety.py (INVISIBLE_RANGES), kept equal by tests/unit/test_text_safety.py.
  const INVISIBLE_RE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/g;

  // ------------------------------------------------------------------ small helpers

  const $ = (/** @type {string} */ id) => document.getElementById(id);
  /** The array v is, or [] (typed: an array of the report's is read as its elements' type).
   *  @template T @param {T} v @returns {ArrOf<T>} */
  const arr = (v) => /** @type {ArrOf<T>} */ (Array.isArray(v) ? v : []);
  /** The object v is, or {} (typed: a part of the report, any of whose keys may be absent).
   *  @template T @param {T} v @returns {ObjOf<T>} */
  const obj = (v) => /** @type {ObjOf<T>} */ (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  /** @param {unknown} v @returns {v is number} */
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  /** @param {unknown} v @returns {v is number} */
  const isInt = (v) => Number.isInteger(v);
  /** @param {unknown} v @param {number} n @returns {v is number} */
  const isIdx = (v, n) => Number.isInteger(v) && /** @type {number} */ (v) >= 0 && /** @type {number} */ (v) < n;

  /** @param {unknown} v @returns {string} */
  function str(v) {
    if (v == null) return '';
    if (typeof v === 'string') return v;
    if (typeof v === 'object') {
      try { return JSON.stringify(v); } catch (e) { return '[object]'; }
    }
    return String(v);
  }

  /** @param {string} ch */
  function codePoint(ch) {
    return 'U+' + /** @type {number} */ (ch.codePointAt(0)).toString(16).toUpperCase().padStart(4, '0');
  }

  /** Plain string with invisible characters replaced by visible markers (for attributes,
   *  <option> labels and canvas text).
   *  @param {unknown} v */
  function visStr(v) {
    return str(v).replace(INVISIBLE_RE, (ch) => '\u27e8' + codePoint(ch) + '\u27e9');
  }

  /** Append v as text to parent; invisible characters become highlighted marker spans.
   *  @template {Node} T @param {T} parent @param {unknown} v @returns {T} */
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
   *  any other key -> setAttribute (URL/event attributes are refused).
   *  @template {keyof HTMLElementTagNameMap} K
   *  @param {K} tag @param {ElementAttrs | null} [attrs] @param {...unknown} kids
   *  @returns {HTMLElementTagNameMap[K]} */
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v == null || v === false) continue;
        if (k === 'class') e.className = /** @type {string} */ (v);
        else if (k === 'text') putText(e, v);
        else if (k === 'on') {
          const on = /** @type {Record<string, EventListener>} */ (v);
          for (const ev of Object.keys(on)) e.addEventListener(ev, on[ev]);
        } else if (k === 'css') {
          const css = /** @type {Record<string, string>} */ (v);
          const style = /** @type {Record<string, string>} */ (/** @type {unknown} */ (e.style));
          for (const p of Object.keys(css)) style[p] = css[p];
        }
        else if (/^on/i.test(k) || FORBIDDEN_ATTRS.has(k.toLowerCase())) throw new Error('refused attribute ' + k);
        else e.setAttribute(k, v === true ? '' : str(v));
      }
    }
    appendKids(e, kids);
    return e;
  }

  /** @param {Node} e @param {unknown[]} kids */
  function appendKids(e, kids) {
    for (const kid of kids) {
      if (kid == null || kid === false) continue;
      if (Array.isArray(kid)) appendKids(e, kid);
      else if (kid instanceof Node) e.appendChild(kid);
      else putText(e, kid);
    }
  }

  /** @template {Node} T @param {T} e @returns {T} */
  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
    return e;
  }

  /** @param {unknown} n @returns {string} */
  function fmtInt(n) {
    return isNum(n) ? Math.round(n).toLocaleString('en-US') : '\u2014';
  }

  /** @param {unknown} n @returns {string} */
  function fmtNum(n) {
    if (!isNum(n)) return str(n) || '\u2014';
    if (Number.isInteger(n)) return n.toLocaleString('en-US');
    const a = Math.abs(n);
    if (a >= 1000) return Math.round(n).toLocaleString('en-US');
    if (a >= 100) return n.toFixed(1);
    if (a >= 1) return String(Number(n.toFixed(2)));
    return String(Number(n.toPrecision(3)));
  }

  /** @param {unknown} frac @returns {string} */
  function fmtPct(frac) {
    if (!isNum(frac)) return '\u2014';
    const p = frac * 100;
    if (p === 0) return '0%';
    if (Math.abs(p) < 0.1) return '<0.1%';
    return (Math.abs(p) >= 99.95 ? p.toFixed(0) : p.toFixed(1)) + '%';
  }

  /** @param {unknown} s @param {number} total @returns {string} */
  function fmtSec(s, total) {
    if (!isNum(s)) return '\u2014';
    const digits = total >= 100 ? 1 : total >= 1 ? 2 : 3;
    return s.toFixed(digits) + ' s';
  }

  /** @param {unknown} path */
  function basename(path) {
    const s = str(path);
    const i = Math.max(s.lastIndexOf('/'), s.lastIndexOf('\\'));
    return i >= 0 ? s.slice(i + 1) : s;
  }

  /** @param {unknown} file @param {unknown} line */
  function fileLine(file, line) {
    const f = str(file);
    return isNum(line) && line > 0 ? f + ':' + line : f;
  }

  /** @param {unknown} sev */
  function sevClass(sev) {
    const s = str(sev).toLowerCase();
    return 'badge sev-' + (VOCAB.severities.includes(s) || SEVERITY_ALIASES.includes(s) ? s : 'other');
  }

  /** @param {unknown} sev */
  function badge(sev) {
    return h('span', { class: sevClass(sev), text: str(sev) || 'unknown' });
  }

  /** @template {unknown[]} A @param {(...a: A) => void} fn @param {number} ms
   *  @returns {(...a: A) => void} */
  function debounce(fn, ms) {
    let t = 0;
    return (...a) => {
      clearTimeout(t);
      t = setTimeout(() => fn(...a), ms);
    };
  }

  /** @param {string} s @returns {number} */
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
    el: /** @type {HTMLElement | null} */ (null),
    /** Lines: the first a title, then text or [key, value]; null lines are skipped.
     *  @param {(string | string[] | null)[]} lines @param {MouseEvent} ev */
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
    /** @param {MouseEvent} [ev] */
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

  /** @returns {PageJson | null} */
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

  /** The report's vocabulary (its data's `vocabulary`): severities lowest first, the critical
   *  score, thread states, the running and the waiting states, thread and process roles.
   *  @param {Partial<PageJson>} raw @returns {Vocabulary} */
  function vocabularyOf(raw) {
    const v = obj(raw.vocabulary);
    const words = (/** @type {unknown} */ x) => arr(x).map(str);
    const states = words(v.states);
    /** @type {Record<string, string>} */
    const stateColors = {};
    states.forEach((s, i) => { if (i < STATE_PALETTE.length) stateColors[s] = STATE_PALETTE[i]; });
    return {
      severities: words(v.severities),
      critical: isNum(v.critical_score) ? v.critical_score : null,
      states, stateColors,
      running: words(v.running),
      waiting: words(v.waiting),
      threadRoles: words(v.thread_roles),
      processRoles: words(v.process_roles),
    };
  }

  // The vocabulary of the page's data, set by prepare() before any section renders.
  let VOCAB = vocabularyOf({});

  /** The page's data, read from its JSON: what is malformed is left out or made empty.
   *  @param {PageJson} raw @returns {PageData} */
  function prepare(raw) {
    VOCAB = vocabularyOf(raw);
    // Each table once (docs/report-data.md): the threads and stacks are the report's own, the
    // frames' categories, the rows' threads and the timeline are its `page`.
    const report = obj(raw.report);
    const page = obj(report.page);
    const states = VOCAB.states;
    const categories = arr(page.categories).map(str);
    const threads = arr(report.threads).map((t, i) => {
      const o = obj(t);
      return {
        index: i, tid: o.tid, name: str(o.name), role: str(o.role),
        pid: isInt(o.pid) ? o.pid : null,
        samples: isNum(o.samples) ? o.samples : 0,
        states: obj(o.states),
        os: o.os && typeof o.os === 'object' ? o.os : null,
      };
    });
    const table = obj(report.stacks);
    const frameCats = arr(page.frame_categories);
    const frames = arr(table.frames).map((f, i) => {
      const o = obj(f);
      return {
        name: str(o.function), file: str(o.file),
        line: isInt(o.line) ? o.line : null,
        cat: isIdx(frameCats[i], categories.length) ? frameCats[i] : -1,
      };
    });
    const rowThreads = arr(page.stack_threads);
    /** @type {Map<unknown, number>} */
    const stateIndex = new Map(states.map((s, i) => [s, i]));
    const nF = frames.length;
    /** @type {PageStack[]} */
    const stacks = [];
    let dropped = 0;
    arr(table.samples).forEach((r, n) => {
      const row = obj(r);
      const fr = /** @type {number[]} */ (row.stack); // checked below: an array of frame indices
      const count = row.count;
      let ok = Array.isArray(fr) && isNum(count) && count > 0;
      if (ok) {
        for (let i = 0; i < fr.length; i++) {
          if (!isIdx(fr[i], nF)) { ok = false; break; }
        }
      }
      if (!ok) { dropped++; return; }
      stacks.push({
        frames: fr,
        thread: isIdx(rowThreads[n], threads.length) ? rowThreads[n] : -1,
        state: stateIndex.has(row.state) ? /** @type {number} */ (stateIndex.get(row.state)) : -1,
        count: /** @type {number} */ (count),
      });
    });
    const tl = obj(page.timeline);
    // Threads of several processes (a master and its workers): their labels carry the pid.
    const multiProcess = new Set(threads.map((t) => t.pid).filter((p) => p != null)).size > 1;
    return {
      report, states, categories, threads, frames, stacks, dropped, multiProcess, vocab: VOCAB,
      generatedAt: str(page.generated_at),
      // Per finding, its evidence as labelled rows with units (absent in older pages).
      evidenceText: Array.isArray(raw.evidence_text) ? raw.evidence_text : null,
      // Per finding, its levers' and gain's words (render/wording.py), as the page prints them.
      gainText: arr(raw.gain_text).map(obj),
      // The observer's CPU beside the target's, in words (render/wording.py); '' when not measured.
      observerCpuText: typeof raw.observer_cpu_text === 'string' ? raw.observer_cpu_text : '',
      // Where the service's core-seconds went, in words (render/cpu_account_words.py); null in
      // pages written before the account.
      cpuAccountText: raw.cpu_account_text && typeof raw.cpu_account_text === 'object' ? obj(raw.cpu_account_text) : null,
      // Evidence keys with no row of their own (the knob line, the verdict's thread dump).
      evidenceHidden: new Set(Array.isArray(raw.evidence_hidden) ? raw.evidence_hidden.map(str) : ['fix']),
      timeline: {
        interval: isNum(tl.interval_s) && tl.interval_s > 0 ? tl.interval_s : 0,
        steps: isInt(tl.steps) && tl.steps > 0 ? tl.steps : 0,
        lanes: arr(tl.lanes).map(obj),
      },
    };
  }

  /** A thread as people read it: "4340 \u00b7 MainThread" when threads come from several
   *  processes, the bare name otherwise.
   *  @param {PageData} D @param {PageThread} t */
  function threadLabel(D, t) {
    return D.multiProcess && t.pid != null ? t.pid + ' \u00b7 ' + t.name : t.name;
  }

  /** @param {PageData} D @param {number} si @returns {string} */
  function stateColor(D, si) {
    if (si < 0 || !isIdx(si, D.states.length)) return NO_SAMPLE_COLOR;
    const name = D.states[si];
    return Object.prototype.hasOwnProperty.call(D.vocab.stateColors, name)
      ? D.vocab.stateColors[name] : STATE_FALLBACK[si % STATE_FALLBACK.length];
  }

  /** @param {PageData} D @param {number} ci @returns {number[]} */
  function categoryHsl(D, ci) {
    if (ci < 0) return [220, 8, 80];
    const name = D.categories[ci];
    if (Object.prototype.hasOwnProperty.call(CATEGORY_HSL, name)) return CATEGORY_HSL[name];
    return [CATEGORY_FALLBACK_HUES[ci % CATEGORY_FALLBACK_HUES.length], 55, 70];
  }

  /** @param {PageData} D @param {number} ci */
  function categoryColor(D, ci) {
    const c = categoryHsl(D, ci);
    return 'hsl(' + c[0] + ',' + c[1] + '%,' + c[2] + '%)';
  }

  /** @param {string} color @param {string} label @param {string} [extraClass] */
  function legendItem(color, label, extraClass) {
    const sw = h('span', { class: 'swatch' + (extraClass ? ' ' + extraClass : '') });
    sw.style.backgroundColor = color;
    return h('span', { class: 'legend-item' }, sw, h('span', { text: label }));
  }

  /** @param {PageData} D */
  function stateLegend(D) {
    const box = h('div', { class: 'legend', 'aria-label': 'thread states' });
    D.states.forEach((s, i) => box.appendChild(legendItem(stateColor(D, i), s)));
    box.appendChild(legendItem(NO_SAMPLE_COLOR, 'no sample', 'hollow'));
    return box;
  }

  // ------------------------------------------------------------------ generic sortable table

  /** columns: [{label, value(row) -> sortable, cell(row) -> Node|string, num, descFirst, ascFirst,
   *  title, cls}]. opts: {cls, sortCol, sortDir, rowAttrs(row) -> {attr: value},
   *  afterRow(row, nCols) -> <tr>|null: a detail row kept under its row whatever the order}.
   *  @template Row @param {TableColumn<Row>[]} columns @param {Row[]} rows
   *  @param {TableOptions<Row>} [opts] */
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

    /** @param {unknown} a @param {unknown} b */
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

    /** @param {Row} r */
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

  // @ts-check
  // Report page script, part: the per-thread table and the timeline. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ 5. per-thread table

  /** @param {PageData} D */
  function renderThreads(D) {
    const root = clear(/** @type {HTMLElement} */ ($('threads-body')));
    if (!D.threads.length) {
      root.appendChild(h('p', { class: 'muted', text: 'No threads were sampled.' }));
      return;
    }
    const hasOs = D.threads.some((t) => t.os);
    /** @type {(t: PageThread, s: string) => number} */
    const stateCount = (t, s) => (isNum(t.states[s]) ? t.states[s] : 0);
    /** @type {(t: PageThread) => number} */
    const stateTotal = (t) => D.states.reduce((a, s) => a + stateCount(t, s), 0);
    /** @type {(t: PageThread) => number | null} */
    const busyShare = (t) => {
      const tot = stateTotal(t);
      return tot ? D.vocab.running.reduce((a, s) => a + stateCount(t, s), 0) / tot : null;
    };
    /** @type {(t: PageThread, k: keyof Model.ThreadOs) => number | null} */
    const osNum = (t, k) => (t.os && isNum(t.os[k]) ? t.os[k] : null);

    /** @param {PageThread} t */
    function statesCell(t) {
      const tot = stateTotal(t);
      const bar = h('div', { class: 'sbar', role: 'img' });
      /** @type {[string, number][]} */
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

    /** @type {TableColumn<PageThread>[]} */
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

  /** @param {PageData} D */
  function renderTimeline(D) {
    const root = clear(/** @type {HTMLElement} */ ($('timeline-body')));
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
    /** @type {{cssW: number, cssH: number, plotX: number, plotW: number, scale: number, labelW: number} | null} */
    let geom = null;

    /** @param {CanvasRenderingContext2D} ctx @param {string} text @param {number} maxW */
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

    /** The lane's label, or the step and the run of a lane, under the pointer (null: none).
     *  @returns {{lane: typeof lanes[number], label: true, step?: undefined, run?: undefined}
     *    | {lane: typeof lanes[number], label?: undefined, step: number, run: number} | null}
     *  @param {MouseEvent} ev */
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

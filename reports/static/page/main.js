  // @ts-check
  // Report page script, part: the footer, printing, and the entry point. The parts share one scope: diagnose/render/html.py
  // joins them in PAGE_SCRIPT order inside one strict-mode function (one inline script).

  // ------------------------------------------------------------------ footer, print, main

  /** @param {PageData} D */
  function renderFooter(D) {
    const f = $('footer');
    if (!f) return;
    clear(f);
    putText(f, 'diagnose report \u00b7 schema ' + str(D.report.schema_version || '?') +
      (D.generatedAt ? ' \u00b7 generated ' + D.generatedAt : '') + ' \u00b7 self-contained, works offline');
  }

  function setupPrint() {
    /** @type {HTMLDetailsElement[]} */
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

  /** @param {string} msg */
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
    /** @type {[string, (D: PageData) => void][]} */
    const parts = [
      ['verdict', renderHeader], ['cpu account', renderCpuAccount], ['findings', renderFindings],
      ['facts', renderFacts],
      ['processes', renderProcesses], ['structure', renderStructure], ['wait graph', renderWaitGraph], ['where the waits end', renderWaitChains], ['flame', renderFlame], ['threads', renderThreads],
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

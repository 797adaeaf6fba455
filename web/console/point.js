// One recovery point: state, lock, anomalies, the latest verification and
// restore-test evidence, its whole history as a timeline, and a browser for
// its files (list a directory, download one file).

import * as api from './api.js';
import {
  esc, errText, flash, fmtBytes, fmtCount, fmtSpan, fmtTime, stateBadge, throttle, timeEl,
} from './util.js';

const LABELS = {
  'backup.committed': 'Backup committed',
  'point.discovered': 'Found in the repository',
  'verification.started': 'Verification started',
  'verification.passed': 'Verification passed',
  'verification.failed': 'Verification failed',
  'restore_test.started': 'Restore test started',
  'restore_test.passed': 'Restore test passed',
  'restore_test.failed': 'Restore test failed',
  'point.locked': 'Locked',
  'point.forgotten': 'Forgotten (retention)',
  'anomaly.detected': 'Anomaly detected',
  'job.scheduled': 'Job scheduled',
  'job.started': 'Job started',
  'job.finished': 'Job finished',
  'job.failed': 'Job failed',
  'job.abandoned': 'Job abandoned',
};

function tone(type) {
  if (/failed|abandoned|anomaly|corrupt|vanished|log_repaired/.test(type)) return 'bad';
  if (/passed|committed|finished/.test(type)) return 'good';
  return 'neutral';
}

function dl(pairs) {
  return `<dl class="facts">${pairs
    .filter((p) => p)
    .map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${v}</dd></div>`)
    .join('')}</dl>`;
}

// What a restore test covered: "complete" or "sample: 120 of 5,000 files".
function coverageText(c) {
  if (!c) return '—';
  if (c.complete) return `<span class="ok" data-coverage="complete">complete</span> (${fmtCount(c.files)} files)`;
  const of = c.files_in_point !== null && c.files_in_point !== undefined ? ` of ${fmtCount(c.files_in_point)}` : ' (of an unknown number)';
  return `<span class="over" data-coverage="sample">sample</span>: ${fmtCount(c.files)}${of} files`;
}

function evidenceHtml(rt, coverage) {
  if (!rt) {
    return '<p class="muted" data-evidence="none">No restore test has run for this point yet, so it is not proven recoverable.</p>';
  }
  const ev = rt.evidence || {};
  const restored = ev.restored || [];
  const matched = ev.digests_compared !== undefined ? `${fmtCount(ev.digests_matched)} of ${fmtCount(ev.digests_compared)}` : '—';
  const allMatch = ev.digests_compared !== undefined && ev.digests_matched === ev.digests_compared && ev.digests_compared > 0;
  return `<div class="evidence ${rt.passed ? 'passed' : 'failed'}" data-evidence="${rt.passed ? 'passed' : 'failed'}">
<p><strong>${rt.passed ? 'Passed' : 'Failed'}</strong> ${timeEl(rt.at)}${rt.reason ? ` — ${esc(rt.reason)}` : ''}</p>
${dl([
    ['Coverage', coverageText(coverage)],
    ['Files restored', fmtCount(ev.files)],
    ['Bytes restored', fmtBytes(ev.bytes)],
    ['Digests matched', `<span class="${allMatch ? 'ok' : 'over'}">${matched}</span>`],
    ['Took', ev.duration_ms !== undefined ? fmtSpan(ev.duration_ms) : '—'],
    ['Sandbox', ev.location ? `<code>${esc(ev.location)}</code>` : '—'],
  ])}
${restored.length ? `<details><summary>What was restored (${fmtCount(restored.length)} ${restored.length === 1 ? 'entry' : 'entries'})</summary><ul class="paths">${restored.slice(0, 500).map((p) => `<li><code>${esc(p)}</code></li>`).join('')}</ul>${restored.length > 500 ? `<p class="muted">and ${restored.length - 500} more</p>` : ''}</details>` : ''}
</div>`;
}

function verificationHtml(v) {
  if (!v) return '<p class="muted">Not verified yet.</p>';
  return `<p>${v.passed ? '<strong class="ok">Passed</strong>' : '<strong class="over">Failed</strong>'} ${timeEl(v.at)}</p>
${dl([
    ['Depth', esc(v.depth)],
    ['Bytes read back', fmtBytes(v.bytes_read)],
    v.damaged && v.damaged.length ? ['Damaged', `<ul>${v.damaged.map((d) => `<li><code>${esc(d)}</code></li>`).join('')}</ul>`] : null,
  ])}`;
}

function historyHtml(history) {
  if (!history || !history.length) return '<p class="muted">No events name this point.</p>';
  return `<ol class="timeline">${history
    .map((e) => {
      const d = e.data || {};
      const bits = [];
      if (d.summary) bits.push(`${fmtCount(d.summary.files)} files, ${fmtBytes(d.summary.bytes)}, ${fmtBytes(d.summary.added_bytes)} added, ${fmtSpan(d.summary.duration_ms)}`);
      if (d.bytes_read !== undefined) bits.push(`${fmtBytes(d.bytes_read)} read back (${esc(d.depth)})`);
      if (d.evidence) bits.push(`${fmtCount(d.evidence.files)} files restored, ${fmtCount(d.evidence.digests_matched)}/${fmtCount(d.evidence.digests_compared)} digests matched`);
      if (d.reason) bits.push(esc(d.reason));
      if (d.message) bits.push(esc(d.message));
      if (d.job) bits.push(`job <a href="#/jobs?job=${esc(encodeURIComponent(d.job))}">${esc(d.job)}</a>`);
      return `<li class="${tone(e.type)}" data-type="${esc(e.type)}"><div class="when">${esc(fmtTime(e.recorded_at))}</div>
<div class="what"><strong>${esc(LABELS[e.type] || e.type)}</strong> <small class="muted">#${esc(e.seq)}</small><br>${bits.join(' · ')}
<details><summary>Event data</summary><pre>${esc(JSON.stringify(e, null, 2))}</pre></details></div></li>`;
    })
    .join('')}</ol>`;
}

function modeText(m) {
  if (m === null || m === undefined) return '';
  return typeof m === 'number' ? (m & 0o7777).toString(8).padStart(4, '0') : esc(m);
}

export async function render(main, route, ctx) {
  const id = route.parts[0];
  const enc = encodeURIComponent(id);
  let point = await api.get(`/points/${enc}`);
  if (!route.alive()) return;

  main.innerHTML = `
<nav class="crumbs" aria-label="Breadcrumb"><a href="#/points">Recovery points</a> › <code>${esc(id.slice(0, 12))}</code></nav>
<div id="pt-head"></div>
<div class="columns">
  <section class="panel" aria-labelledby="h-evidence"><h2 id="h-evidence">Restore-test evidence</h2><div id="pt-evidence"></div></section>
  <section class="panel" aria-labelledby="h-verify"><h2 id="h-verify">Verification</h2><div id="pt-verify"></div></section>
</div>
<section aria-labelledby="h-files"><h2 id="h-files">Files</h2><div id="pt-files"></div></section>
<section aria-labelledby="h-history"><h2 id="h-history">History</h2><div id="pt-history"></div></section>`;

  function drawDetail() {
    const s = point.summary;
    const anomalies = point.anomalies || [];
    main.querySelector('#pt-head').innerHTML = `
<div class="title-row"><h1>Recovery point ${stateBadge(point.state)}</h1></div>
<p><code class="id">${esc(point.id)}</code></p>
${point.held_unknown_because ? `<p class="over" data-held-unknown>Held at <strong>unknown</strong>: ${esc(point.held_unknown_because)}</p>` : ''}
${point.vanished_because ? `<p class="over" data-vanished>Its manifest is gone from the repository (${esc(point.vanished_because)}): this point can never count again.</p>` : ''}
${dl([
    ['Plan', point.plan ? `<a href="#/plans/${esc(encodeURIComponent(point.plan))}">${esc(point.plan)}</a>` : '<span class="muted">none</span>'],
    ['Taken', `${esc(fmtTime(point.snapshot_at))}`],
    ['Committed', `${esc(fmtTime(point.committed_at))}`],
    ['Repository', esc(point.repository)],
    ['Files', s ? fmtCount(s.files) : '—'],
    ['Size', s ? fmtBytes(s.bytes) : '—'],
    ['Added by this run', s ? fmtBytes(s.added_bytes) : '—'],
    ['Stored (compressed, encrypted)', s ? fmtBytes(s.stored_bytes) : '—'],
    ['Backup took', s ? fmtSpan(s.duration_ms) : '—'],
    ['Last complete restore test', point.last_complete_restore_at ? esc(fmtTime(point.last_complete_restore_at)) : '<span class="muted">never</span>'],
    ['Verified at depth', point.verified_depth ? esc(point.verified_depth) : '—'],
    ['Lock', point.locked_until ? `<span class="badge locked">locked</span> until ${esc(fmtTime(point.locked_until))}` : '<span class="muted">not locked</span>'],
  ])}
${ctx.canOperate ? `<form id="lock-form" class="inline-form"><label for="lock-until">Lock against deletion until (UTC)</label> <input type="datetime-local" id="lock-until" name="until" required> <button type="submit" class="secondary">Lock</button> <small class="muted">A lock can be extended, never shortened.</small></form>` : ''}
<section aria-labelledby="h-anom"><h2 id="h-anom">Anomaly flags</h2>
${anomalies.length ? `<ul class="anomalies">${anomalies.map((a) => `<li><span class="badge anomaly">${esc(a.kind)}</span> score ${(a.score_permille / 10).toFixed(1)} % — ${esc(a.detail)}</li>`).join('')}</ul><p class="help">The ransomware heuristic reports; it never acts.</p>` : '<p class="muted">None reported.</p>'}
</section>`;
    main.querySelector('#pt-evidence').innerHTML = evidenceHtml(point.restore_test, point.coverage);
    main.querySelector('#pt-verify').innerHTML = verificationHtml(point.verification);
    main.querySelector('#pt-history').innerHTML = historyHtml(point.history);
    const lock = main.querySelector('#lock-form');
    if (lock) lock.addEventListener('submit', onLock);
  }

  async function onLock(ev) {
    ev.preventDefault();
    const v = ev.target.until.value;
    if (!v) return;
    const until = new Date(v + 'Z').toISOString().replace(/\.\d+Z$/, 'Z');
    try {
      await api.post(`/points/${enc}/lock`, { until });
      flash(`Point locked until ${fmtTime(until)}.`);
      refresh();
    } catch (e) {
      flash('Could not lock: ' + errText(e), 'error');
    }
  }

  async function refresh() {
    try {
      point = await api.get(`/points/${enc}`);
      if (route.alive()) drawDetail();
    } catch (_) {
      /* keep what is shown */
    }
  }

  // The file browser.
  const files = main.querySelector('#pt-files');
  let cwd = route.query.get('path') || '/';
  async function browse(path) {
    cwd = path;
    files.setAttribute('aria-busy', 'true');
    let listing;
    try {
      listing = await api.get(`/points/${enc}/files${api.qs({ path })}`);
    } catch (e) {
      files.innerHTML = `<p class="error" role="alert">Cannot list <code>${esc(path)}</code>: ${esc(errText(e))}</p>`;
      files.removeAttribute('aria-busy');
      return;
    }
    if (!route.alive()) return;
    const here = listing.path || path;
    const parts = here.split('/').filter(Boolean);
    let crumbs = `<button type="button" class="link" data-dir="/">/</button>`;
    let acc = '';
    for (const p of parts) {
      acc += '/' + p;
      crumbs += ` <button type="button" class="link" data-dir="${esc(acc)}">${esc(p)}</button> /`;
    }
    const entries = (listing.entries || []).slice().sort((a, b) => (a.kind === 'dir') === (b.kind === 'dir') ? (a.name < b.name ? -1 : 1) : a.kind === 'dir' ? -1 : 1);
    const join = (n) => (here.endsWith('/') ? here : here + '/') + n;
    let rows = '';
    for (const e of entries) {
      const full = join(e.name);
      const name = e.kind === 'dir'
        ? `<button type="button" class="link" data-dir="${esc(full)}">${esc(e.name)}/</button>`
        : `<span>${esc(e.name)}</span>`;
      rows += `<tr data-entry="${esc(e.name)}" data-kind="${esc(e.kind)}"><th scope="row">${name}</th><td>${esc(e.kind)}</td><td class="num">${e.kind === 'file' ? fmtBytes(e.size) : ''}</td><td><code>${modeText(e.mode)}</code></td><td>${esc(fmtTime(e.mtime))}</td>
<td>${e.kind === 'file' && ctx.canReadContent ? `<button type="button" class="small secondary" data-download="${esc(full)}" aria-label="Download ${esc(e.name)}">Download</button>` : ''}</td></tr>`;
    }
    files.innerHTML = `<p class="crumbs" aria-label="Directory">${crumbs}</p>
${listing.next ? `<p class="muted" role="note">Only the first ${entries.length} entries are shown (the API pages listings: <code>after=${esc(listing.next)}</code> goes on).</p>` : ''}
${entries.length ? `<div class="table-wrap"><table class="files"><thead><tr><th scope="col">Name</th><th scope="col">Kind</th><th scope="col" class="num">Size</th><th scope="col">Mode</th><th scope="col">Modified</th><th scope="col"><span class="sr">Download</span></th></tr></thead><tbody>${rows}</tbody></table></div>` : '<p class="muted">This directory is empty.</p>'}`;
    files.removeAttribute('aria-busy');
  }

  async function onFilesClick(ev) {
    const d = ev.target.closest('button[data-dir]');
    if (d) return browse(d.dataset.dir);
    const f = ev.target.closest('button[data-download]');
    if (!f) return;
    f.disabled = true;
    try {
      const blob = await api.fileBlob(id, f.dataset.download);
      const url = URL.createObjectURL(blob);
      const a = document.createElement('a');
      a.href = url;
      a.download = f.dataset.download.split('/').pop() || 'file';
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      flash(`Downloaded ${f.dataset.download} (${fmtBytes(blob.size)}).`);
    } catch (e) {
      flash('Download failed: ' + errText(e), 'error');
    } finally {
      f.disabled = false;
    }
  }
  files.addEventListener('click', onFilesClick);

  drawDetail();
  await browse(cwd);
  const again = throttle(refresh, 1000);
  ctx.on('*', (ev) => {
    const d = (ev && ev.data) || {};
    if (d.point === id || d.snapshot === id) again();
  });
}

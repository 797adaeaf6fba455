// One recovery point: state, lock, anomalies, the latest verification and
// restore-test evidence, its whole history as a timeline, a browser for
// its files (list a directory, download one file), and a form that restores
// the point, or a path in it, into a directory of a host (a job, followed
// until it ends).

import * as api from './api.js';
import {
  esc, errText, flash, fmtBytes, fmtCount, fmtSpan, fmtTime, jobBadge, progressText, stateBadge, throttle, timeEl,
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
  'restore.completed': 'Restored to a host',
  'job.scheduled': 'Job scheduled',
  'job.started': 'Job started',
  'job.finished': 'Job finished',
  'job.failed': 'Job failed',
  'job.abandoned': 'Job abandoned',
};

function tone(type) {
  if (/failed|abandoned|anomaly|corrupt|vanished|log_repaired/.test(type)) return 'bad';
  if (/passed|committed|finished|completed/.test(type)) return 'good';
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

// A restored guest started: "booted to “login:” in 2.6 s (tcg)".
function guestText(g) {
  const what = g.check === 'boot' ? `booted${g.marker ? ` to “${esc(g.marker)}”` : ''}` : 'ran <code>/bin/true</code>';
  const how = g.accelerator ? ` (${esc(g.accelerator)})` : '';
  return g.came_up
    ? `<span class="ok" data-guest="up">${what}</span> in ${fmtSpan(g.took_ms)}${how}`
    : `<span class="over" data-guest="down">did not come up</span> within ${fmtSpan(g.took_ms)}${how}`;
}

function guestDetails(g) {
  const tail = (g.console_tail || []).map((l) => esc(l)).join('\n');
  return `<details data-guest-console><summary>Console and command</summary><p><code>${esc(g.command)}</code></p>${tail ? `<pre class="console">${tail}</pre>` : '<p class="muted">The console showed nothing.</p>'}</details>`;
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
    coverage && coverage.guest ? ['Guest started', guestText(coverage.guest)] : null,
  ])}
${coverage && coverage.guest ? guestDetails(coverage.guest) : ''}
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
      if (d.summary) bits.push(`${fmtCount(d.summary.files)} files, ${d.summary.total_bytes != null ? fmtBytes(d.summary.total_bytes) : 'size not recorded'}, ${fmtBytes(d.summary.bytes)} read, ${fmtBytes(d.summary.added_bytes)} added, ${fmtSpan(d.summary.duration_ms)}`);
      if (d.bytes_read !== undefined) bits.push(`${fmtBytes(d.bytes_read)} read back (${esc(d.depth)})`);
      if (d.evidence) bits.push(`${fmtCount(d.evidence.files)} files restored, ${fmtCount(d.evidence.digests_matched)}/${fmtCount(d.evidence.digests_compared)} digests matched`);
      if (d.destination !== undefined) bits.push(`${fmtCount(d.files)} files, ${fmtBytes(d.bytes)} of <code>${esc(d.path)}</code> into <code>${esc(d.destination)}</code> on ${d.agent ? `agent ${esc(d.agent)}` : 'the server'}`);
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

// ---- Restore to a host ----

const ENDED = ['succeeded', 'failed', 'abandoned'];

/**
 * Where a restore of `point` goes when no host is chosen, as the server
 * decides it: the agent of a plan `agent:NAME:/path`, else the server.
 * `{known, agent}`; `known` is false when the plan could not be read (the
 * form then lets the server decide).
 */
async function restoreHost(point) {
  if (!point.plan) return { known: true, agent: null };
  try {
    const plan = await api.get(`/plans/${encodeURIComponent(point.plan)}`);
    const m = /^agent:([^:]+):\//.exec((plan && plan.source) || '');
    return { known: true, agent: m ? m[1] : null };
  } catch (e) {
    // A deleted plan: the server restores on itself.
    if (e instanceof api.ApiError && e.status === 404) return { known: true, agent: null };
    return { known: false, agent: null };
  }
}

function restoreField(name, id, label, help, extra) {
  return `<div class="field" data-field="${name}"><label for="${id}">${esc(label)}</label>
<input type="text" id="${id}" name="${name}" spellcheck="false" autocomplete="off" aria-describedby="${id}-help ${id}-error" ${extra}>
<p class="help" id="${id}-help">${help}</p><p class="field-error" id="${id}-error"></p></div>`;
}

function restoreFormHtml(host) {
  const where = host.agent
    ? `<fieldset class="group choice" data-field="host" aria-describedby="r-host-error"><legend>Restore on</legend>
<div class="field check"><input type="radio" id="r-host-agent" name="host" value="agent" checked><label for="r-host-agent">the agent <strong>${esc(host.agent)}</strong>, whose plan made this point</label></div>
<div class="field check"><input type="radio" id="r-host-server" name="host" value="server"><label for="r-host-server">the server</label></div>
<p class="field-error" id="r-host-error"></p></fieldset>`
    : `<p class="help" data-host="${host.known ? 'server' : 'default'}">${host.known
      ? 'It is restored on the server: this point was not made by an agent\u2019s plan.'
      : 'The server picks the host: the agent whose plan made this point, otherwise the server itself.'}</p>`;
  return `<form id="restore-form" novalidate>
<div id="restore-errors" class="error-summary" role="alert" tabindex="-1" hidden></div>
${restoreField('path', 'r-path', 'Path inside the point', '<code>/</code> restores everything; a directory restores what is in it, a file restores alone. <strong>Restore\u2026</strong> in the file browser fills this in.', 'value="/" required')}
${restoreField('destination', 'r-dest', 'Destination directory on the host', 'An absolute path. It must be empty or not exist yet (an interrupted restore of the same point and path into it resumes). On the server it must lie below the configuration\u2019s <code>[sources] allow</code>, away from the service\u2019s own files.', 'required aria-required="true" placeholder="/srv/restored"')}
${where}
<div class="buttons"><button type="submit" id="restore-submit">Restore</button></div>
</form>
<div id="restore-job" class="restore-job"></div>
<p id="restore-said" class="sr" role="status" aria-live="polite"></p>`;
}

/** The summary and per-field messages of a restore that was not started. */
function showRestoreErrors(form, fields, message) {
  for (const p of form.querySelectorAll('.field-error')) p.textContent = '';
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  const summary = form.querySelector('#restore-errors');
  const items = [];
  let first = null;
  for (const [key, msg] of Object.entries(fields || {})) {
    const name = key.replace(/^\//, '');
    const target = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
    const p = target && target.querySelector(':scope > .field-error');
    if (p) {
      p.textContent = msg;
      const input = target.querySelector('input[type=text]');
      if (input) input.setAttribute('aria-invalid', 'true');
      first = first || input || target.querySelector('input');
    }
    items.push(`<li>${esc(name)}: ${esc(msg)}</li>`);
  }
  if (!message && !items.length) {
    summary.hidden = true;
    summary.innerHTML = '';
    return;
  }
  summary.hidden = false;
  summary.innerHTML = `<h2>The restore was not started</h2>${message ? `<p>${esc(message)}</p>` : ''}${items.length ? `<ul>${items.join('')}</ul>` : ''}`;
  if (first) first.focus();
  else summary.focus();
}

/** The followed restore job: state, progress, and how it ended. */
function restoreJobHtml(t, canOperate) {
  const j = t.job;
  const link = `<a href="#/jobs?job=${esc(encodeURIComponent(j.id))}"><code>${esc(j.id)}</code></a>`;
  const where = `<code>${esc(t.req.path)}</code> into <code>${esc(t.req.destination)}</code> on ${esc(t.req.where)}`;
  const err = j.error;
  const cancel = canOperate && !ENDED.includes(j.state)
    ? ` <button type="button" class="small danger" data-restore-cancel="${esc(j.id)}">Cancel this restore</button>` : '';
  let body;
  if (j.state === 'succeeded') {
    const c = t.completed;
    body = `<p class="outcome ok" data-outcome="succeeded"><strong>Restored</strong> ${where}${c ? `: ${fmtCount(c.files)} files, ${fmtBytes(c.bytes)}` : ''}.</p>`;
  } else if (j.state === 'failed' || j.state === 'abandoned') {
    body = `<div class="job-error" data-outcome="${esc(j.state)}"><p><strong class="over">The restore ${j.state === 'failed' ? 'failed' : 'was abandoned'}</strong>${err && err.kind !== j.state ? ` (${esc(err.kind)})` : ''}: ${where}</p>${err ? `<pre>${esc(err.message)}</pre>` : ''}</div>`;
  } else if (err) {
    // Failed, and scheduled again by the service (a retryable failure).
    body = `<div class="job-error" data-outcome="retrying"><p><strong class="over">The last attempt failed</strong> (${esc(err.kind)}); attempt ${esc(j.attempt)} is ${j.state === 'running' ? 'running' : 'waiting'}.</p><pre>${esc(err.message)}</pre></div>`;
  } else if (j.state === 'running') {
    const p = t.live;
    const done = p ? p.bytes : j.progress && j.progress.bytes_done;
    const total = p ? p.bytes_total : j.progress && j.progress.bytes_total;
    const value = total ? ` value="${Math.min(1, (done || 0) / total)}"` : '';
    const text = p ? progressText(p) : done !== undefined && done !== null ? fmtBytes(done) + (total ? ' of ' + fmtBytes(total) : '') : 'starting…';
    body = `<p data-outcome="running">Restoring ${where}</p><p><progress max="1"${value} aria-label="restore progress"></progress> <span class="prog">${esc(text)}</span></p>`;
  } else {
    body = `<p data-outcome="waiting">Waiting to restore ${where}${t.req.agent ? ` (until the agent ${esc(t.req.agent)} takes the job)` : ''}.</p>`;
  }
  const lost = t.pollError ? `<p class="muted">Could not read the job just now (${esc(errText(t.pollError))}); trying again.</p>` : '';
  return `<div class="restore-status" data-job="${esc(j.id)}" data-state="${esc(j.state)}"><p>Restore job ${link} ${jobBadge(j.state)}${cancel}</p>${body}${lost}</div>`;
}

/** What the live region says about the followed job: only when its state or error changes. */
function restoreJobSaid(t) {
  const j = t.job;
  if (j.state === 'succeeded') return `Restore job ${j.id} succeeded.`;
  if (j.state === 'failed' || j.state === 'abandoned') return `Restore job ${j.id} ${j.state}${j.error ? ': ' + j.error.message : ''}.`;
  if (j.error) return `The last attempt of restore job ${j.id} failed: ${j.error.message}. It will be retried.`;
  return `Restore job ${j.id} is ${j.state}.`;
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
<section class="panel" id="pt-restore-section" aria-labelledby="h-restore"><h2 id="h-restore">Restore to a host</h2><div id="pt-restore"></div></section>
<section aria-labelledby="h-history"><h2 id="h-history">History</h2><div id="pt-history"></div></section>`;

  function changesHtml(c) {
    if (!c) return '';
    return `<details data-changes><summary>What changed since <code>${esc(c.compared_with.slice(0, 12))}</code></summary>${dl([
      ['Files before', fmtCount(c.files_before)],
      ['Changed in place', fmtCount(c.changed)],
      ['Added', fmtCount(c.added)],
      ['Deleted', fmtCount(c.deleted)],
      ['Renamed', fmtCount(c.renamed)],
      ['Stopped compressing', c.became_incompressible === null ? '<span class="muted">unknown (the repository does not compress)</span>' : fmtCount(c.became_incompressible)],
      ['Extension gained', c.churn_extension ? `<code>.${esc(c.churn_extension)}</code> by ${fmtCount(c.churn_files)} files` : '<span class="muted">none</span>'],
      ['Note-like file', c.note_name ? `<code>${esc(c.note_name)}</code> in ${fmtCount(c.note_dirs)} directories` : '<span class="muted">none</span>'],
    ])}</details>`;
  }

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
    ...(point.copy_of ? [['Copy of', `<a href="#/points/${esc(point.copy_of.source)}"><code>${esc(point.copy_of.source.slice(0, 12))}</code></a> · ${point.copy_of.location === 'remote' ? 'off this host' : 'on this host'} · locks enforced by ${esc(point.copy_of.locks_enforced_by)}`]] : []),
    ['Files', s ? fmtCount(s.files) : '—'],
    ['Size', s && s.size_bytes != null ? fmtBytes(s.size_bytes) : '<span class="muted">unknown (not recorded for points made before Vouch recorded sizes)</span>'],
    ['Read by this run', s ? fmtBytes(s.bytes_read) : '—'],
    ['Added by this run', s ? fmtBytes(s.added_bytes) : '—'],
    ['Stored (compressed, encrypted)', s ? fmtBytes(s.stored_bytes) : '—'],
    ['Backup took', s ? fmtSpan(s.duration_ms) : '—'],
    ['Last complete restore test', point.last_complete_restore_at ? esc(fmtTime(point.last_complete_restore_at)) : '<span class="muted">never</span>'],
    ['Verified at depth', point.verified_depth ? esc(point.verified_depth) : '—'],
    ['Lock', point.locked_until ? `<span class="badge locked">locked</span> until ${esc(fmtTime(point.locked_until))}` : '<span class="muted">not locked</span>'],
  ])}
${ctx.canOperate ? `<form id="lock-form" class="inline-form"><label for="lock-until">Lock against deletion until (UTC)</label> <input type="datetime-local" id="lock-until" name="until" required> <button type="submit" class="secondary">Lock</button> <small class="muted">A lock can be extended, never shortened.</small></form>` : ''}
<section aria-labelledby="h-anom" data-anomalies><h2 id="h-anom">Ransomware heuristic</h2>
${anomalies.length ? `<p class="over"><strong>Anomaly:</strong> compared with the point before it, this one looks like files being encrypted. Check the host; earlier points are untouched. The heuristic reports; it never acts.</p>
<ul class="anomalies">${anomalies.map((a) => `<li><span class="badge anomaly">${esc(a.kind)}</span> score ${esc(String(a.score_permille))}/1000 (500 is its threshold) — ${esc(a.detail)}</li>`).join('')}</ul>
${(point.anomaly_paths || []).length ? `<p>The paths that weighed most:</p><ul class="anomalies" data-anomaly-paths>${point.anomaly_paths.map((p) => `<li><code>${esc(p)}</code></li>`).join('')}</ul>` : ''}` : (point.changes ? '<p class="muted">No anomaly: nothing in what changed looks like encryption.</p>' : '<p class="muted">Not compared: a first backup, a copy, a disk image, or a point recorded before the heuristic existed.</p>')}
${changesHtml(point.changes)}
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
    const restoreHere = ctx.canReadContent
      ? ` <button type="button" class="small secondary" data-restore-path="${esc(here)}">Restore this directory…</button>` : '';
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
<td class="actions">${e.kind === 'file' && ctx.canReadContent ? `<button type="button" class="small secondary" data-download="${esc(full)}" aria-label="Download ${esc(e.name)}">Download</button> ` : ''}${ctx.canReadContent ? `<button type="button" class="small secondary" data-restore-path="${esc(full)}" aria-label="Restore ${esc(e.name)} to a host…">Restore…</button>` : ''}</td></tr>`;
    }
    files.innerHTML = `<p class="crumbs" aria-label="Directory">${crumbs}${restoreHere}</p>
${listing.next ? `<p class="muted" role="note">Only the first ${entries.length} entries are shown (the API pages listings: <code>after=${esc(listing.next)}</code> goes on).</p>` : ''}
${entries.length ? `<div class="table-wrap"><table class="files"><thead><tr><th scope="col">Name</th><th scope="col">Kind</th><th scope="col" class="num">Size</th><th scope="col">Mode</th><th scope="col">Modified</th><th scope="col"><span class="sr">Actions</span></th></tr></thead><tbody>${rows}</tbody></table></div>` : '<p class="muted">This directory is empty.</p>'}`;
    files.removeAttribute('aria-busy');
  }

  async function onFilesClick(ev) {
    const d = ev.target.closest('button[data-dir]');
    if (d) return browse(d.dataset.dir);
    const r = ev.target.closest('button[data-restore-path]');
    if (r) return pickRestorePath(r.dataset.restorePath);
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

  // Restore to a host: the form, then the job followed until it ends.
  const restoreBox = main.querySelector('#pt-restore');
  let host = { known: false, agent: null };
  let tracked = null;

  function pickRestorePath(path) {
    const input = restoreBox.querySelector('#r-path');
    if (!input) return;
    input.value = path;
    input.removeAttribute('aria-invalid');
    restoreBox.querySelector('#r-path-error').textContent = '';
    main.querySelector('#pt-restore-section').scrollIntoView({ block: 'start' });
    input.focus();
  }

  function drawJob() {
    const t = tracked;
    if (!t || !route.alive()) return;
    const html = restoreJobHtml(t, ctx.canOperate);
    if (html !== t.html) {
      t.html = html;
      restoreBox.querySelector('#restore-job').innerHTML = html;
    }
    const said = restoreJobSaid(t);
    if (said !== t.said) {
      t.said = said;
      restoreBox.querySelector('#restore-said').textContent = said;
    }
  }

  async function poll(t) {
    if (t.inflight) {
      t.again = true;
      return;
    }
    clearTimeout(t.timer);
    t.inflight = true;
    try {
      t.job = await api.get(`/jobs/${encodeURIComponent(t.job.id)}`);
      t.pollError = null;
      t.delay = 1000;
    } catch (e) {
      t.pollError = e;
      t.delay = Math.min(t.delay * 2, 15000);
    } finally {
      t.inflight = false;
    }
    if (tracked !== t || !route.alive()) return;
    drawJob();
    if (ENDED.includes(t.job.state)) return;
    if (t.again) {
      t.again = false;
      poll(t);
    } else {
      t.timer = setTimeout(() => poll(t), t.delay);
    }
  }

  function follow(job, req) {
    if (tracked) clearTimeout(tracked.timer);
    const t = { job, req, live: null, completed: null, html: '', delay: 1000, timer: null };
    tracked = t;
    drawJob();
    if (!ENDED.includes(job.state)) t.timer = setTimeout(() => poll(t), t.delay);
  }

  async function onRestore(ev) {
    ev.preventDefault();
    const form = ev.target;
    const path = form.path.value.trim() || '/';
    const destination = form.destination.value.trim();
    const local = {};
    if (!path.startsWith('/')) local.path = 'An absolute path inside the point, starting with "/".';
    if (!destination) local.destination = 'Where to restore: an absolute directory on the host.';
    else if (!destination.startsWith('/')) local.destination = `An absolute path, starting with "/": ${JSON.stringify(destination)} is relative.`;
    if (Object.keys(local).length) return showRestoreErrors(form, local, '');
    showRestoreErrors(form, {}, '');
    const body = { path, destination };
    const chosen = form.querySelector('input[name=host]:checked');
    if (chosen) body.host = chosen.value;
    const agent = host.agent && (!chosen || chosen.value === 'agent') ? host.agent : null;
    const where = agent ? `the agent ${agent}` : host.known || chosen ? 'the server' : 'the host the server picks';
    const btn = form.querySelector('#restore-submit');
    btn.disabled = true;
    try {
      const job = await api.post(`/points/${enc}/restore`, body);
      if (!route.alive()) return;
      follow(job, { path, destination, where, agent });
    } catch (e) {
      showRestoreErrors(form, e instanceof api.ApiError ? e.fields : {}, errText(e));
    } finally {
      btn.disabled = false;
    }
  }

  async function onRestoreClick(ev) {
    const b = ev.target.closest('button[data-restore-cancel]');
    if (!b || !ctx.canOperate) return;
    b.disabled = true;
    try {
      await api.post(`/jobs/${encodeURIComponent(b.dataset.restoreCancel)}/cancel`);
      flash(`Restore job ${b.dataset.restoreCancel} cancelled.`);
    } catch (e) {
      flash('Could not cancel: ' + errText(e), 'error');
      b.disabled = false;
    }
    if (tracked && tracked.job.id === b.dataset.restoreCancel) poll(tracked);
  }

  async function drawRestore(known) {
    if (!ctx.canReadContent) {
      restoreBox.innerHTML = `<p class="muted" data-restore="forbidden">Restoring reads the content of backed-up files, so it needs an admin or restore token${ctx.principal ? ` (this one is ${esc(ctx.principal.role)})` : ''}.</p>`;
      return;
    }
    host = await known;
    if (!route.alive()) return;
    restoreBox.innerHTML = restoreFormHtml(host);
    restoreBox.querySelector('#restore-form').addEventListener('submit', onRestore);
    restoreBox.addEventListener('click', onRestoreClick);
    ctx.on('progress', (p) => {
      if (!tracked || !p || p.job !== tracked.job.id) return;
      tracked.live = p;
      drawJob();
    });
    ctx.on('restore.completed', (ev) => {
      const d = (ev && ev.data) || {};
      if (!tracked || d.job !== tracked.job.id) return;
      tracked.completed = d;
      drawJob();
    });
    ctx.on('job.', (ev) => {
      const d = (ev && ev.data) || {};
      if (tracked && d.job === tracked.job.id) poll(tracked);
    });
  }
  // Asked now, awaited after the point and its files are drawn.
  const knownHost = ctx.canReadContent ? restoreHost(point) : null;

  drawDetail();
  await browse(cwd);
  if (!route.alive()) return;
  await drawRestore(knownHost);
  if (!route.alive()) return;
  const again = throttle(refresh, 1000);
  ctx.on('*', (ev) => {
    const d = (ev && ev.data) || {};
    if (d.point === id || d.snapshot === id) again();
  });
  return () => {
    if (tracked) clearTimeout(tracked.timer);
    tracked = null;
  };
}

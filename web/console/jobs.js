// Jobs: the running ones with live progress from the event stream, and the
// history with errors in full.

import * as api from './api.js';
import { esc, errText, flash, fmtBytes, jobBadge, progressText, shortId, throttle, timeEl } from './util.js';

const KINDS = ['backup', 'verify', 'restore-test', 'retention', 'prune', 'read-back', 'reconcile', 'restore', 'copy'];

function progressCell(j, live) {
  const p = live || null;
  const done = p ? p.bytes : j.progress && j.progress.bytes_done;
  const total = p ? p.bytes_total : j.progress && j.progress.bytes_total;
  const value = total ? ` value="${Math.min(1, (done || 0) / total)}"` : '';
  const text = p ? progressText(p) : done !== undefined && done !== null ? fmtBytes(done) + (total ? ' of ' + fmtBytes(total) : '') : 'waiting for progress…';
  return `<progress max="1"${value} aria-label="progress of ${esc(j.id)}"></progress> <span class="prog">${esc(text)}</span>`;
}

function errorHtml(e) {
  if (!e) return '';
  return `<div class="job-error"><strong>${esc(e.kind)}</strong>${e.retryable ? ' <small>(will be retried)</small>' : ''}<pre>${esc(e.message)}</pre></div>`;
}

export async function render(main, route, ctx) {
  const plan = route.query.get('plan') || '';
  const kind = route.query.get('kind') || '';
  const focus = route.query.get('job') || '';
  const lastProgress = new Map();

  main.innerHTML = `
<h1>Jobs</h1>
<form id="jobs-filter" class="filters" role="search">
  <div class="field inline-field"><label for="jf-plan">Plan</label><input id="jf-plan" name="plan" value="${esc(plan)}" placeholder="all plans"></div>
  <div class="field inline-field"><label for="jf-kind">Kind</label><select id="jf-kind" name="kind"><option value="">all kinds</option>${KINDS.map((k) => `<option ${k === kind ? 'selected' : ''}>${k}</option>`).join('')}</select></div>
  <button type="submit">Filter</button>
</form>
<section aria-labelledby="h-run"><h2 id="h-run">Running <span class="count" id="run-count"></span></h2><div id="jobs-running"></div></section>
<section aria-labelledby="h-hist"><h2 id="h-hist">History</h2><div id="jobs-history"></div></section>`;
  const form = main.querySelector('#jobs-filter');
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = '#/jobs' + api.qs({ plan: form.plan.value.trim(), kind: form.kind.value });
  });

  // Only the newest load's answer is shown (an older one finishing later
  // would show the jobs from before the event).
  let generation = 0;
  async function load() {
    const mine = ++generation;
    const [running, scheduled, history] = await Promise.all([
      api.get('/jobs' + api.qs({ state: 'running', plan, kind })),
      api.get('/jobs' + api.qs({ state: 'scheduled', plan, kind, limit: 50 })),
      api.get('/jobs' + api.qs({ plan, kind, limit: 200 })),
    ]);
    if (!route.alive() || mine !== generation) return;
    const active = running.concat(scheduled);
    main.querySelector('#run-count').textContent = String(running.length);
    main.querySelector('#jobs-running').innerHTML = active.length
      ? `<div class="table-wrap"><table class="jobs-running"><thead><tr><th scope="col">Job</th><th scope="col">Kind</th><th scope="col">Plan</th><th scope="col">State</th><th scope="col">Progress</th><th scope="col"><span class="sr">Actions</span></th></tr></thead><tbody>${active
          .map(
            (j) => `<tr data-job="${esc(j.id)}" data-state="${esc(j.state)}"><th scope="row"><code title="${esc(j.id)}">${esc(j.id)}</code></th><td>${esc(j.kind)}</td><td>${esc(j.plan || '—')}</td><td>${jobBadge(j.state)}</td>
<td class="progress-cell">${j.state === 'running' ? progressCell(j, lastProgress.get(j.id)) : `due ${timeEl(j.scheduled_at)}`}</td>
<td>${ctx.canOperate ? `<button type="button" class="small danger" data-cancel="${esc(j.id)}">Cancel</button>` : ''}</td></tr>`,
          )
          .join('')}</tbody></table></div>`
      : '<p class="muted">Nothing running or waiting.</p>';
    const done = history.filter((j) => j.state !== 'running' && j.state !== 'scheduled');
    main.querySelector('#jobs-history').innerHTML = done.length
      ? `<div class="table-wrap"><table class="jobs-history"><thead><tr><th scope="col">Job</th><th scope="col">Kind</th><th scope="col">Plan</th><th scope="col">Point</th><th scope="col">Outcome</th><th scope="col">Attempt</th><th scope="col">Ended</th><th scope="col">Error</th></tr></thead><tbody>${done
          .map(
            (j) => `<tr data-job="${esc(j.id)}" data-state="${esc(j.state)}" class="${j.id === focus ? 'focus' : ''}"><th scope="row"><code title="${esc(j.id)}">${esc(j.id)}</code></th><td>${esc(j.kind)}</td><td>${esc(j.plan || '—')}</td>
<td>${j.point ? `<a href="#/points/${esc(j.point)}"><code>${esc(shortId(j.point))}</code></a>` : '—'}</td><td>${jobBadge(j.state)}</td><td class="num">${esc(j.attempt)}</td>
<td>${timeEl(j.updated_at)}</td><td>${errorHtml(j.error)}</td></tr>`,
          )
          .join('')}</tbody></table></div>`
      : '<p class="muted">No finished jobs yet.</p>';
    const f = focus && main.querySelector(`tr[data-job="${CSS.escape(focus)}"]`);
    if (f && !load.scrolled) {
      load.scrolled = true;
      f.scrollIntoView({ block: 'center' });
    }
  }

  // Subscribed before the first load, so that a job event landing while
  // it runs is not missed.
  const reload = throttle(() => load().catch(() => {}), 1500);
  ctx.on('job.', reload);
  ctx.on('backup.', reload);
  await load();
  ctx.on('progress', (p) => {
    lastProgress.set(p.job, p);
    const row = main.querySelector(`#jobs-running tr[data-job="${CSS.escape(p.job)}"]`);
    if (!row || row.dataset.state !== 'running') return reload();
    const bar = row.querySelector('progress');
    if (p.bytes_total) bar.value = Math.min(1, p.bytes / p.bytes_total);
    else bar.removeAttribute('value');
    row.querySelector('.prog').textContent = progressText(p);
  });

  async function onClick(ev) {
    const b = ev.target.closest('button[data-cancel]');
    if (!b) return;
    if (!confirm(`Cancel job ${b.dataset.cancel}?`)) return;
    b.disabled = true;
    try {
      await api.post(`/jobs/${encodeURIComponent(b.dataset.cancel)}/cancel`);
      flash(`Job ${b.dataset.cancel} cancelled.`);
      reload();
    } catch (e) {
      flash('Could not cancel: ' + errText(e), 'error');
      b.disabled = false;
    }
  }
  main.addEventListener('click', onClick);
  return () => main.removeEventListener('click', onClick);
}

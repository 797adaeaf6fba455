// Protection reports: pick a period (day, ISO week, month) and a plan or the
// whole installation; the report is shown from its JSON and can be
// downloaded as HTML, CSV, JSON or PDF (GET /api/v1/reports).

import * as api from './api.js';
import { esc, errText, fmtBytes, flash, protectionBadge } from './util.js';

/** Seconds for humans: `2h 5m`, `40s`. */
function span(s) {
  const d = Math.floor(s / 86400);
  const h = Math.floor(s / 3600) % 24;
  const m = Math.floor(s / 60) % 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

/** Yesterday (UTC), the default day: the newest that has surely ended. */
function yesterday() {
  const d = new Date(Date.now() - 86400000);
  return d.toISOString().slice(0, 10);
}

function summary(r) {
  const t = r.totals;
  const rows = [
    ['Plans that met their RPO all period', `${t.plans_rpo_met} of ${t.plans}`],
    ['Points made', `${t.points_made} (${t.points_made_recoverable} recoverable at the end)`],
    ['Failures', `${t.failures} (${t.backups_failed} backups, ${t.verifications_failed} verifications, ${t.restore_tests_failed} restore tests)`],
    ['Restore tests passed', String(t.restore_tests_passed)],
    ['Anomalies (ransomware heuristic)', String(t.anomalies)],
    ['Stored by backups', `${fmtBytes(t.stored_bytes_at_end)} (+${fmtBytes(t.stored_bytes_at_end - t.stored_bytes_at_start)})`],
  ];
  return `<table class="kv" id="report-totals">${rows.map(([k, v]) => `<tr><th scope="row">${esc(k)}</th><td>${esc(v)}</td></tr>`).join('')}</table>`;
}

function plans(r) {
  if (!r.plans.length) return '<p class="muted">No plan existed in this period.</p>';
  return `<div class="table-wrap"><table id="report-plans"><thead><tr><th scope="col">Plan</th><th scope="col">Protection at the end</th><th scope="col">RPO missed</th><th scope="col">Points made</th><th scope="col">Recoverable</th><th scope="col">Backups failed</th><th scope="col">Restore tests</th><th scope="col">Anomalies</th></tr></thead><tbody>${r.plans
    .map(
      (p) => `<tr data-plan="${esc(p.plan)}"><th scope="row"><a href="#/plans/${encodeURIComponent(p.plan)}">${esc(p.plan)}</a></th><td>${p.protection_at_end === 'removed' ? '<span class="muted">removed</span>' : protectionBadge(p.protection_at_end)}</td><td class="${p.rpo_met ? '' : 'over'}">${p.rpo_met ? 'never' : esc(span(p.rpo_missed_seconds))}</td><td>${esc(p.points_made)}</td><td>${esc(p.points_made_recoverable)}</td><td>${esc(p.backups_failed)}</td><td>${esc(p.restore_tests_passed)} passed, ${esc(p.restore_tests_failed)} failed</td><td>${esc(p.anomalies)}</td></tr>`,
    )
    .join('')}</tbody></table></div>`;
}

function failures(r) {
  if (!r.failures.length) return '<p class="muted">No failures.</p>';
  return `<ul id="report-failures">${r.failures
    .map((f) => `<li><strong>${esc(f.what)}</strong>${f.plan ? ` of ${esc(f.plan)}` : ''} at ${esc(f.at)}: ${esc(f.reason)}</li>`)
    .join('')}</ul>`;
}

export async function render(main, route) {
  const q = route.query;
  const period = ['daily', 'weekly', 'monthly'].includes(q.get('period')) ? q.get('period') : 'daily';
  const at = q.get('at') || yesterday();
  const plan = q.get('plan') || '';
  const all = await api.get('/plans');
  if (!route.alive()) return;
  main.innerHTML = `<h1>Reports</h1>
<p class="help">What a period did, folded from the event log up to its end: the same period always gives the same report. A period is given once it has ended.</p>
<form id="report-form" class="inline-form">
<label>Period <select id="r-period">${['daily', 'weekly', 'monthly'].map((p) => `<option value="${p}"${p === period ? ' selected' : ''}>${p}</option>`).join('')}</select></label>
<label>Day in it <input id="r-at" type="date" value="${esc(at)}" required></label>
<label>Plan <select id="r-plan"><option value="">the whole installation</option>${all.map((p) => `<option value="${esc(p.id)}"${p.id === plan ? ' selected' : ''}>${esc(p.id)}</option>`).join('')}</select></label>
<button type="submit" id="r-show">Show</button>
</form>
<div id="report"></div>`;
  main.querySelector('#report-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = (id) => main.querySelector(id).value;
    location.hash = '#/reports' + api.qs({ period: v('#r-period'), at: v('#r-at'), plan: v('#r-plan') });
  });
  const params = { period, at, plan };
  const out = main.querySelector('#report');
  let r;
  try {
    r = await api.get('/reports' + api.qs(params));
  } catch (e) {
    if (route.alive()) out.innerHTML = `<p class="error" role="alert">${esc(errText(e))}</p>`;
    return;
  }
  if (!route.alive()) return;
  out.innerHTML = `<h2 id="report-title">${esc(r.period.kind)} ${esc(r.period.label)} · ${esc(r.scope.plan || 'installation')}</h2>
<p class="muted">${esc(r.period.start)} to ${esc(r.period.end)} (UTC), from the log up to seq ${esc(r.log.last_seq)}.</p>
<p>${['html', 'pdf', 'csv', 'json'].map((f) => `<button type="button" class="small secondary" data-format="${f}">Download ${f.toUpperCase()}</button>`).join(' ')}</p>
<h3>Summary</h3>${summary(r)}<h3>Plans</h3>${plans(r)}<h3>Failures</h3>${failures(r)}`;
  out.addEventListener('click', async (ev) => {
    const b = ev.target.closest('button[data-format]');
    if (!b) return;
    b.disabled = true;
    try {
      const blob = await api.reportBlob({ ...params, format: b.dataset.format });
      const url = URL.createObjectURL(blob);
      const a = document.createElement('a');
      a.href = url;
      a.download = `vouch-report-${r.period.kind}-${r.period.label}-${r.scope.plan || 'installation'}.${b.dataset.format}`;
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      flash(`Downloaded the ${b.dataset.format.toUpperCase()} report (${fmtBytes(blob.size)}).`);
    } catch (e) {
      flash('Download failed: ' + errText(e), 'error');
    } finally {
      b.disabled = false;
    }
  });
}

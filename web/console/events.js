// The event log: filter by type, plan and time; follow the live tail.

import * as api from './api.js';
import { esc, fmtTime, shortId } from './util.js';

const TYPES = [
  'plan.', 'job.', 'backup.committed', 'point.', 'verification.', 'restore_test.', 'anomaly.detected',
  'alert.', 'agent.', 'service.', 'audit.',
];
const WINDOW = 500;

function summary(d) {
  if (!d || typeof d !== 'object') return '';
  const bits = [];
  if (d.plan) bits.push(`plan <a href="#/plans/${esc(encodeURIComponent(d.plan))}">${esc(d.plan)}</a>`);
  if (d.job) bits.push(`job <a href="#/jobs?job=${esc(encodeURIComponent(d.job))}">${esc(d.job)}</a>`);
  const pt = d.point || d.snapshot;
  if (pt && typeof pt === 'string') bits.push(`point <a href="#/points/${esc(pt)}"><code>${esc(shortId(pt))}</code></a>`);
  // The audit trail: who (and in which role) did what to what.
  if (d.principal) bits.push(`by <strong>${esc(d.principal)}</strong> (${esc(d.role || '?')})`);
  for (const k of ['action', 'target', 'path']) {
    if (d[k] && typeof d[k] !== 'object') bits.push(esc(d[k]));
  }
  for (const k of ['kind', 'error_kind', 'subject', 'message', 'reason', 'rule']) {
    if (d[k] && typeof d[k] !== 'object') bits.push(esc(d[k]));
  }
  return bits.join(' · ');
}

/** Does `ev` pass the filters? The server filters a page by plan itself
 * (including events that name only a job or point of the plan), so `plan`
 * is checked here only for live events, against the plan's known jobs and
 * points (`f.things`). */
function matches(ev, f, live) {
  if (f.type && !(f.type.endsWith('.') ? ev.type.startsWith(f.type) : ev.type === f.type)) return false;
  if (live && f.plan) {
    const d = ev.data || {};
    if (d.plan === f.plan) {
      if (d.job) f.things.add(d.job);
      if (d.snapshot || d.point) f.things.add(d.snapshot || d.point);
    } else if (!(f.things.has(d.job) || f.things.has(d.point) || f.things.has(d.snapshot))) {
      return false;
    }
  }
  if (f.since && new Date(ev.recorded_at) < f.since) return false;
  if (f.until && new Date(ev.recorded_at) > f.until) return false;
  return true;
}

function row(ev) {
  return `<tr data-seq="${esc(ev.seq)}" data-type="${esc(ev.type)}"><td class="num">${esc(ev.seq)}</td><td>${esc(fmtTime(ev.recorded_at))}</td><th scope="row"><code>${esc(ev.type)}</code></th><td>${summary(ev.data)}</td>
<td><details><summary>data</summary><pre>${esc(JSON.stringify(ev.data, null, 2))}</pre></details></td></tr>`;
}

/** "2026-12-03T10:00" (datetime-local, read as UTC) -> Date, or null. */
function utc(v) {
  if (!v) return null;
  const d = new Date(v + 'Z');
  return isNaN(d) ? null : d;
}

export async function render(main, route, ctx) {
  const q = route.query;
  const f = {
    type: q.get('type') || '',
    plan: q.get('plan') || '',
    since: utc(q.get('since')),
    until: utc(q.get('until')),
  };
  const follow = q.get('follow') !== '0';
  const r = await api.ready();
  const head = r && typeof r.seq === 'number' ? r.seq : null;
  let from = q.get('from_seq') !== null ? Number(q.get('from_seq')) : head !== null ? Math.max(0, head - WINDOW + 1) : 0;
  const serverType = f.type && !f.type.endsWith('.') ? f.type : '';
  const page = await api.get('/events' + api.qs({ from_seq: from, limit: WINDOW, type: serverType, plan: f.plan }));
  if (!route.alive()) return;
  const events = (page.events || []).filter((e) => matches(e, f, false)).reverse();
  f.things = new Set();
  for (const e of events) {
    const d = e.data || {};
    for (const k of ['job', 'point', 'snapshot']) if (typeof d[k] === 'string') f.things.add(d[k]);
  }
  main.innerHTML = `
<h1>Events</h1>
<form id="events-filter" class="filters" role="search">
  <div class="field inline-field"><label for="ef-type">Type</label><input id="ef-type" name="type" list="ef-types" value="${esc(f.type)}" placeholder="all types" size="18"><datalist id="ef-types">${TYPES.map((t) => `<option value="${t}">`).join('')}</datalist></div>
  <div class="field inline-field"><label for="ef-plan">Plan</label><input id="ef-plan" name="plan" value="${esc(f.plan)}" placeholder="all plans" size="12"></div>
  <div class="field inline-field"><label for="ef-since">From (UTC)</label><input id="ef-since" name="since" type="datetime-local" value="${esc(q.get('since') || '')}"></div>
  <div class="field inline-field"><label for="ef-until">To (UTC)</label><input id="ef-until" name="until" type="datetime-local" value="${esc(q.get('until') || '')}"></div>
  <div class="field check inline-field"><input id="ef-follow" name="follow" type="checkbox" ${follow ? 'checked' : ''}><label for="ef-follow">Follow the live tail</label></div>
  <button type="submit">Apply</button>
</form>
<p class="help">A type ending in "." matches every type starting with it (e.g. "restore_test."); <a id="ef-audit" href="#/events?type=audit.">the audit trail</a> shows who did what through the API and who downloaded which file. Showing sequence numbers ${esc(from)}–${esc(page.next_seq !== undefined ? page.next_seq - 1 : '…')}, newest first${from > 0 ? ` · <a href="#/events${api.qs({ type: f.type, plan: f.plan, since: q.get('since'), until: q.get('until'), follow: '0', from_seq: Math.max(0, from - WINDOW) })}">earlier events</a>` : ''}.</p>
<div class="table-wrap"><table class="events"><thead><tr><th scope="col" class="num">Seq</th><th scope="col">Recorded</th><th scope="col">Type</th><th scope="col">About</th><th scope="col">Data</th></tr></thead>
<tbody id="events-body">${events.map(row).join('')}</tbody></table></div>
<p id="events-empty" class="muted" ${events.length ? 'hidden' : ''}>No events match${follow ? ' yet; new ones appear here as they are recorded' : ''}.</p>`;
  const form = main.querySelector('#events-filter');
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = '#/events' + api.qs({
      type: form.type.value.trim(), plan: form.plan.value.trim(), since: form.since.value, until: form.until.value,
      follow: form.follow.checked ? '' : '0',
    });
  });
  if (!follow) return;
  const body = main.querySelector('#events-body');
  let last = events.length ? events[0].seq : from - 1;
  ctx.on('*', (ev) => {
    if (!ev || typeof ev.seq !== 'number' || ev.seq <= last) return;
    last = ev.seq;
    if (!matches(ev, f, true)) return;
    body.insertAdjacentHTML('afterbegin', row(ev));
    main.querySelector('#events-empty').hidden = true;
    while (body.rows.length > 2000) body.deleteRow(-1);
  });
}

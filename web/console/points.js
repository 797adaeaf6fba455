// Recovery points, filtered by plan and state.

import * as api from './api.js';
import { POINT_STATES, esc, fmtBytes, fmtCount, shortId, stateBadge, throttle, timeEl } from './util.js';

export async function render(main, route, ctx) {
  const plan = route.query.get('plan') || '';
  const state = route.query.get('state') || '';
  const limit = Number(route.query.get('limit')) || 500;
  const [points, plans] = await Promise.all([
    api.get('/points' + api.qs({ plan, state, limit })),
    api.get('/plans').catch(() => []),
  ]);
  if (!route.alive()) return;
  const planOpts = plans
    .map((p) => `<option value="${esc(p.id)}" ${p.id === plan ? 'selected' : ''}>${esc(p.id)}</option>`)
    .join('');
  const stateOpts = POINT_STATES.map((s) => `<option value="${s}" ${s === state ? 'selected' : ''}>${s}</option>`).join('');
  let rows = '';
  for (const p of points) {
    const s = p.summary;
    const anomalies = (p.anomalies || []).length;
    rows += `<tr data-point="${esc(p.id)}" data-state="${esc(p.state)}">
<th scope="row"><a href="#/points/${esc(p.id)}"><code>${esc(shortId(p.id))}</code></a></th>
<td>${p.plan ? `<a href="#/plans/${esc(encodeURIComponent(p.plan))}">${esc(p.plan)}</a>` : '<span class="muted">—</span>'}</td>
<td>${stateBadge(p.state)}</td>
<td>${timeEl(p.snapshot_at)}</td>
<td class="num">${s ? fmtCount(s.files) : '—'}</td>
<td class="num">${s && s.size_bytes != null ? fmtBytes(s.size_bytes) : '<span class="muted" title="not recorded for points made before Vouch recorded sizes">unknown</span>'}</td>
<td class="num">${s ? fmtBytes(s.added_bytes) : '—'}</td>
<td>${p.locked_until ? `<span class="badge locked" title="locked until ${esc(p.locked_until)}">locked</span>` : ''}</td>
<td>${anomalies ? `<span class="badge anomaly">${anomalies} anomal${anomalies > 1 ? 'ies' : 'y'}</span>` : ''}</td>
</tr>`;
  }
  main.innerHTML = `
<h1>Recovery points <span class="count">${points.length}</span></h1>
<form id="points-filter" class="filters" role="search">
  <div class="field inline-field"><label for="pf-plan">Plan</label><select id="pf-plan" name="plan"><option value="">all plans</option>${planOpts}</select></div>
  <div class="field inline-field"><label for="pf-state">State</label><select id="pf-state" name="state"><option value="">all states</option>${stateOpts}</select></div>
  <button type="submit">Filter</button>
</form>
<p class="help">A point is <strong>recoverable</strong> only after a real restore test passed; <strong>verified</strong> means its data was read back; <strong>unverified</strong> and <strong>unknown</strong> prove nothing yet.</p>
${points.length ? `<div class="table-wrap"><table class="points"><thead><tr><th scope="col">Point</th><th scope="col">Plan</th><th scope="col">State</th><th scope="col">Taken</th><th scope="col" class="num">Files</th><th scope="col" class="num">Size</th><th scope="col" class="num">Added</th><th scope="col">Lock</th><th scope="col">Anomalies</th></tr></thead><tbody>${rows}</tbody></table></div>${points.length >= limit ? `<p><a href="#/points${api.qs({ plan, state, limit: limit * 2 })}">Show more</a></p>` : ''}` : '<p class="empty">No recovery points match.</p>'}`;
  const form = main.querySelector('#points-filter');
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    location.hash = '#/points' + api.qs({ plan: form.plan.value, state: form.state.value });
  };
  form.addEventListener('submit', apply);
  form.plan.addEventListener('change', apply);
  form.state.addEventListener('change', apply);
  // A new or changed point re-renders the list (at most every 2 s).
  const again = throttle(() => ctx.navigate(location.hash), 2000);
  ctx.on('*', (ev) => {
    if (ev && ev.data && (ev.data.point || ev.data.snapshot || ev.data.snapshot_id)) again();
  });
}

// Overview: in one glance what is protected, what is not, and why.

import * as api from './api.js';
import {
  esc, flash, errText, jobBadge, parseDuration, protectionBadge,
  severityBadge, throttle, timeEl, progressText,
} from './util.js';

/** Rows drawn before the first paint; the rest are appended right after. */
const FIRST = 100;

const ORDER = { unprotected: 0, 'at-risk': 1, unknown: 2, protected: 3 };
const STATUSES = ['protected', 'at-risk', 'unprotected', 'unknown'];
const LABEL = { protected: 'Protected', 'at-risk': 'At risk', unprotected: 'Unprotected', unknown: 'Unknown' };

function statusOf(plan) {
  const s = plan.protection && plan.protection.status;
  return ORDER[s] === undefined ? 'unknown' : s;
}

/** "3 h ago, RPO 1day" with a warning class when older than the RPO. */
function ageCell(plan, now) {
  if (!plan.last_recoverable_at) {
    return `<span class="muted">no recoverable point</span><br><small>RPO ${esc(plan.rpo || '—')}</small>`;
  }
  const age = new Date(now).getTime() - new Date(plan.last_recoverable_at).getTime();
  const rpo = parseDuration(plan.rpo);
  const over = rpo !== null && age > rpo;
  return `<span class="${over ? 'over' : ''}">${timeEl(plan.last_recoverable_at, now)}</span><br><small>RPO ${esc(plan.rpo || '—')}${over ? ' — exceeded' : ''}</small>`;
}

export function planRows(plans, now, canOperate) {
  let out = '';
  for (const p of plans) {
    const s = statusOf(p);
    const id = esc(p.id);
    const enc = esc(encodeURIComponent(p.id));
    const last = p.last_run
      ? `${jobBadge(p.last_run.state)} ${timeEl(p.last_run.at, now)}`
      : '<span class="muted">never</span>';
    const next = p.paused ? '<span class="badge paused">paused</span>' : timeEl(p.next_run_at, now);
    out += `<tr data-plan="${id}" data-status="${s}">
<th scope="row"><a href="#/plans/${enc}">${id}</a><br><small class="muted path">${esc(p.source)}</small></th>
<td>${protectionBadge(s)}</td>
<td class="reason">${esc((p.protection && p.protection.reason) || (s === 'unknown' ? 'not known yet' : ''))}</td>
<td>${ageCell(p, now)}</td>
<td>${last}</td>
<td>${next}</td>
<td class="actions"><a href="#/points?plan=${enc}">Points</a>${canOperate ? ` <button type="button" class="small" data-run="${id}">Run now</button>` : ''}</td>
</tr>`;
  }
  return out;
}


export async function render(main, route, ctx) {
  main.innerHTML = '<h1>Overview</h1><p class="muted">Loading…</p>';
  let data;
  let filter = '';
  let drawn = 0;

  function draw() {
    const focused = document.activeElement && document.activeElement.id === 'plan-filter';
    const pos = focused ? document.activeElement.selectionStart : 0;
    const now = data.now || new Date().toISOString();
    const plans = data.plans.slice().sort((a, b) => ORDER[statusOf(a)] - ORDER[statusOf(b)] || (a.id < b.id ? -1 : 1));
    const counts = { protected: 0, 'at-risk': 0, unprotected: 0, unknown: 0 };
    for (const p of plans) counts[statusOf(p)]++;
    const prot = data.protection || counts;
    const overall = ORDER[data.overall] === undefined ? 'unknown' : data.overall;
    const tiles = STATUSES.map(
      (s) => `<li class="tile t-${s}"><a href="#/overview?status=${s}"><span class="n" data-count="${s}">${prot[s] ?? 0}</span> <span class="l">${LABEL[s]}</span></a></li>`,
    ).join('');
    const only = route.query.get('status');
    const shown = plans.filter(
      (p) => (!only || statusOf(p) === only) && (!filter || p.id.includes(filter) || (p.source || '').includes(filter)),
    );
    const alerts = data.open_alerts || [];
    const jobs = data.running_jobs || [];
    main.innerHTML = `
<div class="title-row">
  <h1>Overview</h1>
  <p class="overall">Overall: ${protectionBadge(overall)} <small class="muted">as weak as the weakest plan</small></p>
</div>
<ul class="tiles" aria-label="Plans by protection state">${tiles}</ul>
<div class="columns">
<section aria-labelledby="h-alerts" class="panel">
  <h2 id="h-alerts">Open alerts <span class="count">${alerts.length}</span></h2>
  ${alerts.length ? `<ul class="alerts">${alerts.slice(0, 8).map((a) => `<li>${severityBadge(a.severity)} <strong>${esc(a.subject)}</strong> ${timeEl(a.raised_at, now)}<br><span class="muted">${esc(a.message)}</span></li>`).join('')}</ul>${alerts.length > 8 ? `<p><a href="#/alerts">All ${alerts.length} open alerts</a></p>` : ''}` : '<p class="muted">No open alerts.</p>'}
</section>
<section aria-labelledby="h-running" class="panel">
  <h2 id="h-running">Running jobs <span class="count">${jobs.length}</span></h2>
  ${jobs.length ? `<ul class="running">${jobs.map((j) => `<li data-job="${esc(j.id)}"><strong>${esc(j.kind)}</strong> ${esc(j.plan || '')} ${jobBadge(j.state)}<br><progress max="1" ${j.progress && j.progress.bytes_total ? `value="${j.progress.bytes_done / j.progress.bytes_total}"` : ''}></progress> <small class="prog"></small></li>`).join('')}</ul><p><a href="#/jobs">Jobs</a></p>` : '<p class="muted">Nothing running.</p>'}
</section>
</div>
<section aria-labelledby="h-plans">
  <div class="title-row">
    <h2 id="h-plans">Plans <span class="count">${shown.length}${shown.length !== plans.length ? ' of ' + plans.length : ''}</span></h2>
    <div class="tools">
      ${only ? `<a href="#/overview" class="chip">${esc(LABEL[only] || only)} only ✕</a>` : ''}
      <label for="plan-filter" class="inline">Filter</label>
      <input id="plan-filter" type="search" value="${esc(filter)}" placeholder="plan or path">
      ${ctx.canOperate ? '<a class="button" href="#/plans/new">New plan</a>' : ''}
    </div>
  </div>
  ${plans.length ? `<div class="table-wrap"><table class="plans">
  <thead><tr><th scope="col">Plan</th><th scope="col">Protection</th><th scope="col">Why</th><th scope="col">Last recoverable point</th><th scope="col">Last run</th><th scope="col">Next run</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
  <tbody id="plan-rows">${planRows(shown.slice(0, FIRST), now, ctx.canOperate)}</tbody></table></div>`
    : `<div class="empty"><p>No plans yet. A plan says what to back up, when, and how long to keep it.</p>${ctx.canOperate ? '<p><a class="button" href="#/plans/new">Create the first plan</a></p>' : ''}</div>`}
</section>`;
    // The first screenful paints at once; the rest follows in one more
    // insertion on the next task (one extra layout, not one per row).
    if (shown.length > FIRST) {
      const gen = ++drawn;
      // rAF then a task: after the first frame has been painted.
      requestAnimationFrame(() =>
        setTimeout(() => {
          const body = main.querySelector('#plan-rows');
          if (gen === drawn && body) body.insertAdjacentHTML('beforeend', planRows(shown.slice(FIRST), now, ctx.canOperate));
        }, 0),
      );
    }
    const f = main.querySelector('#plan-filter');
    if (focused) {
      f.focus();
      f.setSelectionRange(pos, pos);
    }
    f.addEventListener('input', () => {
      filter = f.value.trim();
      draw();
    });
  }

  async function load() {
    try {
      data = await api.get('/overview');
    } catch (e) {
      if (!data) throw e;
      return;
    }
    if (route.alive()) draw();
  }

  await load();
  const reload = throttle(load, 2000);
  ctx.on('*', reload);
  ctx.on('progress', (p) => {
    const li = main.querySelector(`li[data-job="${CSS.escape(p.job)}"]`);
    if (!li) return reload();
    const bar = li.querySelector('progress');
    if (p.bytes_total) bar.value = Math.min(1, p.bytes / p.bytes_total);
    li.querySelector('.prog').textContent = progressText(p);
  });

  main.addEventListener('click', onClick);
  async function onClick(ev) {
    const b = ev.target.closest('button[data-run]');
    if (!b) return;
    b.disabled = true;
    try {
      const job = await api.post(`/plans/${encodeURIComponent(b.dataset.run)}/run`);
      flash(`Started ${job.kind} job ${job.id} for plan ${b.dataset.run}.`);
      reload();
    } catch (e) {
      flash(`Could not run ${b.dataset.run}: ${errText(e)}`, 'error');
    } finally {
      b.disabled = false;
    }
  }
  return () => main.removeEventListener('click', onClick);
}

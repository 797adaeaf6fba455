// Agents: the hosts that pull their jobs from this server. Per agent its
// host, OS, version, when it last called in, whether it is lost, working or
// idle, the jobs it holds a lease on and how many wait for it.

import * as api from './api.js';
import { agentBadge, esc, fmtSpan, fmtTime, showError, throttle, timeEl } from './util.js';

/** Lease times and "last seen" age without any event: redraw this often. */
const REFRESH_MS = 15000;

/** The names of the agents with an open `agent NAME: lost` alert. */
function lostAgents(alerts) {
  const lost = new Set();
  for (const a of alerts || []) {
    const m = /^agent (.+): lost$/.exec(a.subject || '');
    if (m) lost.add(m[1]);
  }
  return lost;
}

function statusOf(a, lost) {
  if (lost.has(a.name)) return 'lost';
  if ((a.leases || []).length) return 'working';
  return a.last_seen ? 'idle' : 'never-seen';
}

function leasesCell(leases, now) {
  if (!leases || !leases.length) return '<span class="muted">none</span>';
  return `<ul class="leases">${leases
    .map((l) => {
      const expires = new Date(now + Number(l.remaining_seconds) * 1000).toISOString();
      return `<li data-job="${esc(l.job)}"><a href="#/jobs?job=${esc(encodeURIComponent(l.job))}"><code>${esc(l.job)}</code></a>
plan <a href="#/plans/${esc(encodeURIComponent(l.plan))}">${esc(l.plan)}</a>
<br><small class="muted">lease <span title="expires ${esc(fmtTime(expires))} unless renewed">${esc(fmtSpan(Number(l.remaining_seconds) * 1000))} left</span></small></li>`;
    })
    .join('')}</ul>`;
}

function rows(agents, lost, now) {
  let out = '';
  for (const a of agents) {
    const s = statusOf(a, lost);
    out += `<tr data-agent="${esc(a.name)}" data-status="${s}">
<th scope="row">${esc(a.name)}</th>
<td class="host">${esc(a.hostname || '—')}</td>
<td class="os">${esc(a.os || '—')}</td>
<td class="version">${esc(a.version || '—')}</td>
<td class="seen">${a.last_seen ? timeEl(a.last_seen) : '<span class="muted">never seen</span>'}</td>
<td class="status">${agentBadge(s)}</td>
<td class="jobs">${leasesCell(a.leases, now)}</td>
<td class="num queued">${esc(a.queued ?? 0)}</td>
</tr>`;
  }
  return out;
}

/** How to add an agent: the two commands of docs/agents.md, shortened. */
function emptyState() {
  return `<div class="empty" id="agents-empty">
<p>No agents yet. An agent protects another host: it pulls its jobs from this server (the host opens no port) and backs up into its own repository.</p>
<ol class="steps">
<li>On the server, make a one-time enrollment token:
<pre><code>vouch token --data-dir DATA_DIR create --role enroll --expires 1d</code></pre></li>
<li>On the host, register the agent with it (<code>--enroll-only</code> registers and exits; without it the agent stays and pulls its jobs):
<pre><code>VOUCH_ENROLL_TOKEN=vouch_… vouch agent --server ${esc(location.origin)} --data-dir /var/lib/vouch-agent --name web-1 --enroll-only</code></pre></li>
<li>Create a plan whose source is <code>agent:web-1:/path</code>.</li>
</ol>
<p class="help">Over HTTPS with the self-signed certificate of <code>vouch serve</code>, add <code>--fingerprint</code> with the fingerprint it printed. <code>docs/agents.md</code> has the details.</p>
</div>`;
}

export async function render(main, route, ctx) {
  main.innerHTML = '<h1>Agents</h1><p class="muted">Loading…</p>';
  let shown = false;

  async function load() {
    const [list, alerts] = await Promise.all([
      api.get('/agents'),
      // An agent token may not read alerts: then no agent shows as lost.
      api.get('/alerts?state=open').catch(() => null),
    ]);
    if (!route.alive()) return;
    const agents = list.agents || [];
    const lost = lostAgents(alerts);
    const now = Date.now();
    main.innerHTML = `
<h1>Agents <span class="count">${agents.length}</span></h1>
<p class="help">Status: <strong>lost</strong> when an open alert says it stopped calling in, <strong>working</strong> while it holds a lease on a job, <strong>idle</strong> otherwise. <a href="#/events?type=agent.">Agent events in the log</a>.</p>
${alerts === null ? '<p class="warning">Alerts could not be read with this token: a lost agent is not marked.</p>' : ''}
<div id="agents-error"></div>
${agents.length ? `<div class="table-wrap"><table class="agents"><thead><tr><th scope="col">Agent</th><th scope="col">Host</th><th scope="col">OS</th><th scope="col">Version</th><th scope="col">Last seen</th><th scope="col">Status</th><th scope="col">Running jobs</th><th scope="col" class="num">Queued jobs</th></tr></thead>
<tbody>${rows(agents, lost, now)}</tbody></table></div>` : emptyState()}`;
    shown = true;
  }

  await load();
  const reload = throttle(
    () =>
      load().catch((e) => {
        // Keep the last list and say why it is not fresh.
        const el = shown && route.alive() && main.querySelector('#agents-error');
        if (el) showError(el, e);
      }),
    1500,
  );
  ctx.on('agent.', reload);
  ctx.on('job.', reload);
  ctx.on('alert.', reload);
  const timer = setInterval(reload, REFRESH_MS);
  return () => clearInterval(timer);
}

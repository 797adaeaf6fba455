// Alerts: open and resolved, with their webhook deliveries.

import * as api from './api.js';
import { esc, fmtTime, severityBadge, throttle, timeEl } from './util.js';

function deliveries(d) {
  const entries = Object.entries(d || {});
  if (!entries.length) return '<span class="muted">no receivers</span>';
  return `<ul class="deliveries">${entries
    .map(
      ([r, x]) => `<li><strong>${esc(r)}</strong>: ${x.delivered_at ? `delivered ${esc(fmtTime(x.delivered_at))}` : '<span class="over">not delivered</span>'} after ${esc(x.attempts)} attempt${x.attempts === 1 ? '' : 's'}${x.last_error ? `<br><small class="muted">${esc(x.last_error)}</small>` : ''}</li>`,
    )
    .join('')}</ul>`;
}

function table(alerts, resolved) {
  if (!alerts.length) return `<p class="muted">${resolved ? 'No resolved alerts.' : 'No open alerts: nothing needs attention right now.'}</p>`;
  return `<div class="table-wrap"><table class="alerts-table"><thead><tr><th scope="col">Severity</th><th scope="col">Subject</th><th scope="col">Message</th><th scope="col">Raised</th>${resolved ? '<th scope="col">Resolved</th>' : ''}<th scope="col">Deliveries</th></tr></thead><tbody>${alerts
    .map(
      (a) => `<tr data-alert="${esc(a.id)}"><td>${severityBadge(a.severity)}</td><th scope="row">${esc(a.subject)}</th><td class="msg">${esc(a.message)}</td><td>${timeEl(a.raised_at)}</td>${resolved ? `<td>${timeEl(a.resolved_at)}</td>` : ''}<td>${deliveries(a.deliveries)}</td></tr>`,
    )
    .join('')}</tbody></table></div>`;
}

export async function render(main, route, ctx) {
  main.innerHTML = `<h1>Alerts</h1>
<section aria-labelledby="h-open"><h2 id="h-open">Open <span class="count" id="open-count"></span></h2><div id="alerts-open"></div></section>
<section aria-labelledby="h-resolved"><h2 id="h-resolved">Resolved</h2><div id="alerts-resolved"></div></section>
<p><a href="#/events?type=alert.">Alert events in the log</a></p>`;
  // Only the newest load's answer is shown: one started earlier that
  // finishes later would show the list from before the event.
  let generation = 0;
  async function load() {
    const mine = ++generation;
    const [open, resolved] = await Promise.all([api.get('/alerts?state=open'), api.get('/alerts?state=resolved')]);
    if (!route.alive() || mine !== generation) return;
    main.querySelector('#open-count').textContent = String(open.length);
    main.querySelector('#alerts-open').innerHTML = table(open, false);
    main.querySelector('#alerts-resolved').innerHTML = table(resolved, true);
  }
  // Subscribed before the first load: an alert raised while it runs is
  // not missed (it was, when the subscription came after it).
  ctx.on('alert.', throttle(() => load().catch(() => {}), 1000));
  await load();
}

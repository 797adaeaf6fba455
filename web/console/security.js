// Security center: every check with its status, why, and what to do; the
// worst first. Unknown is shown as unknown (grey, dashed), never as ok.
// Admins confirm a key export here with the check code `vouch key export`
// printed.

import * as api from './api.js';
import { esc, flash, errText, throttle, timeEl } from './util.js';

const STATUS = ['failed', 'warning', 'unknown', 'ok'];
const BADNESS = { failed: 0, warning: 1, unknown: 2, ok: 3 };

/** A check-status badge; anything the console does not know is unknown. */
export function checkBadge(status) {
  const s = STATUS.includes(status) ? status : 'unknown';
  return `<span class="badge c-${s}" data-status="${s}">${esc(s)}</span>`;
}

function table(checks) {
  const sorted = [...checks].sort(
    (a, b) => (BADNESS[a.status] ?? 2) - (BADNESS[b.status] ?? 2) || a.id.localeCompare(b.id),
  );
  return `<div class="table-wrap"><table class="security"><thead><tr><th scope="col">Status</th><th scope="col">Check</th><th scope="col">Why</th><th scope="col">What to do</th><th scope="col">Since</th></tr></thead><tbody>${sorted
    .map(
      (c) => `<tr data-check="${esc(c.id)}" data-status="${esc(c.status)}"><td>${checkBadge(c.status)}</td><th scope="row">${esc(c.kind)}${c.subject ? `<br><small class="muted">${esc(c.subject)}</small>` : ''}</th><td class="msg">${esc(c.reason)}</td><td class="msg">${c.action ? esc(c.action) : '<span class="muted">nothing</span>'}</td><td>${c.since ? timeEl(c.since) : '<span class="muted">—</span>'}</td></tr>`,
    )
    .join('')}</tbody></table></div>`;
}

function summary(s) {
  return `<p class="security-summary">${checkBadge(s.status)} <span>${STATUS.map((k) => `<span class="count-${k}">${esc(s.counts[k])} ${k}</span>`).join(' · ')}</span> <small class="muted">evaluated ${timeEl(s.evaluated_at)}</small></p>`;
}

export async function render(main, route, ctx) {
  const admin = ctx.principal && ctx.principal.role === 'admin';
  main.innerHTML = `<h1>Security</h1>
<p class="muted">Checks of this installation's protection, evaluated from the event log, the configuration and the repositories. A failed check raises an alert; <em>unknown</em> means it could not be told, and is never counted as ok.</p>
<div id="security-summary"></div>
<div id="security-checks"><p class="muted">Loading…</p></div>
${admin ? `<section aria-labelledby="h-export"><h2 id="h-export">Confirm a key export</h2>
<p class="muted">Run <code>vouch key export --paper --repo PATH</code> on the server, keep the export away from this machine, then give the check code it printed.</p>
<form id="key-export-form" class="inline-form" novalidate><label for="ke-repo">Repository</label> <input id="ke-repo" name="repository" required size="16" value="default"> <label for="ke-check">Check code</label> <input id="ke-check" name="check" required size="22" placeholder="0123-4567-89ab-cdef" autocomplete="off"> <button type="submit">Confirm</button></form></section>` : ''}
<p><a href="#/events?type=security.">Security events in the log</a></p>`;
  let generation = 0;
  function show(s) {
    main.querySelector('#security-summary').innerHTML = summary(s);
    main.querySelector('#security-checks').innerHTML = table(s.checks);
  }
  async function load() {
    const mine = ++generation;
    const s = await api.get('/security');
    if (!route.alive() || mine !== generation) return;
    show(s);
  }
  const form = main.querySelector('#key-export-form');
  if (form) {
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const repository = form.querySelector('#ke-repo').value.trim();
      const check = form.querySelector('#ke-check').value.trim();
      try {
        const s = await api.post('/security/key-exports', { repository, check });
        generation++;
        show(s);
        form.querySelector('#ke-check').value = '';
        form.querySelector('#ke-check').removeAttribute('aria-invalid');
        flash(`The key export of repository ${repository} is confirmed.`);
      } catch (e) {
        form.querySelector('#ke-check').setAttribute('aria-invalid', 'true');
        flash(errText(e), 'error');
      }
    });
  }
  ctx.on('security.', throttle(() => load().catch(() => {}), 1000));
  await load();
}

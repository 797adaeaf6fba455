// Plans: the list, and one plan's form (create or edit) with run now, pause,
// resume and delete. Validation errors from the API (422 `fields`) are shown
// by the field they belong to.

import * as api from './api.js';
import { esc, errText, flash, fmtTime, jobBadge, protectionBadge, stateBadge, timeEl } from './util.js';

export async function render(main, route, ctx) {
  const id = route.parts[0];
  if (!id) return renderList(main, route, ctx);
  return renderForm(main, route, ctx, id === 'new' ? null : id);
}

async function renderList(main, route, ctx) {
  const plans = await api.get('/plans');
  if (!route.alive()) return;
  const rows = plans
    .map((p) => {
      const enc = esc(encodeURIComponent(p.id));
      const s = p.protection && p.protection.status;
      return `<tr data-plan="${esc(p.id)}">
<th scope="row"><a href="#/plans/${enc}">${esc(p.id)}</a></th>
<td class="path">${esc(p.source)}</td><td><code>${esc(p.schedule)}</code> <small class="muted">${esc(p.time_zone || 'UTC')}</small></td><td>${esc(p.rpo)}</td>
<td>${protectionBadge(s)}${(p.anomalous_points || []).length ? ` <a href="#/points/${esc(p.anomalous_points[0])}" class="badge anomaly" data-plan-anomaly title="The ransomware heuristic flagged a point of this plan">anomaly</a>` : ''}</td>
<td>${p.paused ? '<span class="badge paused">paused</span>' : 'active'}</td>
<td>${p.last_run ? jobBadge(p.last_run.state) + ' ' + timeEl(p.last_run.at) : '<span class="muted">never</span>'}</td>
<td class="actions"><a href="#/points?plan=${enc}">Points</a>${ctx.canOperate ? ` <button type="button" class="small" data-run="${esc(p.id)}">Run now</button> <button type="button" class="small secondary" data-${p.paused ? 'resume' : 'pause'}="${esc(p.id)}">${p.paused ? 'Resume' : 'Pause'}</button>` : ''}</td>
</tr>`;
    })
    .join('');
  main.innerHTML = `
<div class="title-row"><h1>Plans <span class="count">${plans.length}</span></h1>
${ctx.canOperate ? '<a class="button" href="#/plans/new" id="new-plan">New plan</a>' : ''}</div>
${plans.length ? `<div class="table-wrap"><table><thead><tr><th scope="col">Plan</th><th scope="col">Source</th><th scope="col">Schedule</th><th scope="col">RPO</th><th scope="col">Protection</th><th scope="col">State</th><th scope="col">Last run</th><th scope="col"><span class="sr">Actions</span></th></tr></thead><tbody>${rows}</tbody></table></div>` : '<p class="empty">No plans yet.</p>'}`;
  return actions(main, ctx, () => ctx.navigate(location.hash));
}

/** Run / pause / resume buttons anywhere in `main` (event delegation). */
function actions(main, ctx, after) {
  async function onClick(ev) {
    const b = ev.target.closest('button[data-run],button[data-pause],button[data-resume],button[data-delete]');
    if (!b || !ctx.canOperate) return;
    const [verb, id] = Object.entries(b.dataset)[0];
    const path = `/plans/${encodeURIComponent(id)}`;
    if (verb === 'delete' && !confirm(`Delete plan ${id}? Its recovery points stay; retention stops.`)) return;
    b.disabled = true;
    try {
      if (verb === 'run') {
        const job = await api.post(path + '/run');
        flash(`Started ${job.kind} job ${job.id} for plan ${id}.`);
      } else if (verb === 'delete') {
        await api.del(path);
        flash(`Plan ${id} deleted.`);
        location.hash = '#/plans';
        return;
      } else {
        await api.post(`${path}/${verb}`);
        flash(`Plan ${id} ${verb === 'pause' ? 'paused' : 'resumed'}.`);
      }
      if (after) after();
    } catch (e) {
      flash(`Could not ${verb} ${id}: ${errText(e)}`, 'error');
    } finally {
      b.disabled = false;
    }
  }
  main.addEventListener('click', onClick);
  return () => main.removeEventListener('click', onClick);
}

const FIELDS = [
  // [name, label, kind, help]
  ['id', 'Plan name', 'text', 'Lower-case letters, digits, ".", "_" and "-"; it cannot change later.'],
  ['source', 'Source path', 'text', 'An absolute path on the server\u2019s host, or vzdump:/path for Proxmox VE guests from a dump storage.'],
  ['schedule', 'Schedule', 'text', 'Cron, 5 fields, in the plan\u2019s time zone: minute hour day-of-month month day-of-week (e.g. "0 2 * * *").'],
  ['time_zone', 'Time zone', 'text', 'An IANA name such as "Europe/Berlin": the schedule and retention\u2019s days and weeks follow it (daylight saving included). Empty: UTC.'],
  ['rpo', 'Recovery point objective (RPO)', 'text', 'The oldest a recoverable point may be before the plan is at risk, e.g. "1day 2h".'],
  ['repository', 'Repository', 'text', ''],
  ['paused', 'Paused (no scheduled runs)', 'checkbox', ''],
];
const RETENTION = ['last', 'hourly', 'daily', 'weekly', 'monthly', 'yearly'];

function field(name, label, kind, help, extra = '') {
  const fid = 'f-' + name.replace(/\./g, '-');
  const h = help ? `<p class="help" id="${fid}-help">${esc(help)}</p>` : '';
  const desc = `aria-describedby="${help ? fid + '-help ' : ''}${fid}-error"`;
  if (kind === 'lines') {
    // A list, one entry per line.
    return `<div class="field" data-field="${name}"><label for="${fid}">${esc(label)}</label><textarea id="${fid}" name="${name}" rows="3" spellcheck="false" ${desc} ${extra}></textarea>${h}<p class="field-error" id="${fid}-error"></p></div>`;
  }
  if (kind === 'checkbox') {
    return `<div class="field check" data-field="${name}"><input type="checkbox" id="${fid}" name="${name}" ${desc} ${extra}><label for="${fid}">${esc(label)}</label>${h}<p class="field-error" id="${fid}-error"></p></div>`;
  }
  return `<div class="field" data-field="${name}"><label for="${fid}">${esc(label)}</label><input type="${kind}" id="${fid}" name="${name}" ${desc} ${extra}>${h}<p class="field-error" id="${fid}-error"></p></div>`;
}

function formHtml(isNew, canEdit) {
  const base = FIELDS.map(([n, l, k, h]) => field(n, l, k, h, n === 'id' && !isNew ? 'readonly' : n === 'id' || n === 'source' ? 'required' : n === 'time_zone' ? 'list="time-zones" autocomplete="off"' : '')).join('');
  const zones = typeof Intl.supportedValuesOf === 'function' ? Intl.supportedValuesOf('timeZone') : [];
  const hook = (phase, what) => `
${field(`hooks.${phase}.name`, `${what}: program`, 'text', 'A file name in the hook directory of the host that backs up (the server\u2019s [hooks] dir, an agent\u2019s --hooks-dir); empty: none.')}
${field(`hooks.${phase}.args`, 'Its arguments', 'lines', 'One per line.')}
${field(`hooks.${phase}.timeout`, 'Its timeout', 'text', 'A duration such as "10m" (the default).')}`;
  const ret = RETENTION.map((n) => field('retention.' + n, n[0].toUpperCase() + n.slice(1), 'number', '', 'min="0" step="1" inputmode="numeric" placeholder="—"')).join('');
  return `
<form id="plan-form" novalidate>
<div id="form-errors" class="error-summary" role="alert" tabindex="-1" hidden></div>
<fieldset ${canEdit ? '' : 'disabled'}>
<legend class="sr">Plan</legend>
${base}
<datalist id="time-zones">${zones.map((z) => `<option value="${esc(z)}">`).join('')}</datalist>
<fieldset class="group" data-field="files"><legend>Files <small class="muted">(file-system sources)</small></legend>
${field('files.also', 'Also back up these paths into the same point', 'lines', 'Absolute paths on the same host, one per line.')}
${field('files.exclude', 'Leave out', 'lines', 'Patterns, one per line: "*.tmp", "/var/cache", "**/node_modules".')}
${field('files.exclude_files', 'Leave out what these files list', 'lines', 'Absolute paths of files of patterns, one per line.')}
${field('files.exclude_if_present', 'Leave out directories holding a file named', 'lines', 'One name per line, e.g. ".nobackup" (the marker itself is kept).')}
${field('files.exclude_larger_than', 'Leave out files larger than', 'text', 'A size such as "500M" or "2GiB" (binary multiples); empty: no limit.')}
${field('files.exclude_caches', 'Leave out cache directories (CACHEDIR.TAG)', 'checkbox', '')}
${field('files.one_file_system', 'Stay on each path\u2019s file system', 'checkbox', '')}
<p class="field-error" id="f-files-error"></p>
</fieldset>
<fieldset class="group" data-field="hooks"><legend>Hooks <small class="muted">(around each file-system backup)</small></legend>
${hook('pre', 'Before the backup')}
${hook('post', 'After the backup')}
<p class="field-error" id="f-hooks-error"></p>
</fieldset>
<fieldset class="group" data-field="retention"><legend>Retention: points to keep <small class="muted">(empty = no rule of that kind)</small></legend>
<div class="grid">${ret}</div>
${field('retention.within', 'Keep everything within', 'text', 'A duration such as "2days", or empty.')}
<p class="field-error" id="f-retention-error"></p>
</fieldset>
<fieldset class="group" data-field="verification"><legend>Verification</legend>
${field('verification.after_backup', 'Verify every new point right after its backup', 'checkbox', '')}
${field('verification.every', 'Re-verify every', 'text', 'A duration, e.g. "7days".')}
${field('verification.depth', 'Depth', 'text', '"structure", "read-all", or "read-sample:N" (percent of packs read back).', 'list="depths"')}
<datalist id="depths"><option value="structure"><option value="read-all"><option value="read-sample:10"></datalist>
<p class="field-error" id="f-verification-error"></p>
</fieldset>
<fieldset class="group" data-field="restore_test"><legend>Restore test</legend>
${field('restore_test.every', 'Restore-test every', 'text', 'A duration, e.g. "1day".')}
${field('restore_test.max_evidence_age', 'Evidence is good for', 'text', 'After this long without a new restore test, the point no longer counts as recoverable.')}
${field('restore_test.sample_files', 'Files restored at most', 'number', 'Over this many files a sample is restored, and the evidence says which.', 'min="1" step="1"')}
${field('restore_test.boot.marker', 'Boot a restored VM until its console shows', 'text', 'Proxmox VE VMs: the restored disk boots under qemu with no network until this text appears on its serial console, e.g. "login:". Empty: no boot.')}
${field('restore_test.boot.timeout', 'Boot time allowed', 'text', 'A duration, e.g. "5m".')}
${field('restore_test.boot.memory_mib', 'Boot memory (MiB)', 'number', 'The booted guest\u2019s memory.', 'min="64" max="65536" step="1"')}
<p class="field-error" id="f-restore_test-error"></p>
</fieldset>
<fieldset class="group" data-field="proxmox"><legend>Proxmox VE guest <small class="muted">(pve: sources)</small></legend>
${field('proxmox.mode', 'vzdump mode', 'text', '"snapshot" (live), "suspend" or "stop".', 'list="dump-modes"')}
<datalist id="dump-modes"><option value="snapshot"><option value="suspend"><option value="stop"></datalist>
${field('proxmox.remove_dump', 'Remove the dump from the storage once backed up', 'checkbox', '')}
<p class="field-error" id="f-proxmox-error"></p>
</fieldset>
<fieldset class="group" data-field="replica"><legend>Second copy <small class="muted">(empty repository = none)</small></legend>
${field('replica.repository', 'Copy every new point into repository', 'text', 'Another configured repository, ideally off this host (an s3: location) with Object Lock.')}
${field('replica.lock_for', 'Lock each copy for', 'text', 'A duration such as "30days"; on a store with Object Lock the copy is immutable that long. Empty: no lock of its own.')}
${field('replica.require', 'Protected requires', 'text', '"nothing", "proven" (a recoverable copy inside the RPO) or "immutable-off-host".', 'list="requirements"')}
<datalist id="requirements"><option value="nothing"><option value="proven"><option value="immutable-off-host"></datalist>
<p class="field-error" id="f-replica-error"></p>
</fieldset>
</fieldset>
${canEdit ? `<div class="buttons"><button type="submit" id="plan-save">${isNew ? 'Create plan' : 'Save changes'}</button> <a href="#/plans" class="button secondary">Cancel</a></div>` : '<p class="muted">Your role may read plans but not change them.</p>'}
</form>`;
}

/**
 * Bytes from a size as `vouch backup --exclude-larger-than` reads it: "500",
 * "64K", "10MiB", "1.5G" (binary multiples whatever the spelling); NaN when
 * it is not one.
 */
export function parseSize(text) {
  const m = /^(\d+(?:\.\d+)?)\s*(|b|[kmgt](?:i?b)?)$/i.exec(text.trim());
  if (!m) return NaN;
  const unit = m[2].toLowerCase();
  const shift = unit === '' || unit === 'b' ? 0 : 'kmgt'.indexOf(unit[0]) + 1;
  return Math.floor(Number(m[1]) * 1024 ** shift);
}

/** A byte count as the size field shows it: the largest exact binary unit. */
function sizeText(n) {
  if (n == null) return '';
  const units = ['', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (i < units.length - 1 && n >= 1024 && n % 1024 === 0) {
    n /= 1024;
    i += 1;
  }
  return `${n}${units[i]}`;
}

function fill(form, plan) {
  for (const el of form.querySelectorAll('input[name],textarea[name]')) {
    const v = el.name.split('.').reduce((o, k) => (o == null ? undefined : o[k]), plan);
    if (el.type === 'checkbox') el.checked = !!v;
    else if (el.name === 'files.exclude_larger_than') el.value = sizeText(v);
    else if (Array.isArray(v)) el.value = v.join('\n');
    else el.value = v === null || v === undefined ? '' : v;
  }
}

const DERIVED = ['protection', 'last_recoverable_at', 'last_run', 'next_run_at', 'created_at', 'copies', 'anomalous_points'];

/** One repository holding copies of the plan's points: where, how held, the newest. */
function copiesFact(c) {
  const where = c.location === 'remote' ? 'off this host' : c.location === 'local' ? 'on this host' : 'no copy yet';
  const newest = c.newest
    ? `newest <a href="#/points/${esc(c.newest.point)}"><code>${esc(c.newest.point.slice(0, 12))}</code></a> ${stateBadge(c.newest.state)} ${c.newest.immutable ? `<span class="badge locked">immutable</span> until ${esc(fmtTime(c.newest.locked_until))}` : c.newest.locked_until ? `locked by Vouch until ${esc(fmtTime(c.newest.locked_until))}` : 'not locked'}`
    : '';
  return `<div data-copies="${esc(c.repository)}"><dt>Copies in ${esc(c.repository)}${c.current ? '' : ' <small class="muted">(former replica)</small>'}</dt><dd>${esc(where)}${c.locks_enforced_by ? ` · locks enforced by ${esc(c.locks_enforced_by)}` : ''} · ${c.recoverable} of ${c.live} recoverable${newest ? ' · ' + newest : ''}</dd></div>`;
}

/**
 * The input for POST/PUT: the form's values laid over `base` (the plan as
 * loaded, or the defaults), so fields the form does not show (e.g.
 * `retention.tags`, or fields added later in v1) keep their values.
 */
function collect(form, base) {
  const out = JSON.parse(JSON.stringify(base || {}));
  for (const k of DERIVED) delete out[k];
  for (const el of form.querySelectorAll('input[name],textarea[name]')) {
    const path = el.name.split('.');
    let v;
    if (el.type === 'checkbox') v = el.checked;
    else if (el.tagName === 'TEXTAREA') v = el.value.split('\n').map((l) => l.trim()).filter((l) => l !== '');
    else if (el.name === 'files.exclude_larger_than') v = el.value.trim() === '' ? null : parseSize(el.value);
    else if (el.type === 'number') v = el.value.trim() === '' ? null : Number(el.value);
    else v = el.value.trim() === '' ? (path.length > 1 ? null : '') : el.value.trim();
    let o = out;
    for (const k of path.slice(0, -1)) o = o[k] && typeof o[k] === 'object' ? o[k] : (o[k] = {});
    o[path[path.length - 1]] = v;
  }
  // No repository: no second copy.
  if (!out.replica || !out.replica.repository) out.replica = null;
  // No marker: no boot.
  if (out.restore_test && (!out.restore_test.boot || !out.restore_test.boot.marker)) out.restore_test.boot = null;
  // No time zone: UTC.
  if (!out.time_zone) out.time_zone = null;
  // A hook without a program is no hook.
  for (const phase of ['pre', 'post']) {
    if (out.hooks && (!out.hooks[phase] || !out.hooks[phase].name)) out.hooks[phase] = null;
  }
  // Neither a mode nor removal: vzdump's defaults.
  if (out.proxmox && !out.proxmox.mode && !out.proxmox.remove_dump) out.proxmox = null;
  return out;
}

/** Shows the API's `fields` next to their inputs; returns the ones no input claims. */
function showErrors(form, fields, message) {
  for (const p of form.querySelectorAll('.field-error')) p.textContent = '';
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  const summary = form.querySelector('#form-errors');
  const items = [];
  for (const [key, msg] of Object.entries(fields || {})) {
    const name = key.replace(/\[(\w+)\]/g, '.$1').replace(/\//g, '.').replace(/^\./, '');
    // The closest field that claims it: `files.exclude.2` is shown by
    // `files.exclude`, `hooks.pre` by the hooks' group.
    const parts = name.split('.');
    let target = null;
    for (let n = parts.length; n > 0 && !target; n--) {
      target = form.querySelector(`[data-field="${CSS.escape(parts.slice(0, n).join('.'))}"]`);
    }
    if (target) {
      const p = target.querySelector(':scope > .field-error');
      p.textContent = p.textContent ? `${p.textContent} ${msg}` : msg;
      const input = target.querySelector('input,textarea');
      if (input && target.classList.contains('field')) input.setAttribute('aria-invalid', 'true');
      const fid = input && target.classList.contains('field') ? input.id : p.id;
      items.push(`<li><a href="#" data-focus="${esc(fid)}">${esc(name)}: ${esc(msg)}</a></li>`);
    } else {
      items.push(`<li>${esc(name)}: ${esc(msg)}</li>`);
    }
  }
  if (!message && !items.length) {
    summary.hidden = true;
    return;
  }
  summary.hidden = false;
  summary.innerHTML = `<h2>The plan was not saved</h2><p>${esc(message || '')}</p>${items.length ? `<ul>${items.join('')}</ul>` : ''}`;
  summary.focus();
}

async function renderForm(main, route, ctx, id) {
  const isNew = id === null;
  const enc = id ? encodeURIComponent(id) : '';
  const [plan, defaults] = await Promise.all([
    isNew ? Promise.resolve(null) : api.get(`/plans/${enc}`),
    isNew ? api.get('/plans/defaults').catch(() => ({})) : Promise.resolve(null),
  ]);
  if (!route.alive()) return;
  const p = plan || {};
  main.innerHTML = `
<nav class="crumbs" aria-label="Breadcrumb"><a href="#/plans">Plans</a> › ${isNew ? 'New plan' : esc(id)}</nav>
<div class="title-row"><h1>${isNew ? 'New plan' : 'Plan ' + esc(id)}</h1>
${!isNew && ctx.canOperate ? `<div class="tools"><button type="button" data-run="${esc(id)}">Run now</button> <button type="button" class="secondary" data-${p.paused ? 'resume' : 'pause'}="${esc(id)}">${p.paused ? 'Resume' : 'Pause'}</button> <button type="button" class="danger" data-delete="${esc(id)}">Delete</button></div>` : ''}</div>
${isNew ? '' : `<dl class="facts">
<div><dt>Protection</dt><dd>${protectionBadge(p.protection && p.protection.status)} ${esc((p.protection && p.protection.reason) || '')}</dd></div>
<div><dt>Last recoverable point</dt><dd>${timeEl(p.last_recoverable_at)}</dd></div>
${(p.anomalous_points || []).length ? `<div data-plan-anomaly><dt>Anomalies</dt><dd>${p.anomalous_points.map((id) => `<a href="#/points/${esc(id)}" class="badge anomaly">${esc(id.slice(0, 12))}</a>`).join(' ')} <small class="muted">points the ransomware heuristic flagged (it reports, never acts)</small></dd></div>` : ''}
<div><dt>Last run</dt><dd>${p.last_run ? `${jobBadge(p.last_run.state)} ${timeEl(p.last_run.at)} <a href="#/jobs?plan=${esc(enc)}">jobs</a>` : '<span class="muted">never</span>'}</dd></div>
<div><dt>Next run</dt><dd>${p.paused ? '<span class="badge paused">paused</span>' : timeEl(p.next_run_at)}</dd></div>
<div><dt>Recovery points</dt><dd><a href="#/points?plan=${esc(enc)}">list</a> · <a href="#/charts?plan=${esc(enc)}">charts</a></dd></div>
${(p.copies || []).map(copiesFact).join('')}
</dl>`}
${formHtml(isNew, ctx.canOperate)}`;
  const form = main.querySelector('#plan-form');
  fill(form, isNew ? defaults || {} : p);
  form.addEventListener('click', (ev) => {
    const a = ev.target.closest('a[data-focus]');
    if (!a) return;
    ev.preventDefault();
    const el = document.getElementById(a.dataset.focus);
    if (el) el.focus();
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = collect(form, isNew ? defaults : p);
    const local = {};
    if (isNew && !body.id) local.id = 'A plan needs a name.';
    if (!body.source) local.source = 'A plan needs a source path.';
    if (body.files && Number.isNaN(body.files.exclude_larger_than)) {
      local['files.exclude_larger_than'] = 'Not a size: write it like 500M, 2GiB or 1048576.';
    }
    if (body.replica && body.replica.repository === (body.repository || 'default')) {
      local['replica.repository'] = 'This is the plan\u2019s own repository: a second copy must be in another one.';
    }
    if (Object.keys(local).length) return showErrors(form, local, 'Some fields need attention.');
    const btn = form.querySelector('#plan-save');
    btn.disabled = true;
    try {
      const saved = isNew ? await api.post('/plans', body) : await api.put(`/plans/${enc}`, body);
      flash(isNew ? `Plan ${saved.id} created.` : `Plan ${saved.id} saved.`);
      // Shown again as saved (on its own page already: drawn anew, so
      // errors of an earlier attempt go).
      const to = '#/plans/' + encodeURIComponent(saved.id);
      if (location.hash === to) ctx.navigate(to);
      else location.hash = to;
    } catch (e) {
      if (e instanceof api.ApiError) showErrors(form, e.fields, errText(e));
      else showErrors(form, {}, errText(e));
    } finally {
      btn.disabled = false;
    }
  });
  if (isNew) form.querySelector('#f-id').focus();
  return actions(main, ctx, () => ctx.navigate(location.hash));
}

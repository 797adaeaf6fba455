// Charts drawn here as SVG (no library): backup duration and bytes added per
// run, repository size over time, verification coverage.

import * as api from './api.js';
import { POINT_STATES, esc, fmtBytes, fmtSpan, fmtTime } from './util.js';

const W = 640;
const H = 220;
const PAD = { l: 64, r: 12, t: 12, b: 28 };

let uid = 0;

function frame(title, desc, inner, yTicks) {
  const id = 'c' + ++uid;
  const grid = yTicks
    .map(
      ([y, label]) => `<line class="grid" x1="${PAD.l}" x2="${W - PAD.r}" y1="${y}" y2="${y}"></line><text class="tick" x="${PAD.l - 6}" y="${y + 4}" text-anchor="end">${esc(label)}</text>`,
    )
    .join('');
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="${id}-t ${id}-d" preserveAspectRatio="xMidYMid meet">
<title id="${id}-t">${esc(title)}</title><desc id="${id}-d">${esc(desc)}</desc>${grid}${inner}</svg><figcaption>${esc(title)}</figcaption></figure>`;
}

function ticks(max, fmt) {
  const h = H - PAD.t - PAD.b;
  return [0, 0.5, 1].map((f) => [PAD.t + h - f * h, fmt(max * f)]);
}

function xLabels(first, last) {
  return `<text class="tick" x="${PAD.l}" y="${H - 8}">${esc(first)}</text><text class="tick" x="${W - PAD.r}" y="${H - 8}" text-anchor="end">${esc(last)}</text>`;
}

/** Bars for `items` ({at, y, label}), oldest left. */
export function barChart(title, items, fmt, cls) {
  if (!items.length) return `<figure class="chart empty"><p class="muted">${esc(title)}: no runs yet.</p></figure>`;
  const max = Math.max(1, ...items.map((i) => i.y));
  const w = W - PAD.l - PAD.r;
  const h = H - PAD.t - PAD.b;
  const step = w / items.length;
  const bw = Math.max(1, Math.min(40, step * 0.8));
  let bars = '';
  items.forEach((it, i) => {
    const bh = (it.y / max) * h;
    const x = PAD.l + i * step + (step - bw) / 2;
    bars += `<rect class="${cls}" x="${x.toFixed(1)}" y="${(PAD.t + h - bh).toFixed(1)}" width="${bw.toFixed(1)}" height="${Math.max(0.5, bh).toFixed(1)}"><title>${esc(it.label)}: ${esc(fmt(it.y))}</title></rect>`;
  });
  const desc = `${items.length} runs; largest ${fmt(max)}; latest ${fmt(items[items.length - 1].y)}.`;
  return frame(title, desc, bars + xLabels(fmtTime(items[0].at).slice(0, 16), fmtTime(items[items.length - 1].at).slice(0, 16)), ticks(max, fmt));
}

/** A step line for `items` ({at, y}) over time. */
export function lineChart(title, items, fmt, note) {
  if (!items.length) return `<figure class="chart empty"><p class="muted">${esc(title)}: no data yet.</p></figure>`;
  const t0 = new Date(items[0].at).getTime();
  const t1 = Math.max(t0 + 1, new Date(items[items.length - 1].at).getTime());
  const max = Math.max(1, ...items.map((i) => i.y));
  const w = W - PAD.l - PAD.r;
  const h = H - PAD.t - PAD.b;
  const X = (t) => PAD.l + ((t - t0) / (t1 - t0)) * w;
  const Y = (v) => PAD.t + h - (v / max) * h;
  let d = '';
  let prevY = Y(0);
  items.forEach((it, i) => {
    const x = items.length === 1 ? PAD.l + w : X(new Date(it.at).getTime());
    d += i === 0 ? `M${PAD.l},${prevY.toFixed(1)} L${x.toFixed(1)},${prevY.toFixed(1)} ` : `L${x.toFixed(1)},${prevY.toFixed(1)} `;
    prevY = Y(it.y);
    d += `L${x.toFixed(1)},${prevY.toFixed(1)} `;
  });
  const dots = items
    .map((it) => `<circle class="dot" cx="${(items.length === 1 ? PAD.l + w : X(new Date(it.at).getTime())).toFixed(1)}" cy="${Y(it.y).toFixed(1)}" r="2.5"><title>${esc(fmtTime(it.at))}: ${esc(fmt(it.y))}</title></circle>`)
    .join('');
  const desc = `From ${fmt(items[0].y)} to ${fmt(items[items.length - 1].y)}. ${note || ''}`;
  return frame(title, desc, `<path class="line" d="${d}"></path>${dots}` + xLabels(fmtTime(items[0].at).slice(0, 16), fmtTime(items[items.length - 1].at).slice(0, 16)), ticks(max, fmt));
}

/** One stacked bar per row ({label, counts: {state: n}}), 100 % wide. */
export function coverageChart(rows) {
  if (!rows.length) return '<p class="muted">No recovery points yet.</p>';
  const rowH = 22;
  const lw = 150;
  const w = W - lw - 70;
  const h = rows.length * (rowH + 6) + 4;
  let out = '';
  rows.forEach((r, i) => {
    const total = POINT_STATES.reduce((s, k) => s + (r.counts[k] || 0), 0) || 1;
    const y = 2 + i * (rowH + 6);
    let x = lw;
    out += `<text class="tick" x="${lw - 6}" y="${y + 15}" text-anchor="end">${esc(r.label.length > 20 ? r.label.slice(0, 19) + '…' : r.label)}</text>`;
    for (const k of POINT_STATES) {
      const n = r.counts[k] || 0;
      if (!n) continue;
      const bw = (n / total) * w;
      out += `<rect class="s-${k}" x="${x.toFixed(1)}" y="${y}" width="${bw.toFixed(1)}" height="${rowH}"><title>${esc(r.label)}: ${n} ${k}</title></rect>`;
      x += bw;
    }
    const good = (r.counts.verified || 0) + (r.counts.recoverable || 0);
    out += `<text class="tick" x="${lw + w + 6}" y="${y + 15}">${Math.round((good / total) * 100)} %</text>`;
  });
  const legend = POINT_STATES.map((k) => `<li><span class="swatch s-${k}"></span>${k}</li>`).join('');
  return `<figure class="chart"><svg viewBox="0 0 ${W} ${h}" role="img" aria-label="Points by state per plan; the percentage is verified or recoverable"><title>Verification coverage</title>${out}</svg>
<figcaption>Verification coverage: share of points verified or recoverable, per plan <ul class="legend">${legend}</ul></figcaption></figure>`;
}

export async function render(main, route) {
  const plan = route.query.get('plan') || '';
  const [points, repos, plans] = await Promise.all([
    api.get('/points' + api.qs({ plan, limit: 1000 })),
    api.get('/repositories').catch(() => []),
    api.get('/plans').catch(() => []),
  ]);
  if (!route.alive()) return;
  const runs = points
    .filter((p) => p.summary)
    .sort((a, b) => new Date(a.snapshot_at) - new Date(b.snapshot_at));
  const last = runs.slice(-100);
  const label = (p) => `${p.plan || 'no plan'} ${fmtTime(p.snapshot_at)}`;
  const durations = last.map((p) => ({ at: p.snapshot_at, y: p.summary.duration_ms, label: label(p) }));
  const added = last.map((p) => ({ at: p.snapshot_at, y: p.summary.added_bytes, label: label(p) }));
  let acc = 0;
  const size = runs.map((p) => ({ at: p.snapshot_at, y: (acc += p.summary.stored_bytes || 0) }));
  const byPlan = new Map();
  for (const p of points) {
    const k = p.plan || '(no plan)';
    if (!byPlan.has(k)) byPlan.set(k, {});
    const c = byPlan.get(k);
    const s = POINT_STATES.includes(p.state) ? p.state : 'unknown';
    c[s] = (c[s] || 0) + 1;
  }
  const cov = [...byPlan.entries()].sort().slice(0, 40).map(([k, counts]) => ({ label: k, counts }));
  const repoFacts = repos
    .map((r) => `<li><strong>${esc(r.id)}</strong>: ${fmtBytes(r.size_bytes)} in ${esc(r.packs)} packs, ${esc(r.snapshots)} snapshots ${r.location ? `<small class="muted">${esc(r.location)}</small>` : ''}</li>`)
    .join('');
  main.innerHTML = `
<h1>Charts</h1>
<form id="charts-filter" class="filters" role="search"><div class="field inline-field"><label for="cf-plan">Plan</label><select id="cf-plan" name="plan"><option value="">all plans</option>${plans.map((p) => `<option ${p.id === plan ? 'selected' : ''}>${esc(p.id)}</option>`).join('')}</select></div></form>
<div class="charts">
<section aria-labelledby="h-dur"><h2 id="h-dur">Backup duration per run</h2>${barChart('Backup duration per run', durations, fmtSpan, 'bar-dur')}</section>
<section aria-labelledby="h-add"><h2 id="h-add">Bytes added per run</h2>${barChart('Bytes added per run (new data after deduplication)', added, fmtBytes, 'bar-add')}</section>
<section aria-labelledby="h-size"><h2 id="h-size">Repository size over time</h2>${lineChart('Stored bytes added by backups, cumulative', size, fmtBytes, 'Estimated from the points\u2019 stored bytes; space freed by prune is not subtracted.')}
<p class="help">Estimated from each point’s stored bytes (space freed by prune is not subtracted). Now: </p><ul class="repos">${repoFacts || '<li class="muted">repository size unknown</li>'}</ul></section>
<section aria-labelledby="h-cov"><h2 id="h-cov">Verification coverage</h2>${coverageChart(cov)}</section>
</div>`;
  const sel = main.querySelector('#cf-plan');
  sel.addEventListener('change', () => (location.hash = '#/charts' + api.qs({ plan: sel.value })));
}

// Small helpers shared by the pages: escaping, formatting, badges.

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for HTML content and attribute values. */
export function esc(v) {
  return v === null || v === undefined ? '' : String(v).replace(/[&<>"']/g, (c) => ESC[c]);
}

/** Tagged template that escapes every interpolated value (use raw() to opt out). */
export function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    out += (v && v.__raw !== undefined ? v.__raw : Array.isArray(v) ? v.join('') : esc(v)) + strings[i + 1];
  }
  return { __raw: out, toString: () => out };
}

/** Marks already-built markup so html`` does not escape it. */
export function raw(s) {
  return { __raw: String(s), toString: () => String(s) };
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = Number(n);
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + '\u00a0' + units[i];
}

export function fmtCount(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en');
}

/** 2026-12-03 10:00:00 UTC, from an RFC 3339 string. */
export function fmtTime(s) {
  if (!s) return '—';
  const d = new Date(s);
  if (isNaN(d)) return String(s);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$|Z$/, '') + ' UTC';
}

/** A <time> element with the exact time as a tooltip and a relative text. */
export function timeEl(s, now) {
  if (!s) return '<span class="muted">never</span>';
  return `<time datetime="${esc(s)}" title="${esc(fmtTime(s))}">${esc(relative(s, now))}</time>`;
}

/** "5 min ago" / "in 3 h". */
export function relative(s, now) {
  const t = new Date(s).getTime();
  if (isNaN(t)) return String(s);
  const diff = t - (now ? new Date(now).getTime() : Date.now());
  const text = fmtSpan(Math.abs(diff));
  return diff <= 0 ? text + ' ago' : 'in ' + text;
}

/** A span of milliseconds as "2 d 3 h", "5 min", "12 s". */
export function fmtSpan(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '—';
  const s = Math.round(ms / 1000);
  if (s < 1) return ms < 1 ? '0 s' : Math.round(ms) + ' ms';
  if (s < 60) return s + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min' + (s % 60 && m < 10 ? ' ' + (s % 60) + ' s' : '');
  const h = Math.floor(m / 60);
  if (h < 48) return h + ' h' + (m % 60 ? ' ' + (m % 60) + ' min' : '');
  const d = Math.floor(h / 24);
  return d + ' d' + (h % 24 ? ' ' + (h % 24) + ' h' : '');
}

const UNIT_MS = {
  ns: 1e-6, us: 1e-3, ms: 1, msec: 1,
  s: 1e3, sec: 1e3, secs: 1e3, second: 1e3, seconds: 1e3,
  m: 6e4, min: 6e4, mins: 6e4, minute: 6e4, minutes: 6e4,
  h: 36e5, hr: 36e5, hrs: 36e5, hour: 36e5, hours: 36e5,
  d: 864e5, day: 864e5, days: 864e5,
  w: 6048e5, week: 6048e5, weeks: 6048e5,
  M: 2630016e3, month: 2630016e3, months: 2630016e3,
  y: 31557600e3, year: 31557600e3, years: 31557600e3,
};

/** Milliseconds of a humantime duration ("1day 2h", "30m"), or null. */
export function parseDuration(s) {
  if (!s) return null;
  const re = /(\d+(?:\.\d+)?)\s*([a-zA-Z]+)/g;
  let total = 0;
  let m;
  let any = false;
  while ((m = re.exec(String(s)))) {
    const u = UNIT_MS[m[2]] ?? UNIT_MS[m[2].toLowerCase()];
    if (u === undefined) return null;
    total += Number(m[1]) * u;
    any = true;
  }
  return any ? total : null;
}

const PROTECTION_LABEL = {
  protected: 'Protected',
  'at-risk': 'At risk',
  unprotected: 'Unprotected',
  unknown: 'Unknown',
};

/** A protection badge; anything the console does not know is shown as unknown. */
export function protectionBadge(status) {
  const s = PROTECTION_LABEL[status] ? status : 'unknown';
  return `<span class="badge p-${s}" data-status="${s}">${PROTECTION_LABEL[s]}</span>`;
}

const POINT_STATES = ['unknown', 'unverified', 'verified', 'recoverable', 'corrupt', 'unrecoverable', 'expired', 'vanished'];
export { POINT_STATES };

/** A recovery-point state badge (unknown states fall back to "unknown"). */
export function stateBadge(state) {
  const s = POINT_STATES.includes(state) ? state : 'unknown';
  return `<span class="badge s-${s}" data-state="${s}">${esc(s === state ? state : 'unknown')}</span>`;
}

const JOB_STATES = ['scheduled', 'running', 'succeeded', 'failed', 'abandoned'];

export function jobBadge(state) {
  const s = JOB_STATES.includes(state) ? state : 'unknown';
  return `<span class="badge j-${s}" data-state="${esc(state)}">${esc(state || 'unknown')}</span>`;
}

export function severityBadge(sev) {
  const s = ['info', 'warning', 'critical'].includes(sev) ? sev : 'unknown';
  return `<span class="badge a-${s}">${esc(sev || 'unknown')}</span>`;
}

const AGENT_LABEL = { lost: 'lost', working: 'working', idle: 'idle', 'never-seen': 'never seen' };

/** An agent's status badge: lost, working, idle or never seen (anything else is unknown). */
export function agentBadge(status) {
  const s = AGENT_LABEL[status] ? status : 'unknown';
  return `<span class="badge g-${s}" data-status="${s}">${esc(AGENT_LABEL[s] || 'unknown')}</span>`;
}

export function shortId(id) {
  return id ? String(id).slice(0, 12) : '—';
}

/** A transient message at the top of the page. */
export function flash(text, kind = 'info') {
  const el = document.getElementById('flash');
  if (!el) return;
  el.innerHTML = `<p class="flash ${esc(kind)}">${esc(text)}</p>`;
  clearTimeout(flash.t);
  flash.t = setTimeout(() => (el.innerHTML = ''), kind === 'error' ? 12000 : 5000);
}

/** The message of an error, for humans. */
export function errText(e) {
  if (!e) return 'unknown error';
  if (e.code && e.message) return `${e.message} (${e.code})`;
  return e.message || String(e);
}

/** Runs f at most once per `ms`, trailing call included. */
export function throttle(f, ms) {
  let t = null;
  let pending = false;
  return (...a) => {
    if (t) {
      pending = true;
      return;
    }
    f(...a);
    t = setTimeout(function tick() {
      t = null;
      if (pending) {
        pending = false;
        f(...a);
        t = setTimeout(tick, ms);
      }
    }, ms);
  };
}

/** A loading/error placeholder inside `el`. */
export function showError(el, e) {
  el.innerHTML = `<p class="error" role="alert">Could not load: ${esc(errText(e))}</p>`;
}

/** "120 files · 3 MiB of 10 MiB · 5 MiB/s · ETA 2 s" from a progress message. */
export function progressText(p) {
  if (!p) return '';
  const parts = [];
  if (p.files !== undefined && p.files !== null) parts.push(`${Number(p.files).toLocaleString('en')} files`);
  if (p.bytes !== undefined) parts.push(fmtBytes(p.bytes) + (p.bytes_total ? ` of ${fmtBytes(p.bytes_total)}` : ''));
  if (p.bytes_per_sec) parts.push(fmtBytes(p.bytes_per_sec) + '/s');
  if (p.eta_seconds !== undefined && p.eta_seconds !== null) parts.push('ETA ' + fmtSpan(p.eta_seconds * 1000));
  return parts.join(' · ');
}

// The console's shell: sign-in state, the hash router (#/section/...?query),
// the one shared live event stream, and the role-based permissions.

import * as api from './api.js';
import { esc, errText } from './util.js';

const PAGES = {
  overview: () => import('./overview.js'),
  plans: () => import('./plans.js'),
  points: () => import('./points.js'),
  point: () => import('./point.js'),
  jobs: () => import('./jobs.js'),
  agents: () => import('./agents.js'),
  alerts: () => import('./alerts.js'),
  security: () => import('./security.js'),
  events: () => import('./events.js'),
  charts: () => import('./charts.js'),
  reports: () => import('./reports.js'),
  signin: () => import('./signin.js'),
};

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const live = document.getElementById('live');

/** Who is signed in: `{name, role}` from GET /api/v1/whoami, or null. */
let principal = null;
let stopStream = null;
const listeners = new Set();
let cleanup = null;
let generation = 0;

/** What a page gets: the principal, permissions and the live stream. */
const ctx = {
  get principal() {
    return principal;
  },
  /** May the signed-in role create, change, run, pause, delete plans, cancel jobs, lock points? */
  get canOperate() {
    return !!principal && (principal.role === 'admin' || principal.role === 'operator');
  },
  /** May the signed-in role download the content of backed-up files? */
  get canReadContent() {
    return !!principal && (principal.role === 'admin' || principal.role === 'restore');
  },
  /** Subscribes to live messages (`type` like 'progress' or 'backup.committed', or '*'). */
  on(type, fn) {
    const l = { type, fn };
    listeners.add(l);
    return () => listeners.delete(l);
  },
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
};

function dispatch(type, data, id) {
  for (const l of listeners) {
    if (l.type === '*' ? type !== 'progress' : l.type === type || (l.type.endsWith('.') && type.startsWith(l.type))) {
      l.fn(data, type, id);
    }
  }
}

function setLive(state) {
  live.textContent = state;
  live.dataset.state = state;
}

async function startStream() {
  if (stopStream) stopStream();
  const r = await api.ready();
  const from = r && typeof r.seq === 'number' ? r.seq + 1 : 0;
  stopStream = api.follow(from, dispatch, setLive);
}

function signedOut() {
  principal = null;
  if (stopStream) stopStream();
  stopStream = null;
  setLive('offline');
  nav.hidden = true;
  who.hidden = true;
}

api.setUnauthorizedHandler(() => {
  api.clearToken();
  signedOut();
  if (!location.hash.startsWith('#/signin')) {
    location.hash = '#/signin?expired=1&next=' + encodeURIComponent(location.hash || '#/overview');
  }
});

/** Called by the sign-in page (and on load) with a token in sessionStorage. */
export async function establish() {
  principal = await api.get('/whoami');
  document.getElementById('who-name').textContent = `${principal.name} (${principal.role})`;
  nav.hidden = false;
  who.hidden = false;
  startStream();
  return principal;
}

document.getElementById('signout').addEventListener('click', () => {
  api.clearToken();
  signedOut();
  location.hash = '#/signin';
});

/** `#/points/abc?state=x` -> {section: 'point', parts: ['abc'], query}. */
function parse(hash) {
  const h = hash.replace(/^#\/?/, '');
  const q = h.indexOf('?');
  const path = q < 0 ? h : h.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : h.slice(q + 1));
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  let section = parts.shift() || 'overview';
  if (section === 'points' && parts.length) section = 'point';
  return { section, parts, query };
}

async function route() {
  const gen = ++generation;
  if (cleanup) {
    try {
      cleanup();
    } catch (_) {
      /* a page failing to clean up must not block the next */
    }
    cleanup = null;
  }
  listeners.clear();
  const r = parse(location.hash);
  if (!api.token() && r.section !== 'signin') {
    location.replace('#/signin?next=' + encodeURIComponent(location.hash || '#/overview'));
    return;
  }
  if (api.token() && !principal && r.section !== 'signin') {
    try {
      await establish();
    } catch (e) {
      if (gen !== generation) return;
      if (!(e instanceof api.ApiError && e.status === 401)) {
        main.innerHTML = `<p class="error" role="alert">Cannot reach the server: ${esc(errText(e))}</p>`;
      }
      return;
    }
  }
  if (gen !== generation) return;
  const load = PAGES[r.section];
  for (const a of nav.querySelectorAll('a')) {
    const on = a.dataset.section === r.section || (r.section === 'point' && a.dataset.section === 'points');
    if (on) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!load) {
    main.innerHTML = `<h1>Not found</h1><p>No page <code>${esc(location.hash)}</code>. <a href="#/overview">Go to the overview</a>.</p>`;
    return;
  }
  try {
    const mod = await load();
    if (gen !== generation) return;
    const alive = () => gen === generation;
    const c = await mod.render(main, { ...r, alive }, ctx);
    if (gen !== generation) {
      if (typeof c === 'function') c();
      return;
    }
    cleanup = typeof c === 'function' ? c : null;
  } catch (e) {
    if (gen !== generation) return;
    if (e instanceof api.ApiError && e.status === 401) return;
    main.innerHTML = `<p class="error" role="alert">This page failed: ${esc(errText(e))}</p>`;
    console.error(e);
  }
}

window.addEventListener('hashchange', route);
route();

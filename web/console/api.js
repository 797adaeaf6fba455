// The console's only way to the server: the public HTTP API v1 with the
// bearer token of this browser tab (sessionStorage, never localStorage,
// never a URL, never a cookie).

const KEY = 'vouch.token';
const BASE = '/api/v1';

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t);
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

/** An answer that was not 2xx: `status`, `code`, `message`, `fields`. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.code) || 'http_' + status;
    this.fields = (body && body.fields) || {};
  }
}

let onUnauthorized = () => {};

/** Called when the server says 401: the token is gone or was revoked. */
export function setUnauthorizedHandler(f) {
  onUnauthorized = f;
}

function headers(extra) {
  const h = Object.assign({}, extra);
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function fail(res) {
  let body = null;
  try {
    body = await res.json();
  } catch (_) {
    body = null;
  }
  const err = new ApiError(res.status, body);
  if (res.status === 401) onUnauthorized(err);
  throw err;
}

/** One JSON request; resolves to the parsed body (null for 204). */
export async function request(method, path, body) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(BASE + path, init);
  if (!res.ok) return fail(res);
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body);
export const put = (path, body) => request('PUT', path, body);
export const del = (path) => request('DELETE', path);

/** A query string from an object, skipping empty values. */
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') p.set(k, v);
  }
  const s = p.toString();
  return s ? '?' + s : '';
}

/** The bytes of one file of a point, as a Blob (the token rides in a header). */
export async function fileBlob(point, path) {
  const res = await fetch(`${BASE}/points/${encodeURIComponent(point)}/file${qs({ path })}`, {
    headers: headers(),
  });
  if (!res.ok) return fail(res);
  return res.blob();
}

/** A report in one format, as a Blob (the token rides in a header). */
export async function reportBlob(params) {
  const res = await fetch(`${BASE}/reports${qs(params)}`, { headers: headers() });
  if (!res.ok) return fail(res);
  return res.blob();
}

/** `GET /readyz` (no auth): `{status, seq}`, or null when not ready. */
export async function ready() {
  try {
    const res = await fetch('/readyz');
    return res.ok ? res.json() : null;
  } catch (_) {
    return null;
  }
}

/**
 * Follows `GET /api/v1/events/stream` with fetch() and a stream reader
 * (EventSource cannot send the bearer token). Calls `onMessage(type, data,
 * id)` for every message, `onState('live' | 'reconnecting' | 'offline')` on
 * changes, and reconnects with `Last-Event-ID` after a drop, with backoff.
 * Returns a function that stops it.
 */
export function follow(fromSeq, onMessage, onState) {
  const ctl = new AbortController();
  let lastId = fromSeq > 0 ? String(fromSeq - 1) : null;
  let delay = 500;
  let stopped = false;

  async function once() {
    const h = headers({ Accept: 'text/event-stream' });
    let url = BASE + '/events/stream';
    if (lastId !== null) h['Last-Event-ID'] = lastId;
    const res = await fetch(url, { headers: h, signal: ctl.signal, cache: 'no-store' });
    if (!res.ok) return fail(res);
    onState('live');
    delay = 500;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { type: 'message', data: [], id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          if (ev.data.length) {
            if (ev.id !== null) lastId = ev.id;
            let data = ev.data.join('\n');
            try {
              data = JSON.parse(data);
            } catch (_) {
              /* keep the text */
            }
            try {
              onMessage(ev.type, data, ev.id);
            } catch (e) {
              console.error('event handler failed', e);
            }
          }
          ev = { type: 'message', data: [], id: null };
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? '' : line.slice(c + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'event') ev.type = v;
        else if (field === 'data') ev.data.push(v);
        else if (field === 'id') ev.id = v;
      }
    }
  }

  (async () => {
    while (!stopped) {
      try {
        await once();
      } catch (e) {
        if (stopped) break;
        // 401: signed out; 403: this role may not follow the log (agents).
        if (e instanceof ApiError && (e.status === 401 || e.status === 403)) break;
      }
      if (stopped) break;
      onState('reconnecting');
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
    onState('offline');
  })();

  return () => {
    stopped = true;
    ctl.abort();
  };
}

// Sign-in with an API token. The token is kept in this tab's sessionStorage
// only: closing the tab or signing out forgets it.

import * as api from './api.js';
import { establish } from './app.js';
import { esc, errText } from './util.js';

export async function render(main, route) {
  const next = route.query.get('next') || '#/overview';
  const expired = route.query.get('expired');
  main.innerHTML = `
<section class="signin">
  <h1>Sign in to Vouch</h1>
  ${expired ? '<p class="warning" role="alert">Your token was not accepted any more (revoked or the server was reset). Sign in again.</p>' : ''}
  <form id="signin-form" novalidate>
    <label for="token">API token</label>
    <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required aria-describedby="token-help token-error">
    <p id="token-help" class="help">The first start of <code>vouch serve</code> prints an admin token once; more are made with <code>vouch token create --name NAME --role ROLE</code>. The token stays in this browser tab only.</p>
    <p id="token-error" class="field-error" role="alert"></p>
    <button type="submit" id="signin-submit">Sign in</button>
  </form>
</section>`;
  const form = main.querySelector('#signin-form');
  const input = form.querySelector('#token');
  const err = form.querySelector('#token-error');
  input.focus();
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    err.textContent = '';
    if (!t) {
      err.textContent = 'Enter a token.';
      input.setAttribute('aria-invalid', 'true');
      return;
    }
    api.setToken(t);
    try {
      await establish();
      location.hash = next.startsWith('#/signin') ? '#/overview' : next;
    } catch (e) {
      api.clearToken();
      input.setAttribute('aria-invalid', 'true');
      err.innerHTML =
        e instanceof api.ApiError && e.status === 401
          ? 'This token is not valid on this server.'
          : esc('Cannot sign in: ' + errText(e));
    }
  });
}

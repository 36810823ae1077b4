// The token dialog and the header's login state: asking for a token (on a 401 or from the
// "Log in" button), keeping it for this tab only (sessionStorage), forgetting it.

import { $ } from './dom.js';
import { state } from './state.js';

/** Asks for a token (once: a dialog already open keeps what is being typed in it). */
export function openLogin(reason) {
  $('login-reason').textContent = reason || '';
  if ($('login').open) return;
  $('login-token').value = state.token;
  $('login').showModal();
  $('login-token').focus();
}

export function showWho() {
  $('who').textContent = state.token ? 'token set for this tab' : 'no token';
  $('login-button').textContent = state.token ? 'Change token' : 'Log in';
}

/** Keeps (or, empty, forgets) the tab's token, then calls `changed` (which reloads what the
 * token may see). */
function setToken(token, changed) {
  state.token = token;
  if (token) sessionStorage.setItem('quiver.token', token);
  else sessionStorage.removeItem('quiver.token');
  showWho();
  changed();
}

/** Wires the login button and the dialog's buttons; `changed` runs after every token change. */
export function initLogin(changed) {
  $('login-button').addEventListener('click', () => openLogin(''));
  $('login-form').addEventListener('submit', () => setToken($('login-token').value.trim(), changed));
  $('login-clear').addEventListener('click', () => {
    $('login').close();
    setToken('', changed);
  });
  $('login-cancel').addEventListener('click', () => $('login').close());
}

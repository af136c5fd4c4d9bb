// Sign-in: the user pastes an API token (`ferry` CLI users have one; an
// admin issues them with POST /v1/admin/users:token). The token is checked
// with GET /v1/whoami and kept in sessionStorage for this tab only.
import {ApiError, clearToken, setToken, whoami} from './api.js';
import {fill, h} from './dom.js';

export function mount(main, {onSignedIn}) {
  const input = h('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'off',
    spellcheck: 'false', placeholder: 'fy_…', required: true});
  const message = h('p', {class: 'message', id: 'login-message', role: 'alert'});
  const button = h('button', {type: 'submit', id: 'sign-in'}, 'Sign in');
  const form = h('form', {class: 'login', id: 'login', onsubmit: submit},
      h('h1', null, 'Sign in to the fleet dashboard'),
      h('label', {for: 'token'}, 'API token'), input, button, message,
      h('p', {class: 'hint'}, 'The token is kept in this browser tab only and sent to this ' +
        'server as a Bearer token. You see what the API lets the token see.'));

  async function submit(event) {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    button.disabled = true;
    fill(message, '');
    setToken(value);
    try {
      const me = await whoami();
      if (me.role === 'agent') {
        clearToken();
        fill(message, 'The agent identity cannot use the dashboard.');
        return;
      }
      onSignedIn(me);
    } catch (error) {
      clearToken();
      fill(message, error instanceof ApiError && error.status === 401 ?
        'The server does not accept this token.' :
        'Could not sign in: ' + (error.message || error));
    } finally {
      button.disabled = false;
    }
  }

  fill(main, form);
  input.focus();
  return {title: 'Sign in'};
}

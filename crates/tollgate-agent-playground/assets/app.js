// The playground's shell: hash routing (`#/` the runs, `#/runs/ID` one run), the API token field, and
// the prompt for a token when the server answers 401.

import { authEvents, getToken, setToken } from './api.js';
import { homeView } from './home.js';
import { runView } from './run.js';
import { clearNotices } from './ui.js';

const main = document.getElementById('main');
const tokenBox = document.getElementById('token-box');
const tokenForm = document.getElementById('token-form');
const tokenInput = document.getElementById('token');
const tokenState = document.getElementById('token-state');
const authBanner = document.getElementById('auth-banner');

let current = null;

function route() {
  const hash = location.hash || '#/';
  // Other fragments (the skip link's #main) are in-page anchors, not views.
  if (current && !hash.startsWith('#/')) return;
  current?.destroy();
  clearNotices();
  const match = /^#\/runs\/([^/?#]+)$/.exec(hash);
  current = match ? runView(main, decodeURIComponent(match[1])) : homeView(main);
}

function showTokenState() {
  const set = getToken() !== '';
  tokenState.textContent = set ? 'set' : 'not set';
  tokenState.className = set ? 'token-state is-set' : 'token-state';
  tokenInput.value = getToken();
}

tokenForm.addEventListener('submit', (event) => {
  event.preventDefault();
  setToken(tokenInput.value.trim());
  showTokenState();
  authBanner.hidden = true;
  tokenBox.open = false;
  current?.destroy();
  current = null;
  route();
});

document.getElementById('token-clear').addEventListener('click', () => {
  setToken('');
  showTokenState();
  tokenInput.focus();
});

document.getElementById('auth-open').addEventListener('click', () => {
  tokenBox.open = true;
  tokenInput.focus();
});

authEvents.addEventListener('unauthorized', () => {
  const first = authBanner.hidden;
  document.getElementById('auth-detail').textContent = getToken()
    ? 'The server refused the stored token. Enter a valid one.'
    : 'This server has auth on: enter an API token to continue.';
  authBanner.hidden = false;
  if (first) {
    tokenBox.open = true;
    tokenInput.focus();
  }
});

tokenBox.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && tokenBox.open) {
    tokenBox.open = false;
    tokenBox.querySelector('summary').focus();
  }
});

window.addEventListener('hashchange', route);
showTokenState();
route();

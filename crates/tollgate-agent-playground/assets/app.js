// The playground's shell: hash routing (`#/` the runs, `#/runs/ID` one run, `#/grants` the grants,
// `#/grants/ID` one grant), the navigation between them (its link to the section on show is marked
// `aria-current`), the API token field, and the prompt for a token when the server answers 401.
//
// Focus on a page change: a run page focuses its heading; the list focuses the link of the run you came
// from (else its heading). The first page load leaves the focus where the browser puts it.

import { authEvents, getToken, setToken } from './api.js';
import { grantsView } from './grants.js';
import { homeView } from './home.js';
import { runView } from './run.js';
import { announce, clearNotices } from './ui.js';

const main = document.getElementById('main');
const tokenBox = document.getElementById('token-box');
const tokenSummary = tokenBox.querySelector('summary');
const tokenForm = document.getElementById('token-form');
const tokenInput = document.getElementById('token');
const tokenState = document.getElementById('token-state');
const authBanner = document.getElementById('auth-banner');

let current = null;
let currentRun = null; // the id of the run on show, null on the list

function route() {
  const hash = location.hash || '#/';
  // Other fragments are in-page anchors, not views.
  if (current && !hash.startsWith('#/')) return;
  // A page change moves the focus; the first load (or a re-render after the token changed) does not.
  const focus = current !== null;
  const from = currentRun;
  current?.destroy();
  clearNotices();
  const run = /^#\/runs\/([^/?#]+)$/.exec(hash);
  const grants = /^#\/grants(?:\/([^/?#]+))?$/.exec(hash);
  currentRun = run ? decodeURIComponent(run[1]) : null;
  // The list of a section is its page; a run or a grant is in its section.
  showSection(grants ? 'grants' : 'runs', grants ? !grants[1] : !run);
  if (run) current = runView(main, currentRun, { focus });
  else if (grants) current = grantsView(main, { focus, id: grants[1] ? decodeURIComponent(grants[1]) : null });
  else current = homeView(main, { focus, from });
}

/**
 * Marks the navigation's link to the section on show (`runs`: the list and run pages; `grants`):
 * `aria-current="page"` on its list, `"true"` on one of its runs or grants.
 */
function showSection(section, list) {
  for (const link of document.querySelectorAll('.site-nav a[data-section]')) {
    if (link.dataset.section === section) link.setAttribute('aria-current', list ? 'page' : 'true');
    else link.removeAttribute('aria-current');
  }
}

// The skip link moves the focus to the content without changing the route (`#main` is no page).
document.querySelector('.skip-link').addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

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
  tokenSummary.focus();
  announce(getToken() ? 'API token saved.' : 'API token removed.');
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

// The token popup covers the page below it: it closes on Escape (focus back on its summary), when the
// focus moves out of it, and on a click elsewhere.
tokenBox.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && tokenBox.open) {
    event.preventDefault();
    tokenBox.open = false;
    tokenSummary.focus();
  }
});

tokenBox.addEventListener('focusout', (event) => {
  if (tokenBox.open && event.relatedTarget instanceof Node && !tokenBox.contains(event.relatedTarget)) tokenBox.open = false;
});

document.addEventListener('pointerdown', (event) => {
  if (tokenBox.open && !tokenBox.contains(event.target)) tokenBox.open = false;
});

window.addEventListener('hashchange', route);
showTokenState();
route();

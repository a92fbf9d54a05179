// The HTTP API of docs/api.md, as the playground calls it: JSON in and out, the token from localStorage as
// `Authorization: Bearer`, problem+json errors turned into ApiError. A 401 is also announced on
// `authEvents` so the page can ask for a token wherever the request came from.
//
// The API has no "who am I": the actor this token decides as is learned from the answers to its own
// decisions (held.js) and kept beside the token, forgotten whenever the token changes.

const TOKEN_KEY = 'tollgate.token';
const ACTOR_KEY = 'tollgate.actor';

/** Fires `unauthorized` (detail: the ApiError) whenever the server answers 401. */
export const authEvents = new EventTarget();

/** The stored API token, or "" when none is set. */
export function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

/** Stores the token (an empty string forgets it). */
export function setToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage may be disabled; the token then lasts for this page only.
  }
  memoryToken = token;
  learnActor('');
}

let memoryToken = null;
let memoryActor = null;

/** The actor this page's requests are recorded as, once a decision's answer showed it; "" until then. */
export function knownActor() {
  if (memoryActor !== null) return memoryActor;
  try {
    return localStorage.getItem(ACTOR_KEY) ?? '';
  } catch {
    return '';
  }
}

/** Remembers the actor the current token decides as ("" forgets it). */
export function learnActor(actor) {
  memoryActor = actor;
  try {
    if (actor) localStorage.setItem(ACTOR_KEY, actor);
    else localStorage.removeItem(ACTOR_KEY);
  } catch {
    // Storage may be disabled; the name then lasts for this page only.
  }
}

function token() {
  return memoryToken ?? getToken();
}

/** An absolute URL for an API path, relative to where the playground is served. */
export function apiUrl(path) {
  return new URL(path.replace(/^\//, ''), document.baseURI).toString();
}

/** The headers every API request carries. */
export function authHeaders() {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

/** A refused request: the HTTP status and the problem+json body (or what could be read of it). */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

/**
 * Calls the API.
 * @param {string} method
 * @param {string} path e.g. `v1/runs`
 * @param {unknown} [body] sent as JSON
 * @returns {Promise<any>} the parsed JSON answer (null for an empty one)
 */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json', ...authHeaders() };
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(apiUrl(path), init);
  } catch (e) {
    throw new ApiError(0, { title: 'The server cannot be reached', detail: `The server cannot be reached (${e}).` });
  }
  const text = await response.text();
  if (response.ok) return text ? JSON.parse(text) : null;
  let problem;
  try {
    problem = JSON.parse(text);
  } catch {
    problem = { title: response.statusText || `HTTP ${response.status}`, detail: text.slice(0, 300) };
  }
  const error = new ApiError(response.status, problem);
  if (response.status === 401) authEvents.dispatchEvent(new CustomEvent('unauthorized', { detail: error }));
  return Promise.reject(error);
}

/** Whether a token is set (then live events go over fetch(), which can send it). */
export function hasToken() {
  return token() !== '';
}

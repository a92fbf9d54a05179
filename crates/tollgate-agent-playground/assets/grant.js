// Grants (V2.md section 1; docs/api.md, "Grants") as the playground reads and writes them: a grant's
// `match` checked before it is sent, judged against a call's arguments (to say which waiting runs a new
// grant would likely also decide), and grants in words. No DOM: these also run under node.
//
// The judgement here is the page's, not the server's: the server matches a path argument of a workspace
// tool against the path as the tool resolves it (`notes/../x` is `x`), which a page cannot know. So the
// page says "would likely also decide", and only the server (`apply_to_waiting`) ever decides a run by it.

import { idTail, openCalls, plural } from './format.js';
import { parseJson } from './schema.js';

/** A grant as people see it named: `…3f9a2c` (the tail of its id, a UUIDv7 like run ids). */
export function grantTag(id) {
  return `…${idTail(id)}`;
}

/**
 * A glob of the policy `when` language (the protocol crate's `Glob`) as a regular expression over the
 * whole text: `?` one character but `/`, `*` any run without `/`, `**` any run, `**/` at a segment start
 * zero or more whole folders, `/**` at the end the folder itself or anything beneath; every other
 * character matches itself (no escapes, no classes).
 * @param {string} pattern
 * @returns {RegExp}
 */
export function globRegExp(pattern) {
  const chars = [...pattern];
  const parts = []; // [source, isSlash]
  let i = 0;
  while (i < chars.length) {
    const c = chars[i];
    if (c === '*') {
      const start = i;
      while (i < chars.length && chars[i] === '*') i += 1;
      if (i - start === 1) {
        parts.push(['[^/]*', false]);
        continue;
      }
      const atSegmentStart = start === 0 || chars[start - 1] === '/';
      if (i === chars.length && parts.at(-1)?.[1]) {
        parts.pop();
        parts.push(['(?:/[\\s\\S]*)?', false]);
      } else if (atSegmentStart && chars[i] === '/') {
        parts.push(['(?:[\\s\\S]*/)?', false]);
        i += 1;
      } else {
        parts.push(['[\\s\\S]*', false]);
      }
      continue;
    }
    if (c === '?') parts.push(['[^/]', false]);
    else parts.push([c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'), c === '/']);
    i += 1;
  }
  return new RegExp(`^${parts.map(([source]) => source).join('')}$`, 'u');
}

/** Whether the glob `pattern` matches the whole of `text`. */
export function globMatches(pattern, text) {
  return globRegExp(pattern).test(text);
}

/**
 * The value at a JSON pointer (RFC 6901) in `value`: `{found: true, value}`, or `{found: false}`.
 * @param {unknown} value
 * @param {string} pointer `""` (the whole value) or `/a/b` (`~1` is `/`, `~0` is `~` in a segment)
 */
export function pointerGet(value, pointer) {
  if (pointer === '') return { found: true, value };
  let here = value;
  for (const raw of pointer.slice(1).split('/')) {
    const key = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(here)) {
      if (!/^(0|[1-9]\d*)$/.test(key) || Number(key) >= here.length) return { found: false };
      here = here[Number(key)];
    } else if (here !== null && typeof here === 'object' && Object.hasOwn(here, key)) {
      here = here[key];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: here };
}

/** JSON equality: the same value whatever the order of an object's keys. */
export function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
}

/** True for a JSON pointer: empty, or `/` and segments whose `~` is followed by `0` or `1`. */
export function isJsonPointer(text) {
  return text === '' || (text.startsWith('/') && !/~(?![01])/.test(text));
}

/**
 * Whether a grant `match` allows a call with `args`, as the page can judge it: each pointer's string
 * pattern is a glob over the string there (a missing or non-string value never matches), any other value
 * must be equal; `{}` matches any arguments. Path arguments are read as spelled, not resolved.
 * @param {Record<string, unknown>} pattern
 * @param {unknown} args
 */
export function matchesArguments(pattern, args) {
  return Object.entries(pattern).every(([pointer, expected]) => {
    const at = pointerGet(args, pointer);
    if (!at.found) return false;
    if (typeof expected === 'string') return typeof at.value === 'string' && globMatches(expected, at.value);
    return jsonEqual(expected, at.value);
  });
}

/**
 * Everything wrong with the text of a grant's pattern, in the order a person fixes it: JSON syntax, an
 * object, each key a JSON pointer.
 * @param {string} text
 * @returns {{value: unknown, problems: string[]}}
 */
export function checkPattern(text) {
  const parsed = parseJson(text);
  if (!parsed.ok) return { value: undefined, problems: [parsed.error.message.replace('the arguments', 'the pattern')] };
  const value = parsed.value;
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { value, problems: ['The pattern must be a JSON object: {"/pointer": "glob"}, or {} for any arguments.'] };
  }
  const problems = Object.keys(value)
    .filter((key) => !isJsonPointer(key))
    .map((key) => `${JSON.stringify(key)} is not a JSON pointer: a pointer is empty or starts with "/" (write ~0 for ~ and ~1 for / inside a key).`);
  return { value, problems };
}

/**
 * Why an expiry is refused, or null when it reads like the server's durations: a whole number and a unit,
 * `30m`, `8h`, `7d` (`s`, `m`, `h`, `d`). The server checks it against its `max_ttl` too.
 * @param {string} text
 */
export function ttlProblem(text) {
  const t = text.trim();
  if (t === '') return 'Say how long it lasts: a number and s, m, h or d (30m, 8h, 7d).';
  if (!/^\d{1,14}[smhd]$/.test(t)) return `"${t}" is not a duration: write a whole number and s, m, h or d, such as 30m, 8h or 7d.`;
  if (/^0+[smhd]$/.test(t)) return 'A grant must last longer than 0.';
  return null;
}

/**
 * Whether a grant for `tool` with `pattern` would likely decide the waiting run `run`: every call of its
 * held turn that takes a decision is a call of that tool a grant may allow (it has a `suggested_match`:
 * not in doubt, not a quorum call, not kept from grants by policy) whose arguments match.
 * @param {{status: string, pending?: {calls: object[]}|null}} run
 */
export function wouldDecide(run, tool, pattern) {
  if (run.status !== 'waiting_for_approval') return false;
  const open = openCalls(run.pending);
  return (
    open.length > 0 &&
    open.every((c) => c.tool === tool && !c.in_doubt && !c.approvals && c.suggested_match && matchesArguments(pattern, c.arguments))
  );
}

/** A grant's `match` in words, one `pointer → pattern` per entry: `/path → notes/*`; `{}` is any arguments. */
export function matchLines(pattern) {
  const entries = Object.entries(pattern ?? {});
  if (entries.length === 0) return ['any arguments'];
  return entries.map(([pointer, value]) => `${pointer || '(the whole arguments)'} → ${typeof value === 'string' ? value : JSON.stringify(value)}`);
}

/**
 * Where a grant stands at `now`: `active`, `revoked` (revoked beats expired) or `expired`.
 * @param {{revoked_at?: string|null, expires_at: string}} grant
 * @param {number} now milliseconds since the epoch
 */
export function grantState(grant, now) {
  if (grant.revoked_at) return 'revoked';
  return Date.parse(grant.expires_at) <= now ? 'expired' : 'active';
}

/** What a grant allows, in one phrase: `fs_write calls of keeper matching /path → notes/*`. */
export function grantSummary(grant) {
  const what = Object.keys(grant.match ?? {}).length === 0 ? ' (any arguments)' : ` matching ${matchLines(grant.match).join(', ')}`;
  const where = grant.scope === 'run' ? ` in run …${idTail(grant.run_id ?? '')}` : '';
  return `${grant.tool} calls of ${grant.agent}${what}${where}`;
}

/**
 * What the page says after a grant was made with `apply_to_waiting`, which waiting runs it approved:
 * `It approved 2 other waiting runs: …3f9a2c, …77b01e. It approved this run too.`
 * @param {{applied_to?: string[]}} grant
 * @param {string} runId the run on show (approved by the grant, or by the person next)
 */
export function appliedText(grant, runId) {
  const applied = grant.applied_to ?? [];
  const others = applied.filter((id) => id !== runId);
  const here = applied.includes(runId) ? ' It approved this run too.' : '';
  const said = others.length
    ? `It approved ${plural(others.length, 'other waiting run')}: ${others.map((id) => `…${idTail(id)}`).join(', ')}.`
    : 'It approved no other waiting run.';
  return `${said}${here}`;
}

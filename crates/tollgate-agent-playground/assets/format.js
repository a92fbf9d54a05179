// Text helpers: relative times, previews as diffs, short ids. No DOM: these also run under node.

/**
 * A short relative duration: "just now", "42 s", "5 min", "3 h", "2 d".
 * @param {number} ms a duration in milliseconds (its sign is ignored)
 */
export function duration(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.round(m / 60);
  if (h < 48) return `${h} h`;
  return `${Math.round(h / 24)} d`;
}

/**
 * "5 min ago" for a past time, "in 3 h" for a future one, relative to `now`.
 * @param {string} iso an RFC 3339 time
 * @param {number} now milliseconds since the epoch
 */
export function relative(iso, now) {
  const delta = Date.parse(iso) - now;
  if (Number.isNaN(delta)) return iso;
  const text = duration(delta);
  if (text === 'just now') return text;
  return delta < 0 ? `${text} ago` : `in ${text}`;
}

/** The first block of a UUID, enough to tell runs apart on one screen. */
export function shortId(id) {
  return String(id).split('-')[0];
}

/** True when a tool's preview is a unified diff (`--- a/x` / `+++ b/x` / `@@ … @@`). */
export function isUnifiedDiff(text) {
  return typeof text === 'string' && /^--- .*\n\+\+\+ .*\n/m.test(text) && /^@@ /m.test(text);
}

/**
 * The lines of a preview, each with how to show it: `add`, `del`, `hunk`, `file` (the ---/+++ headers),
 * `note` (`\ No newline at end of file`) or `context`.
 * @param {string} text
 * @returns {{kind: string, text: string}[]}
 */
export function diffLines(text) {
  const lines = text.replace(/\n$/, '').split('\n');
  let inHunk = false;
  return lines.map((line) => {
    if (line.startsWith('@@')) {
      inHunk = true;
      return { kind: 'hunk', text: line };
    }
    if (!inHunk && (line.startsWith('--- ') || line.startsWith('+++ '))) return { kind: 'file', text: line };
    if (line.startsWith('\\')) return { kind: 'note', text: line };
    if (line.startsWith('+')) return { kind: 'add', text: line };
    if (line.startsWith('-')) return { kind: 'del', text: line };
    return { kind: 'context', text: line };
  });
}

/** Pretty JSON for people: two-space indent. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

/** One-line summary of a tool call's arguments: `path: "a.txt", content: "hi"`, cut to `max` characters. */
export function summarize(args, max = 120) {
  let text;
  if (args && typeof args === 'object' && !Array.isArray(args)) {
    text = Object.entries(args)
      .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
      .join(', ');
  } else {
    text = JSON.stringify(args) ?? '';
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * The calls of a held turn (`run.pending.calls`) that take a decision now. The server says which
 * (`takes_decision`, with `state`); nothing here re-derives it from `gate` or `in_doubt`.
 * @param {{calls?: object[]}|null|undefined} pending
 */
export function openCalls(pending) {
  return (pending?.calls ?? []).filter((call) => call.takes_decision === true);
}

/**
 * Why a held call that takes no decision and has none recorded gets no buttons, in words.
 * @param {{state: string}} call
 */
export function settledNote(call) {
  switch (call.state) {
    case 'finished':
      return 'It ran to its end before a crash: its result stands. It takes no decision and will not run again.';
    case 'refused':
      return 'Refused before any gate: it will not run, and the model gets an error for it.';
    case 'allowed':
      return 'Allowed by its gate: it runs together with the approved calls once every call is decided.';
    default:
      return '';
  }
}

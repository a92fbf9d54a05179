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

/** The first block of a UUID. Run ids are UUIDv7, whose first block is a time: use `runTag` for people. */
export function shortId(id) {
  return String(id).split('-')[0];
}

/**
 * The last `length` hex digits of an id. Run ids are UUIDv7: runs started close together share their
 * leading (time) digits, while the tail is random, so the tail is what tells them apart.
 */
export function idTail(id, length = 6) {
  return String(id).replaceAll('-', '').slice(-length);
}

/** A run as people see it named: `…3f9a2c` (the tail of its id). */
export function runTag(id) {
  return `…${idTail(id)}`;
}

/**
 * Text on one line (runs of whitespace as one space), cut to `max` characters with `…` when longer.
 * U+FEFF counts as whitespace to `\s` but is no space a person sees: it stays, to be marked (dom.js).
 */
export function truncate(text, max) {
  const chars = [...String(text ?? '').replace(/(?:(?!\uFEFF)\s)+/g, ' ').replace(/^ | $/g, '')];
  return chars.length > max ? `${chars.slice(0, max - 1).join('').trimEnd()}…` : chars.join('');
}

/** "1 call", "2 calls". */
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/**
 * The accessible name of a link to a run, which tells runs apart: `Run …3f9a2c: hello from the browser`
 * (the input cut to `max` characters).
 * @param {{id: string, input?: string}} run
 */
export function runLinkName(run, max = 40) {
  const input = truncate(run.input, max);
  return input ? `Run ${runTag(run.id)}: ${input}` : `Run ${runTag(run.id)}`;
}

const STATUS_WORDS = {
  queued: 'queued',
  running: 'running',
  waiting_for_approval: 'waiting for approval',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
  expired: 'expired',
};

/** Every run status of docs/api.md, in lifecycle order. */
export const STATUS_NAMES = Object.keys(STATUS_WORDS);

/** A run status in words: `waiting for approval`. */
export function statusText(status) {
  return STATUS_WORDS[status] ?? String(status).replaceAll('_', ' ');
}

/** Who an escalation told (`notified`: notifier names), in words: `ops, oncall`; `nobody` for none. */
export function notifiedText(notified) {
  const names = Array.isArray(notified) ? notified.map(String) : [];
  return names.length ? names.join(', ') : 'nobody';
}

/**
 * A run's state in one sentence, as the live region says it when the run page opens or the run's status
 * changes: `Run …3f9a2c waiting for approval, 2 calls to decide`, `Run …3f9a2c completed: done`; a
 * waiting run whose turn was escalated adds it: `…, 2 calls to decide. Escalated: notified ops, oncall`.
 */
export function runSummary(run) {
  const name = `Run ${runTag(run.id)}`;
  switch (run.status) {
    case 'waiting_for_approval': {
      const n = openCalls(run.pending).length;
      const escalated = run.pending?.escalated ? `. Escalated: notified ${notifiedText(run.pending.escalated.notified)}` : '';
      return `${name} waiting for approval, ${n === 0 ? 'every call decided' : `${plural(n, 'call')} to decide`}${escalated}`;
    }
    case 'completed':
      return run.output ? `${name} completed: ${truncate(run.output, 120)}` : `${name} completed`;
    case 'failed':
      return run.error?.message ? `${name} failed: ${truncate(run.error.message, 120)}` : `${name} failed`;
    default:
      return `${name} ${statusText(run.status)}`;
  }
}

/** How each decision action reads in the past tense. */
export const ACTION_WORDS = {
  approve: 'Approved',
  deny: 'Denied',
  edit: 'Approved with edited arguments',
  respond: 'Answered in the tool’s place',
};

/**
 * What a decision did, for the live region: `Denied: fs_write call_1. 1 call left to decide.`; an approval
 * with `remember` (a grant made with it) is `Approved and remembered: fs_write call_1.`
 * @param {object} body the decisions request (`decisions`, or `approve_all` / `deny_all`)
 * @param {{call_id: string, tool: string, approvals?: object}[]} open the calls the request acted on,
 *   as they stood before it
 * @param {number} left how many calls this person can still decide after it
 * @param {{call_id: string, tool: string, approvals: object}[]} [waiting] the quorum calls this person
 *   approved that still wait for other approvers after it (with their approvals after it)
 */
export function decisionAnnouncement(body, open, left, waiting = []) {
  const tools = new Map(open.map((c) => [c.call_id, c.tool]));
  let done;
  const all = open.length === 1 ? '1 call' : `all ${open.length} calls`;
  if (body.approve_all) done = `Approved ${all}.`;
  else if (body.deny_all) done = `Denied ${all}.`;
  else {
    done = (body.decisions ?? [])
      .map((d) => `${d.remember ? 'Approved and remembered' : (ACTION_WORDS[d.action] ?? d.action)}: ${tools.get(d.call_id) ?? 'tool'} ${d.call_id}.`)
      .join(' ');
  }
  if (waiting.length === 0) {
    return `${done} ${left === 0 ? 'Every call is decided; the run resumes.' : `${plural(left, 'call')} left to decide.`}`;
  }
  const counts = waiting
    .map((c) => `${c.tool ?? tools.get(c.call_id) ?? 'tool'} ${c.call_id} has ${(c.approvals?.given ?? []).length} of ${c.approvals?.required} approvals`)
    .join(', ');
  const others = `${counts}, waiting for another approver.`;
  return left === 0 ? `${done} Your approval is in: ${others}` : `${done} ${plural(left, 'call')} left to decide. ${others}`;
}

/**
 * A quorum call's approvals (`calls[].approvals`, or a `decision` event's `approvals`) in words:
 * `1 of 2 approvals — alice. Needs 1 more.`; `0 of 2 approvals. Needs 2.`; `2 of 2 approvals — alice, bob.`
 * Null for a call one decision settles (`approvals` null or absent).
 * @param {{required: number, given?: string[]}|null|undefined} approvals
 * @param {{open?: boolean}} [options] `open`: the call still takes approvals, so say how many are
 *   missing (a denied call's count says only who approved)
 */
export function approvalsText(approvals, { open = true } = {}) {
  if (!approvals || typeof approvals.required !== 'number') return null;
  const given = Array.isArray(approvals.given) ? approvals.given : [];
  const who = given.length ? ` — ${given.join(', ')}` : '';
  const missing = Math.max(0, approvals.required - given.length);
  const needs = open && missing > 0 ? ` Needs ${missing}${given.length ? ' more' : ''}.` : '';
  return `${given.length} of ${approvals.required} approvals${who}.${needs}`;
}

/**
 * Why a quorum call offers only approve and deny: `Needs 2 approvals from different people: approve or
 * deny only.`
 */
export function quorumHint(approvals) {
  return `Needs ${approvals.required} approvals from different people: approve or deny only.`;
}

/**
 * Whether this person's approval of a quorum call is already in: they approved it on this page
 * (`approvedHere`, call ids), or their actor name (`actor`, when known) is among its approvals.
 * @param {{call_id: string, approvals?: object|null}} call
 */
export function approvedBy(call, actor, approvedHere = new Set()) {
  if (!call.approvals) return false;
  return approvedHere.has(call.call_id) || (Boolean(actor) && (call.approvals.given ?? []).includes(actor));
}

/**
 * The held panel's heading and its summary sentence. `mine`: the call ids of quorum calls whose approval
 * by this person is in (they still take a decision, from other people).
 * @param {{calls: object[], expires_at?: string|null}} pending
 * @param {Set<string>} mine
 * @returns {{heading: string, text: string}}
 */
export function heldSummary(pending, mine = new Set()) {
  const open = openCalls(pending);
  const waiting = open.filter((c) => mine.has(c.call_id));
  const yours = open.length - waiting.length;
  const deadline = pending.expires_at ? ` Deadline: ${new Date(pending.expires_at).toLocaleString()}.` : '';
  const ran = pending.calls.filter((c) => c.state === 'finished').length;
  const sofar = ran === 0 ? 'Nothing of this turn has run yet.' : `${ran} call(s) already ran before a crash.`;
  if (open.length === 0) return { heading: 'Waiting for a decision', text: `Every call is decided; the run resumes.${deadline}` };
  const others = waiting
    .map((c) => {
      const missing = Math.max(0, c.approvals.required - (c.approvals.given ?? []).length);
      return `${c.tool} ${c.call_id} needs ${missing} more approval${missing === 1 ? '' : 's'}`;
    })
    .join('; ');
  if (yours === 0) {
    return {
      heading: 'Waiting for another approver',
      text: `Your approval is in. The run waits for someone else to approve: ${others}.${deadline}`,
    };
  }
  const also = waiting.length ? ` Your approval is in on ${plural(waiting.length, 'call')}, which wait${waiting.length === 1 ? 's' : ''} for another approver (${others}).` : '';
  return {
    heading: 'Waiting for a decision',
    text: `${yours} of ${pending.calls.length} call(s) need your decision.${also} ${sofar}${deadline}`,
  };
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

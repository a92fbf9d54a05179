// Small pieces shared by the views: notices, the live region, focus moves, status badges, times that
// stay current, previews.

import { h, uid } from './dom.js';
import { diffLines, isUnifiedDiff, notifiedText, pretty, relative, STATUS_NAMES, statusText } from './format.js';
import { grantTag } from './grant.js';
import { markedText } from './invisible.js';

/** Every run status of docs/api.md, in lifecycle order. */
export const STATUSES = STATUS_NAMES;

/** A run status as a coloured badge. */
export function statusBadge(status) {
  return h(`span.badge.status-${status}`, { text: statusText(status) });
}

/**
 * A held turn's escalation (`pending.escalated`, V2 §4) as one line: an `escalated` badge, then how long
 * the turn waited (`after`, from its `approval_escalated` event, when known), when it was escalated
 * (relative, the exact time on hover) and the notifiers told — `escalated after 1h · 5 min ago · notified
 * ops, oncall`. The words are the line's text, so a screen reader (and a link holding it, whose name is
 * its text) says them as they are drawn; the names are the server's, put in as text (dom.js).
 * @param {{at: string, notified?: string[]}} escalated
 * @param {{after?: string|null, tag?: string}} [options] `tag`: the element (`p`; `span` inside a link)
 */
export function escalationNote(escalated, { after = null, tag = 'p' } = {}) {
  return h(
    `${tag}.escalation`,
    null,
    h('span.badge.escalated', { text: 'escalated' }),
    ' ',
    after ? `after ${after} · ` : null,
    timeEl(escalated.at),
    ' · notified ',
    h('span.notified', { text: notifiedText(escalated.notified) }),
  );
}

/** A time shown relative to now ("5 min ago", "in 3 h"), kept current, with the exact time on hover. */
export function timeEl(iso, prefix = '') {
  if (!iso) return h('span', { text: '—' });
  const el = h('time', { datetime: iso, title: new Date(iso).toLocaleString(), dataset: { rel: iso, prefix } });
  el.textContent = prefix + relative(iso, Date.now());
  return el;
}

setInterval(() => {
  const now = Date.now();
  for (const el of document.querySelectorAll('time[data-rel]')) {
    el.textContent = (el.dataset.prefix ?? '') + relative(el.dataset.rel, now);
  }
}, 5000);

/** A JSON string literal (its escapes included). */
const JSON_STRING = /"(?:[^"\\]|\\.)*"/g;

/**
 * Pretty-printed JSON in a code block. Each string literal is its own left-to-right isolate
 * (`span.json-str`), so right-to-left text in one value cannot reorder the keys, quotes and commas
 * around it; invisible and direction-changing characters are marked (dom.js).
 */
export function jsonBlock(value, label) {
  const text = pretty(value) ?? '';
  const pieces = [];
  let from = 0;
  for (const match of text.matchAll(JSON_STRING)) {
    pieces.push(text.slice(from, match.index), h('span.json-str', { dir: 'ltr' }, match[0]));
    from = match.index + match[0].length;
  }
  pieces.push(text.slice(from));
  return h('pre.code.json', { 'aria-label': label ?? null, dir: 'ltr' }, h('code', null, pieces.filter((p) => p !== '')));
}

/**
 * A tool's preview: a unified diff with added and removed lines coloured, or plain text. A diff's lines do
 * not wrap, so it may be wider than its box (a phone): it scrolls sideways inside it, as a named region in
 * the tab order (the keyboard scrolls it too), and while it is wider a shade on the side that has more and
 * a line under it ("Scroll sideways →") say so (`scrollCue`).
 */
export function previewBlock(text, label = 'Preview') {
  if (text === null || text === undefined || text === '') return h('p.muted', { text: 'No preview.' });
  if (!isUnifiedDiff(text)) return h('pre.code.preview', { 'aria-label': label, dir: 'ltr' }, h('code', { text }));
  const lines = diffLines(text).map(({ kind, text: line }) => {
    const sign = { add: 'added', del: 'removed' }[kind];
    return h(`span.diff-line.diff-${kind}`, sign ? { title: `${sign} line` } : null, line);
  });
  const hint = h('p.scroll-hint', { id: uid('scroll-hint'), hidden: true });
  const diff = h(
    'pre.code.diff',
    { role: 'region', tabindex: '0', 'aria-label': `${label} (unified diff)`, 'aria-describedby': hint.id, dir: 'ltr' },
    h('code', null, lines),
  );
  const shade = h('div.scroll-shade', { dataset: { more: '' } }, diff);
  scrollCue(shade, diff, hint);
  return h('div.scroll-area', null, shade, hint);
}

/**
 * Keeps the cue of a box that scrolls sideways current, on every resize and scroll of `scroller`: `shade`
 * gets `data-more` naming the sides with more to see (`left`, `right`, both, or empty), which draw a
 * shadow on those edges (style.css), and `hint` is shown, saying which way, while the box is wider than
 * its room.
 */
function scrollCue(shade, scroller, hint) {
  const update = () => {
    const hidden = scroller.scrollWidth - scroller.clientWidth;
    const left = scroller.scrollLeft > 1;
    const right = hidden - scroller.scrollLeft > 1;
    const more = [left && 'left', right && 'right'].filter(Boolean).join(' ');
    if (shade.dataset.more !== more) shade.dataset.more = more;
    // Empty while it fits: the region's description (aria-describedby) is then empty too.
    let text = '';
    if (right) text = 'Wider than the screen: scroll sideways →';
    else if (left) text = '← Scroll back for the start of the lines';
    if (hint.textContent !== text) hint.textContent = text;
    hint.hidden = text === '';
  };
  new ResizeObserver(update).observe(scroller);
  scroller.addEventListener('scroll', update, { passive: true });
}

/**
 * A link to a grant's own page (`#/grants/ID`), drawn `grant …3f9a2c` and named by its whole id, for the
 * calls and decisions of a run page that a grant allowed or made.
 */
export function grantLink(id) {
  return h(
    'a.grant-link',
    { href: `#/grants/${encodeURIComponent(id)}`, title: `Grant ${id}`, dataset: { grantId: id } },
    'grant ',
    h('code', { text: grantTag(id) }),
  );
}

const notices = () => document.getElementById('notices');

/**
 * Shows a message at the top of the page until dismissed or the page changes. An error is an alert; any
 * other message is said by the live region (`announce`), so it is heard once.
 * @param {string} text
 * @param {{kind?: 'info'|'success'|'error', title?: string, action?: Node}} [options]
 */
export function notify(text, { kind = 'info', title, action } = {}) {
  const close = h('button.link.dismiss', { type: 'button', 'aria-label': 'Dismiss this message', text: '×' });
  const box = h(
    `div.notice.notice-${kind}`,
    { role: kind === 'error' ? 'alert' : null },
    h('div.notice-text', null, title ? h('strong', { text: title }) : null, title ? ' ' : null, text, action ? ' ' : null, action),
    close,
  );
  close.addEventListener('click', () => {
    // The focus was in the message: give it to a neighbouring message, else to the page.
    const neighbour = box.nextElementSibling ?? box.previousElementSibling;
    const hadFocus = box.contains(document.activeElement);
    box.remove();
    if (hadFocus) focusEl(neighbour?.querySelector('button.dismiss') ?? pageHeading());
  });
  notices()?.append(box);
  if (kind !== 'error') announce(title ? `${title} ${text}` : text);
  return box;
}

/** Removes every message (on navigation). */
export function clearNotices() {
  notices()?.replaceChildren();
}

let pending = [];
let timer = null;

/**
 * Says `text` through the page's one polite live region (`#announcer`, visually hidden). Messages that
 * come within a moment of each other are said together, in order; the region is emptied first so the
 * same words twice are said twice.
 */
export function announce(text) {
  const region = document.getElementById('announcer');
  if (!region || !text) return;
  // Heard, not seen; but a screen reader skips an invisible character too, so it hears the mark.
  const said = markedText(text);
  pending.push(/[.!?…]$/.test(said) ? said : `${said}.`);
  if (timer) return;
  region.textContent = '';
  timer = setTimeout(() => {
    region.textContent = pending.join(' ');
    pending = [];
    timer = null;
  }, 150);
}

/** Focuses `el` (when it is still on the page); true when it now has the focus. */
export function focusEl(el, options) {
  if (!el?.isConnected) return false;
  el.focus(options);
  return document.activeElement === el;
}

/**
 * True when the focus is nowhere useful: on `<body>` (its element went away), or still on an element
 * that left the page or is hidden.
 */
export function focusLost() {
  const el = document.activeElement;
  return !el || el === document.body || !el.isConnected || el.getClientRects().length === 0;
}

/** The heading of the page on show that takes the focus when nothing better is left: run page h1, inbox. */
export function pageHeading() {
  return document.querySelector('#main [data-page-heading]') ?? document.getElementById('main');
}

// Small pieces shared by the views: notices, status badges, times that stay current, previews.

import { h } from './dom.js';
import { diffLines, isUnifiedDiff, pretty, relative } from './format.js';

const STATUS_LABELS = {
  queued: 'queued',
  running: 'running',
  waiting_for_approval: 'waiting for approval',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
  expired: 'expired',
};

/** Every run status of docs/api.md, in lifecycle order. */
export const STATUSES = Object.keys(STATUS_LABELS);

/** A run status as a coloured badge. */
export function statusBadge(status) {
  return h(`span.badge.status-${status}`, { text: STATUS_LABELS[status] ?? status });
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

/** Pretty-printed JSON in a code block. */
export function jsonBlock(value, label) {
  return h('pre.code', { 'aria-label': label ?? null }, h('code', { text: pretty(value) }));
}

/** A tool's preview: a unified diff with added and removed lines coloured, or plain text. */
export function previewBlock(text, label = 'Preview') {
  if (text === null || text === undefined || text === '') return h('p.muted', { text: 'No preview.' });
  if (!isUnifiedDiff(text)) return h('pre.code.preview', { 'aria-label': label }, h('code', { text }));
  const lines = diffLines(text).map(({ kind, text: line }) => {
    const sign = { add: 'added', del: 'removed' }[kind];
    return h(`span.diff-line.diff-${kind}`, sign ? { title: `${sign} line` } : null, line);
  });
  return h('pre.code.diff', { 'aria-label': `${label} (unified diff)` }, h('code', null, lines));
}

const notices = () => document.getElementById('notices');

/**
 * Shows a message at the top of the page until dismissed or the page changes.
 * @param {string} text
 * @param {{kind?: 'info'|'success'|'error', title?: string, action?: Node}} [options]
 */
export function notify(text, { kind = 'info', title, action } = {}) {
  const close = h('button.link.dismiss', { type: 'button', 'aria-label': 'Dismiss this message', text: '×' });
  const box = h(
    `div.notice.notice-${kind}`,
    { role: kind === 'error' ? 'alert' : 'status' },
    h('div.notice-text', null, title ? h('strong', { text: title }) : null, title ? ' ' : null, text, action ? ' ' : null, action),
    close,
  );
  close.addEventListener('click', () => box.remove());
  notices()?.append(box);
  return box;
}

/** Removes every message (on navigation). */
export function clearNotices() {
  notices()?.replaceChildren();
}

// Issue #17: the playground on phones, for assistive technology and from the keyboard alone — in a real
// headless Chromium (playwright-core) against a running `tollgate serve` started by tests/browser.rs.
//
//   BASE_URL        the server (no auth); agents `scribe` (two ask-gated fs_write calls: a.txt, and b.txt,
//                   which exists, so its preview is a diff), `clerk` (three: c.txt, d.txt, e.txt) and
//                   `trickster` (a shell call and an fs_write holding direction-changing characters) and
//                   `pair` (one fs_write whose policy says `approvals = 2`: a quorum call) and `keeper` (one
//                   fs_write into kept/, whose suggested grant is kept/*: "Approve and remember…") and
//                   `watcher` (two fs_write calls; a turn of it held a second is escalated, V2 §4)
//   WORKSPACE       that server's workspace folder (to check the files on disk)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   PLAYWRIGHT_CORE the playwright-core package folder (default .ci/npm/node_modules/playwright-core)
//   AXE_CORE        the axe-core package folder (default .ci/npm/node_modules/axe-core)
//
// The checks are the specification: each one collects every problem it finds (which element, at which
// width, where the focus was) and fails once with the whole list.
//
// Run: node --test crates/tollgate-agent-playground/e2e/access.test.mjs

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT_CORE ?? join(repo, '.ci/npm/node_modules/playwright-core'));
const AXE = join(process.env.AXE_CORE ?? join(repo, '.ci/npm/node_modules/axe-core'), 'axe.min.js');

const BASE_URL = process.env.BASE_URL;
const WORKSPACE = process.env.WORKSPACE;
assert.ok(BASE_URL, 'BASE_URL must name a running tollgate serve');

/** Widths a phone, a small phone and a tablet have (CSS px). */
const VIEWPORTS = [
  { width: 390, height: 844 },
  { width: 768, height: 1024 },
  { width: 320, height: 640 },
];
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };
const AXE_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];
const MIN_TARGET = 24;

/** Inputs a person might paste: an unbroken URL, a long path, long prose, one long token. */
const LONG_INPUTS = [
  `Summarise https://example.com/reports/${'quarterly-figures-'.repeat(8)}final.pdf?download=${'x'.repeat(40)}`,
  `Rename every file under /srv/projects/tollgate/crates/tollgate-agent-playground/assets/generated/${'nested/'.repeat(10)}output to lower case`,
  `A long request in plain words: ${'please read the notes, check the numbers and write a short summary of what changed; '.repeat(4)}`,
  `Token_${'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'.repeat(4)}`,
];

let browser;
const runs = { waiting: null, completed: null, fitting: null, marked: null, quorum: null, keeper: null, keeperKeys: null, grant: null, escalated: null };

// ------------------------------------------------------------------------------------------ the API

async function call(method, path, body) {
  const response = await fetch(new URL(path, BASE_URL), {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: HTTP ${response.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

async function waitForStatus(id, status) {
  const deadline = Date.now() + 15_000;
  let run;
  while (Date.now() < deadline) {
    run = await call('GET', `v1/runs/${id}`);
    if (run.status === status) return run;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`run ${id} did not reach ${status} within 15 s (it is ${run?.status})`);
}

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  // Several runs of scribe with long inputs, all at the gate; the first one then approved to the end.
  const started = [];
  for (const input of LONG_INPUTS) started.push(await call('POST', 'v1/runs', { agent: 'scribe', input }));
  // And one with a short input, whose diff of b.txt fits a phone (held before any run rewrites b.txt).
  const fitting = await call('POST', 'v1/runs', { agent: 'scribe', input: 'fits' });
  runs.fitting = (await waitForStatus(fitting.id, 'waiting_for_approval')).id;
  const waiting = [];
  for (const run of started) waiting.push(await waitForStatus(run.id, 'waiting_for_approval'));
  await call('POST', `v1/runs/${waiting[0].id}/decisions`, { turn_digest: waiting[0].pending.turn_digest, approve_all: true });
  runs.completed = (await waitForStatus(waiting[0].id, 'completed')).id;
  runs.waiting = waiting[1].id;
  // Issue 31: a run of trickster, whose held calls hold direction-changing characters (drawn as marks).
  const marked = await call('POST', 'v1/runs', { agent: 'trickster', input: 'tidy up' });
  runs.marked = (await waitForStatus(marked.id, 'waiting_for_approval')).id;
  // V2 §4: a run of pair whose quorum call has one approval of two (by `local`), so it still waits.
  const pair = await waitForStatus((await call('POST', 'v1/runs', { agent: 'pair', input: 'two keys' })).id, 'waiting_for_approval');
  const [quorum] = pair.pending.calls;
  await call('POST', `v1/runs/${pair.id}/decisions`, {
    turn_digest: pair.pending.turn_digest,
    decisions: [{ call_id: quorum.call_id, action: 'approve' }],
  });
  runs.quorum = pair.id;
  // V2 §1: two waiting runs of keeper (the remember form; the keyboard walk), a grant in force whose
  // pattern no run of keeper matches (so none passes by it) with a long unbroken reason, and a revoked one
  // with a long pattern, for the Grants page.
  runs.keeper = (await waitForStatus((await call('POST', 'v1/runs', { agent: 'keeper', input: 'remember me' })).id, 'waiting_for_approval')).id;
  runs.keeperKeys = (await waitForStatus((await call('POST', 'v1/runs', { agent: 'keeper', input: 'keys' })).id, 'waiting_for_approval')).id;
  runs.grant = (await call('POST', 'v1/grants', { agent: 'keeper', tool: 'fs_write', match: { '/path': 'never/*' }, ttl: '7d', reason: LONG_INPUTS[3] })).id;
  const past = await call('POST', 'v1/grants', {
    agent: 'keeper',
    tool: 'fs_write',
    match: { '/path': `kept/${'deeply-nested-folder/'.repeat(8)}*.txt`, '/content': LONG_INPUTS[0] },
    scope: 'run',
    run_id: runs.keeper,
    ttl: '1h',
  });
  await call('DELETE', `v1/grants/${past.id}`);
  // V2 §4: a waiting run of watcher, escalated by the server's sweep once held a second (its notifiers'
  // messages go nowhere, which holds up nothing).
  const watcher = await call('POST', 'v1/runs', { agent: 'watcher', input: LONG_INPUTS[1] });
  const deadline = Date.now() + 20_000;
  while (!(await call('GET', `v1/runs/${watcher.id}`)).pending?.escalated) {
    if (Date.now() > deadline) throw new Error(`run ${watcher.id} of watcher was not escalated within 20 s`);
    await new Promise((r) => setTimeout(r, 150));
  }
  runs.escalated = watcher.id;
});

after(async () => {
  await browser?.close();
});

// ------------------------------------------------------------------------------------------ the page

/**
 * Functions every page gets (window.__a11y), so the checks below describe elements the same way:
 * `describe(el)` as `tag#id.class "name" (in call_2)`, `name(el)` its accessible name.
 */
function installHelpers() {
  const squash = (s) => (s ?? '').replace(/\s+/g, ' ').trim();
  const short = (s, n = 50) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
  const controls = new Set(['INPUT', 'SELECT', 'TEXTAREA']);
  function name(el) {
    const label = squash(el.getAttribute('aria-label'));
    if (label) return label;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const text = squash(by.split(/\s+/).map((id) => document.getElementById(id)?.textContent ?? '').join(' '));
      if (text) return text;
    }
    if (el.labels?.length) {
      const text = squash([...el.labels].map((l) => l.textContent).join(' '));
      if (text) return text;
    }
    if (!controls.has(el.tagName)) {
      const text = squash(el.innerText || el.textContent) || squash([...el.querySelectorAll('img[alt]')].map((i) => i.alt).join(' '));
      if (text) return text;
    }
    return squash(el.getAttribute('title'));
  }
  function tag(el) {
    let s = el.tagName.toLowerCase();
    if (el.id) s += `#${el.id}`;
    const classes = [...el.classList].slice(0, 3);
    if (classes.length) s += `.${classes.join('.')}`;
    return s;
  }
  function describe(el) {
    if (!el) return 'nothing (null)';
    if (el === document.body || el === document.documentElement) return `<${el.tagName.toLowerCase()}>`;
    const n = name(el);
    const call = el.closest('article.call[data-call-id]')?.dataset.callId;
    return `${tag(el)}${n ? ` "${short(n)}"` : ''}${call ? ` (in ${call})` : ''}`;
  }
  /** `section.card.runs > div.table-wrap > table` — the last few ancestors, for overflow reports. */
  function path(el) {
    const parts = [];
    for (let e = el; e && e !== document.body && parts.length < 5; e = e.parentElement) parts.unshift(tag(e));
    return parts.join(' > ');
  }
  /** Not shown: no box, display/visibility/opacity, or visually hidden (a 1×1 clipped box). */
  function shown(el) {
    if (!el.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) return false;
    const r = el.getBoundingClientRect();
    return r.width > 1 && r.height > 1;
  }
  window.__a11y = { name, describe, path, shown, short, squash };
}

/** A fresh page (with the helpers) that fails the test on any uncaught script error. */
async function open(t, viewport = DESKTOP) {
  const context = await browser.newContext({ viewport });
  await context.addInitScript(installHelpers);
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (401|409)/.test(m.text())) errors.push(m.text());
  });
  t.after(async () => {
    await context.close();
    assert.deepEqual(errors, [], 'the page logged errors');
  });
  return page;
}

/** The home page with its inbox (an escalated run among its entries) and runs list loaded. */
async function home(page) {
  await page.goto(BASE_URL);
  await page.locator('#inbox-list a.inbox-item').first().waitFor();
  await page.locator(`#inbox-list a.inbox-item.is-escalated[data-run-id="${runs.escalated}"] .escalation`).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('#runs-body tr[data-run-id]').length >= 4);
  await page.locator('#agent option[value="clerk"]').waitFor({ state: 'attached' });
}

/** The page of the waiting scribe run (two held calls, b.txt's preview a diff). */
async function waitingRun(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.waiting}`);
  await page.locator('#held article.call').nth(1).waitFor();
  await page.locator('#held .diff').waitFor();
}

/** The page of the waiting trickster run (its arguments and previews marked, with warnings). */
async function markedRun(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.marked}`);
  await page.locator('#held article.call').nth(1).waitFor();
  await page.locator('#held .invisible-warning').nth(1).waitFor();
}

/** The page of the waiting pair run: its quorum call with 1 of 2 approvals, its hint, approve and deny. */
async function quorumRun(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.quorum}`);
  await page.locator('#held .quorum-count', { hasText: '1 of 2 approvals — local' }).waitFor();
  await page.locator('#steps li[data-kind="decision"] .quorum-count').waitFor();
}

/** The page of the escalated watcher run: the held panel's escalation line and the timeline's step. */
async function escalatedRun(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.escalated}`);
  await page.locator('#held .escalation', { hasText: 'after 1s' }).waitFor();
  await page.locator('#steps li[data-kind="approval_escalated"]').waitFor();
}

/** The waiting keeper run with its "Approve and remember…" form open, the other waiting runs listed. */
async function rememberForm(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.keeper}`);
  await page.locator('#held article.call').first().getByRole('button', { name: 'Approve and remember…' }).click();
  await page.locator(`#held .remember-effect a[data-run-id="${runs.keeperKeys}"]`).waitFor();
}

/** The Grants page, every grant listed (one in force, one revoked), the confirmation of a revoke open. */
async function grantsPage(page) {
  await page.goto(`${BASE_URL}#/grants`);
  await page.locator(`#grant-list article.grant[data-grant-id="${runs.grant}"]`).waitFor();
  await page.getByLabel('Show').selectOption('all');
  await page.locator('#grant-list article.grant[data-state="revoked"]').waitFor();
  await page.locator(`#grant-list article.grant[data-grant-id="${runs.grant}"]`).getByRole('button', { name: 'Revoke…' }).click();
  await page.getByRole('button', { name: 'Revoke grant' }).waitFor();
}

/** The grant in force on its own page. */
async function grantPage(page) {
  await page.goto(`${BASE_URL}#/grants/${runs.grant}`);
  await page.locator(`article.grant[data-grant-id="${runs.grant}"]`).waitFor();
}

/** The page of the completed scribe run. */
async function completedRun(page) {
  await page.goto(`${BASE_URL}#/runs/${runs.completed}`);
  await page.locator('#answer', { hasText: 'done' }).waitFor();
  await page.locator('#steps li[data-kind="run_completed"]').waitFor();
}

/** Fails with every problem at once (an empty list passes). */
function assertNone(problems, what) {
  assert.ok(problems.length === 0, `${what} (${problems.length}):\n${problems.map((p) => `  - ${p}`).join('\n')}`);
}

// ------------------------------------------------------------------------------------------ overflow

/**
 * The page's horizontal overflow and what causes it: the content (text, controls, images) that reaches
 * past the viewport, farthest first — the boxes around it are only stretched by it — and, when no
 * content does, the innermost boxes that do.
 */
function overflowReport() {
  const { path, short, squash } = window.__a11y;
  const vw = window.innerWidth;
  const limit = vw + 0.5;
  // Inside a box that clips or scrolls horizontally, content cannot widen the page (html and body do
  // not count: clipping there hides the content instead of fitting it).
  const contained = (node) => {
    for (let a = node.parentElement; a && a !== document.body && a !== document.documentElement; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') return true;
    }
    return false;
  };
  const reach = new Map(); // element -> {right, what}
  const note = (el, right, what) => {
    if (right > limit && right > (reach.get(el)?.right ?? 0)) reach.set(el, { right, what });
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!squash(node.textContent) || !node.parentElement || contained(node)) continue;
    range.selectNodeContents(node);
    const right = Math.max(0, ...[...range.getClientRects()].map((r) => r.right));
    note(node.parentElement, right, `its text "${short(squash(node.textContent), 60)}"`);
  }
  for (const el of document.body.querySelectorAll('input, select, textarea, button, img, svg, video, canvas, iframe, pre, table')) {
    if (contained(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0) note(el, r.right, `the ${el.tagName.toLowerCase()} itself (width ${Math.round(r.width)} px)`);
  }
  const found = [...reach.entries()]
    .sort((a, b) => b[1].right - a[1].right)
    .map(([el, { right, what }]) => `${path(el)}: ${what} reaches ${Math.round(right)} px`);
  if (found.length === 0) {
    const wide = [...document.body.querySelectorAll('*')].filter((el) => el.getBoundingClientRect().right > limit && !contained(el));
    for (const el of wide.filter((el) => !wide.some((other) => other !== el && el.contains(other)))) {
      const r = el.getBoundingClientRect();
      found.push(`${path(el)}: its box reaches ${Math.round(r.right)} px (width ${Math.round(r.width)} px)`);
    }
  }
  return { scrollWidth: document.documentElement.scrollWidth, innerWidth: vw, found, causes: overflowCauses() };

  /**
   * What makes the page wide: from <body> down, the children whose removal (display: none, put back at
   * once) narrows the page; the deepest such element is a cause (a long word, a fixed width, a wide grid
   * track). Only run when the page overflows.
   */
  function overflowCauses() {
    const width = () => document.documentElement.scrollWidth;
    const base = width();
    if (base <= vw) return [];
    const causes = [];
    const narrowedBy = (el) => {
      const old = el.style.getPropertyValue('display');
      const priority = el.style.getPropertyPriority('display');
      el.style.setProperty('display', 'none', 'important');
      const narrowed = width();
      if (old) el.style.setProperty('display', old, priority);
      else el.style.removeProperty('display');
      return narrowed;
    };
    const visit = (el, depth) => {
      const narrower = [];
      for (const child of el.children) {
        if (getComputedStyle(child).display === 'none' || ['SCRIPT', 'STYLE'].includes(child.tagName)) continue;
        const narrowed = narrowedBy(child);
        if (narrowed < base) narrower.push([child, narrowed]);
      }
      // Every one of several children narrows it (the columns of a table): the box itself is the cause.
      const all = narrower.length > 1 && narrower.length === [...el.children].filter((c) => getComputedStyle(c).display !== 'none').length;
      if (narrower.length === 0 || all || depth > 30) {
        if (el !== document.body) causes.push(el);
        return;
      }
      for (const [child] of narrower) visit(child, depth + 1);
    };
    visit(document.body, 0);
    return causes.slice(0, 8).map((el) => {
      const r = el.getBoundingClientRect();
      const text = squash(el.textContent);
      return `${path(el)} (${Math.round(r.width)} px wide${text ? `, "${short(text, 50)}"` : ''})`;
    });
  }
}

/** null when the page fits its width, else what sticks out. */
async function overflowProblem(page, where, viewport) {
  const report = await page.evaluate(overflowReport);
  if (report.scrollWidth <= report.innerWidth) return null;
  const shown = 6;
  const lines = (list) => list.map((f) => `\n      ${f}`).join('');
  const causes = report.causes.length ? `; what widens it (without it the page is narrower):${lines(report.causes)}` : '';
  const past = report.found.length ? lines(report.found.slice(0, shown)) : '\n      (no element found: look for margins or transforms)';
  const more = report.found.length > shown ? `\n      … and ${report.found.length - shown} more` : '';
  return `${where} at ${viewport.width}×${viewport.height}: the page scrolls sideways (document scrollWidth ${report.scrollWidth} px > window.innerWidth ${report.innerWidth} px)${causes}\n    past the right edge, farthest first:${past}${more}`;
}

// ------------------------------------------------------------------------------------------ axe-core

/** axe-core's violations on the page: of the WCAG 2.0/2.1 A and AA rules, or of the rules `only` names. */
async function axeViolations(page, where, only = { type: 'tag', values: AXE_TAGS }) {
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.addScriptTag({ path: AXE });
  const violations = await page.evaluate(async (runOnly) => {
    const result = await window.axe.run(document, { runOnly, resultTypes: ['violations'] });
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.map((n) => ({ target: n.target.join(' '), summary: (n.failureSummary ?? '').replace(/\s+/g, ' ').trim() })),
    }));
  }, AXE_TAGS);
  return violations.map(
    (v) =>
      `${where}: ${v.id} (${v.impact}) ${v.help}${v.nodes
        .slice(0, 8)
        .map((n) => `\n      ${n.target}: ${n.summary}`)
        .join('')}${v.nodes.length > 8 ? `\n      … and ${v.nodes.length - 8} more` : ''}`,
  );
}

// ------------------------------------------------------------------------------------------ headings

/**
 * The headings a screen reader lists that skip a level: each one deeper than the one before it by more
 * than one (an h4 after an h2), the first counted from nothing (so it must be an h1). Visually hidden
 * headings count; headings hidden from everyone do not.
 */
function headingSkips() {
  const { describe } = window.__a11y;
  const skips = [];
  let previous = 0;
  for (const el of document.querySelectorAll('h1, h2, h3, h4, h5, h6')) {
    if (!el.checkVisibility({ checkVisibilityCSS: true }) || el.closest('[aria-hidden="true"]')) continue;
    const level = Number(el.tagName[1]);
    if (level > previous + 1) skips.push(`${describe(el)} is an h${level} after ${previous ? `an h${previous}` : 'no heading'}`);
    previous = level;
  }
  return skips;
}

// ------------------------------------------------------------------------------------------ scroll cues

/** What a diff (`pre.diff`) shows of its sideways scroll: how much is hidden, the cue, its name. */
function scrollCueState(diff) {
  const { name, shown } = window.__a11y;
  const shade = diff.closest('.scroll-shade');
  const hint = document.getElementById(diff.getAttribute('aria-describedby') ?? '');
  const drawn = (pseudo) => {
    const style = getComputedStyle(shade, pseudo);
    return Number(style.opacity) > 0.99 && style.backgroundImage.includes('gradient');
  };
  const box = hint?.getBoundingClientRect();
  return {
    hidden: diff.scrollWidth - diff.clientWidth,
    scrollLeft: diff.scrollLeft,
    more: shade?.dataset.more ?? null,
    shadeLeft: shade ? drawn('::before') : false,
    shadeRight: shade ? drawn('::after') : false,
    hint: hint && shown(hint) ? hint.textContent : null,
    hintFits: box ? box.left >= -0.5 && box.right <= window.innerWidth + 0.5 : false,
    focusable: diff.tabIndex === 0 && diff.getAttribute('role') === 'region',
    name: name(diff),
  };
}

// ------------------------------------------------------------------------------------------ touch targets

/** Visible controls smaller than `min`×`min` CSS px (links in running text are exempt). */
function smallTargets(min) {
  const { describe, shown, squash } = window.__a11y;
  // A link inside a sentence: its nearest block says more than the link.
  const inRunningText = (a) => {
    let block = a.parentElement;
    while (block && getComputedStyle(block).display.startsWith('inline')) block = block.parentElement;
    if (!block || !['P', 'LI', 'DD', 'DIV', 'SPAN', 'TD', 'BLOCKQUOTE'].includes(block.tagName)) return false;
    return squash(block.textContent).length > squash(a.textContent).length;
  };
  const small = [];
  for (const el of document.querySelectorAll('button, summary, input:not([type="hidden"]), select, textarea, a[href]')) {
    if (!shown(el)) continue;
    const r = el.getBoundingClientRect();
    // Off the page until focused (the skip link).
    if (r.bottom + window.scrollY <= 0 || r.right + window.scrollX <= 0) continue;
    if (el.tagName === 'A' && inRunningText(el)) continue;
    if (r.width + 0.01 < min || r.height + 0.01 < min) small.push(`${describe(el)} is ${Math.round(r.width * 10) / 10}×${Math.round(r.height * 10) / 10} px`);
  }
  return small;
}

// ------------------------------------------------------------------------------------------ the focus

/** What has the focus, and what is wrong with it (null when nothing): not body, shown, named. */
function focusState() {
  const { describe, name, shown } = window.__a11y;
  const el = document.activeElement;
  const desc = describe(el);
  if (!el || el === document.body || el === document.documentElement) return { desc, problem: `the focus is on ${desc}` };
  const r = el.getBoundingClientRect();
  if (!shown(el)) return { desc, problem: `the focus is on ${desc}, which is not visible (box ${Math.round(r.width)}×${Math.round(r.height)} px)` };
  if (r.bottom <= 0 || r.right <= 0 || r.top >= window.innerHeight || r.left >= window.innerWidth) {
    return { desc, problem: `the focus is on ${desc}, which is off the screen (at ${Math.round(r.left)},${Math.round(r.top)})` };
  }
  if (!name(el)) return { desc, problem: `the focus is on ${desc}, which has no accessible name` };
  return { desc, problem: null };
}

/** Keyboard checks collect their problems and go on; the test fails at its end with all of them. */
class Walk {
  constructor(page) {
    this.page = page;
    this.problems = [];
  }

  check(ok, message) {
    if (!ok) this.problems.push(message);
    return ok;
  }

  /** Checks the focus after `step`; returns its description. */
  async focus(step) {
    const state = await this.page.evaluate(focusState);
    this.check(!state.problem, `after ${step}: ${state.problem}`);
    return state.desc;
  }

  /** Checks the focus after an asynchronous step, once the page had a moment to re-render. */
  async settled(step) {
    await this.page.waitForTimeout(250);
    return this.focus(step);
  }

  async press(key, step) {
    await this.page.keyboard.press(key);
    return this.focus(`${step} (${key})`);
  }

  async type(text, step) {
    await this.page.keyboard.type(text);
    return this.focus(step);
  }

  async has(locator) {
    return locator.evaluate((el) => el === document.activeElement, undefined, { timeout: 1000 }).catch(() => false);
  }

  /**
   * Tab (or Shift+Tab, when the target comes before the focus) until `target` has the focus, checking
   * the focus after every key. Fails the test when the target is never reached.
   */
  async tabTo(target, label, max = 60) {
    await target.waitFor();
    if (await this.has(target)) return;
    const backwards = await target.evaluate((el) => {
      const active = document.activeElement;
      if (!active || active === document.body) return false;
      return Boolean(el.compareDocumentPosition(active) & Node.DOCUMENT_POSITION_FOLLOWING);
    });
    const key = backwards ? 'Shift+Tab' : 'Tab';
    const trail = [];
    for (let i = 1; i <= max; i++) {
      trail.push(await this.press(key, `${key} ×${i} on the way to ${label}`));
      if (await this.has(target)) return;
    }
    this.fail(`${max} presses of ${key} never reached ${label}; the focus went: ${trail.slice(-12).join(' → ')}`);
  }

  fail(message) {
    this.problems.push(message);
    assertNone(this.problems, 'the keyboard walk stopped');
  }

  done(what) {
    assertNone(this.problems, what);
  }
}

// ------------------------------------------------------------------------------------------ the tests

describe('the playground, issue #17', () => {
  test('no horizontal overflow at 390×844, 768×1024 and 320×640 (home with inbox, an escalated run and long inputs; a waiting run with a diff, editor open; one with marked characters; one with a quorum call; an escalated one; the remember form; the Grants page and a grant)', async (t) => {
    const problems = [];
    for (const viewport of VIEWPORTS) {
      const page = await open(t, viewport);
      await home(page);
      problems.push(await overflowProblem(page, 'the home page', viewport));
      await waitingRun(page);
      problems.push(await overflowProblem(page, 'a waiting run', viewport));
      await page.locator('#held article.call[data-call-id="call_2"]').getByRole('button', { name: 'Edit…' }).click();
      await page.locator('#held textarea').waitFor();
      problems.push(await overflowProblem(page, 'a waiting run with the argument editor open', viewport));
      await markedRun(page);
      problems.push(await overflowProblem(page, 'a waiting run with marked characters', viewport));
      await quorumRun(page);
      problems.push(await overflowProblem(page, 'a waiting run with a quorum call', viewport));
      await escalatedRun(page);
      problems.push(await overflowProblem(page, 'an escalated waiting run', viewport));
      await rememberForm(page);
      problems.push(await overflowProblem(page, 'a waiting run with its "Approve and remember…" form open', viewport));
      await grantsPage(page);
      problems.push(await overflowProblem(page, 'the Grants page (past grants too, a revoke to confirm)', viewport));
      await grantPage(page);
      problems.push(await overflowProblem(page, 'a grant\'s own page', viewport));
    }
    assertNone(problems.filter(Boolean), 'pages wider than the screen');
  });

  test('axe-core finds no WCAG 2.0/2.1 A or AA violation (home, waiting run with and without the editor, one with marked characters, one with a quorum call, an escalated one, the remember form, the Grants page and a grant, completed run; light and dark)', async (t) => {
    const problems = [];
    for (const colorScheme of ['light', 'dark']) {
      const page = await open(t);
      await page.emulateMedia({ colorScheme });
      await home(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, the home page`)));
      await waitingRun(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a waiting run`)));
      await page.locator('#held article.call[data-call-id="call_2"]').getByRole('button', { name: 'Edit…' }).click();
      await page.locator('#held textarea').waitFor();
      problems.push(...(await axeViolations(page, `${colorScheme}, a waiting run with the argument editor open`)));
      await markedRun(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a waiting run with marked characters`)));
      await quorumRun(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a waiting run with a quorum call`)));
      await escalatedRun(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, an escalated waiting run`)));
      await rememberForm(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a waiting run with its "Approve and remember…" form open`)));
      await grantsPage(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, the Grants page (past grants too, a revoke to confirm)`)));
      await grantPage(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a grant's own page`)));
      await completedRun(page);
      problems.push(...(await axeViolations(page, `${colorScheme}, a completed run`)));
    }
    assertNone(problems, `axe-core violations of ${AXE_TAGS.join(', ')}`);
  });

  test('headings skip no level, and axe-core finds no heading-order problem (a completed run, a waiting run, home, the Grants page and a grant)', async (t) => {
    const page = await open(t);
    const problems = [];
    const check = async (where) => {
      for (const skip of await page.evaluate(headingSkips)) problems.push(`${where}: ${skip}`);
      problems.push(...(await axeViolations(page, where, { type: 'rule', values: ['heading-order'] })));
    };
    await completedRun(page);
    await check('a completed run');
    await waitingRun(page);
    await check('a waiting run');
    await home(page);
    await check('the home page');
    await grantsPage(page);
    await check('the Grants page');
    await grantPage(page);
    await check("a grant's own page");
    assertNone(problems, 'headings that skip a level');
  });

  test('at 390×844 a diff wider than its box says so (a shadow on the side with more, a line saying it scrolls) and scrolls from the keyboard; a diff that fits shows neither', async (t) => {
    const page = await open(t, PHONE);
    // No transition: each state is drawn at once.
    await page.emulateMedia({ reducedMotion: 'reduce' });
    const walk = new Walk(page);
    await waitingRun(page);
    const diff = page.locator('#held article.call[data-call-id="call_2"] .diff');
    const state = () => diff.evaluate(scrollCueState);
    // Until the cue names `more` (or 5 s pass: the checks after it then say what it shows).
    const settle = async (more) => {
      const el = await diff.elementHandle();
      await page
        .waitForFunction(([pre, want]) => pre.closest('.scroll-shade')?.dataset.more === want, [el, more], { timeout: 5000 })
        .catch(() => {});
    };

    let now = await state();
    assert.ok(now.hidden > 40, `the diff of b.txt should be wider than its box at 390 px (hidden: ${now.hidden} px)`);
    walk.check(now.more === 'right', `at the start, data-more is "${now.more}", not "right"`);
    walk.check(now.shadeRight && !now.shadeLeft, `at the start, the shadow is drawn on the ${[now.shadeLeft && 'left', now.shadeRight && 'right'].filter(Boolean).join(' and ') || 'no'} edge, not the right one only`);
    walk.check(now.hint === 'Wider than the screen: scroll sideways →', `at the start, the line under the diff says ${JSON.stringify(now.hint)}`);
    walk.check(now.hintFits, 'the line under the diff is cut at the screen\'s edge');
    walk.check(now.focusable && /unified diff/.test(now.name), `the diff is not a named region in the tab order (name "${now.name}")`);

    // The keyboard reaches it and scrolls it to its end.
    await walk.tabTo(diff, 'the diff of call_2');
    for (let i = 0; i < 200; i++) {
      const { hidden, scrollLeft } = await state();
      if (hidden - scrollLeft <= 1) break;
      await page.keyboard.press('ArrowRight');
    }
    await settle('left');
    now = await state();
    walk.check(now.hidden - now.scrollLeft <= 1, `ArrowRight on the focused diff did not scroll it to its end (at ${now.scrollLeft} of ${now.hidden} px)`);
    walk.check(now.more === 'left', `at the end, data-more is "${now.more}", not "left"`);
    walk.check(now.shadeLeft && !now.shadeRight, 'at the end, the shadow is not drawn on the left edge only');
    walk.check(now.hint === '← Scroll back for the start of the lines', `at the end, the line under the diff says ${JSON.stringify(now.hint)}`);

    // A diff whose lines fit: no shadow, no line, no description.
    await page.goto(`${BASE_URL}#/runs/${runs.fitting}`);
    await diff.waitFor();
    await settle('');
    now = await state();
    walk.check(now.hidden <= 1, `the short diff of run ${runs.fitting} hides ${now.hidden} px at 390 px`);
    walk.check(now.more === '' && !now.shadeLeft && !now.shadeRight && now.hint === null, `a diff that fits shows a cue: ${JSON.stringify(now)}`);
    walk.done('the scroll cue of a diff');
  });

  test('touch targets are at least 24×24 CSS px at 390×844', async (t) => {
    const page = await open(t, PHONE);
    const problems = [];
    const measure = async (where) => {
      for (const small of await page.evaluate(smallTargets, MIN_TARGET)) problems.push(`${where}: ${small}`);
    };
    await home(page);
    // A message with its dismiss button and link: start a run from the form.
    await page.getByLabel('Input').fill('a run for the touch-target check');
    await page.getByRole('button', { name: 'Start run' }).click();
    await page.locator('#notices .notice-success').waitFor();
    await measure('the home page with a message');
    await page.locator('#token-box > summary').click();
    await page.locator('#token').waitFor();
    await measure('the home page, API-token popup open');
    await waitingRun(page);
    await measure('a waiting run');
    await page.locator('#held article.call[data-call-id="call_1"]').getByRole('button', { name: 'Edit…' }).click();
    await page.locator('#held textarea').waitFor();
    await page.locator('details.cancel > summary').click();
    await measure('a waiting run, argument editor and cancel form open');
    await rememberForm(page);
    await measure('a waiting run, "Approve and remember…" form open');
    await grantsPage(page);
    await measure('the Grants page, a revoke to confirm');
    await completedRun(page);
    await measure('a completed run');
    assertNone([...new Set(problems)], `controls smaller than ${MIN_TARGET}×${MIN_TARGET} px`);
  });

  test('keyboard only: start a run of clerk, open it, approve one call, deny one (Escape closes its form), edit one; it completes', async (t) => {
    const page = await open(t);
    const walk = new Walk(page);
    const input = 'typed on the keyboard';
    await home(page);

    // Start a run of clerk from the form.
    const agent = page.getByLabel('Agent');
    await walk.tabTo(agent, 'the Agent select');
    await walk.type('clerk', 'typing "clerk" on the Agent select');
    walk.check((await agent.inputValue()) === 'clerk', `typing "clerk" on the focused Agent select chose ${await agent.inputValue()}, not clerk`);
    await walk.tabTo(page.getByLabel('Input'), 'the Input field');
    await walk.type(input, 'typing the input');
    await walk.tabTo(page.getByRole('button', { name: 'Start run' }), 'the "Start run" button');
    await page.keyboard.press('Enter');
    const notice = page.locator('#notices .notice-success', { hasText: 'started' });
    await notice.waitFor();
    await page.getByRole('button', { name: 'Start run' }).and(page.locator(':enabled')).waitFor();
    // The new run reaches the gate and shows in the inbox; the lists settle before tabbing on.
    await page.locator('#inbox-list a.inbox-item', { hasText: input }).waitFor();
    await walk.settled('pressing Enter on "Start run" (the run started)');

    // Open it from the message.
    await walk.tabTo(notice.getByRole('link', { name: 'Open it' }), 'the "Open it" link of the message');
    await page.keyboard.press('Enter');
    await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
    const held = page.locator('#held');
    await held.locator('article.call').nth(2).waitFor();
    await walk.settled('opening the run with Enter on "Open it"');
    const card = (id) => held.locator(`article.call[data-call-id="${id}"]`);

    // Approve c.txt (call_1) with Space.
    await walk.tabTo(card('call_1').getByRole('button', { name: 'Approve', exact: true }), 'Approve of call_1 (c.txt)');
    await page.keyboard.press('Space');
    await card('call_1').and(page.locator('.is-decided')).waitFor();
    await walk.settled('approving call_1 with Space');

    // Deny d.txt (call_2): the form opens, Escape closes it and gives the focus back to its button.
    const deny = card('call_2').getByRole('button', { name: 'Deny…' });
    const reason = card('call_2').getByLabel('Reason (the model sees it)');
    await walk.tabTo(deny, 'Deny… of call_2 (d.txt)');
    await walk.press('Enter', 'opening the deny form of call_2');
    await reason.waitFor();
    await page.keyboard.press('Escape');
    await page.waitForTimeout(100);
    const closed = walk.check((await reason.count()) === 0, 'Escape in the deny form of call_2 did not close it (its reason field is still there)');
    const back = await walk.focus('Escape in the deny form of call_2');
    walk.check(await walk.has(deny), `Escape in the deny form of call_2 left the focus on ${back}, not on its "Deny…" button`);
    if (closed) {
      walk.check((await deny.getAttribute('aria-expanded')) === 'false', 'after Escape, "Deny…" of call_2 still says aria-expanded="true"');
      await walk.tabTo(deny, 'Deny… of call_2 again');
      await walk.press('Enter', 'opening the deny form of call_2 again');
      await reason.waitFor();
    }
    await walk.tabTo(reason, 'the reason field of call_2');
    await walk.type('not d, thanks', 'typing the reason for call_2');
    await page.keyboard.press('Enter');
    await card('call_2').locator('.decided', { hasText: 'Denied by local: not d, thanks' }).waitFor();
    await walk.settled('denying call_2 with Enter in its reason field');

    // Edit e.txt (call_3): select the JSON with the keyboard, type new arguments, send them.
    const edited = { path: 'e.txt', content: 'edited on the keyboard\n' };
    await walk.tabTo(card('call_3').getByRole('button', { name: 'Edit…' }), 'Edit… of call_3 (e.txt)');
    await walk.press('Enter', 'opening the editor of call_3');
    const editor = card('call_3').getByLabel('Arguments for fs_write (JSON)');
    await walk.tabTo(editor, 'the JSON editor of call_3');
    await walk.press('ControlOrMeta+A', 'selecting the arguments of call_3');
    await walk.type(JSON.stringify(edited), 'typing the new arguments of call_3');
    await card('call_3').getByText('Valid against the fs_write schema.').waitFor();
    await walk.tabTo(card('call_3').getByRole('button', { name: 'Approve with these arguments' }), '"Approve with these arguments" of call_3');
    await page.keyboard.press('Enter');

    // Every call is decided: the run resumes and completes.
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await page.locator('.run-head .badge', { hasText: 'completed' }).waitFor();
    await walk.settled('approving call_3 with edited arguments (Enter); the run completed');
    const decisions = await page.locator('#steps li[data-kind="decision"]').allTextContents();
    walk.check(decisions.length === 3, `the steps show ${decisions.length} decisions, not 3: ${decisions.join(' | ')}`);
    if (WORKSPACE) {
      walk.check(readFileSync(join(WORKSPACE, 'c.txt'), 'utf8') === `C: ${input}\n`, 'c.txt (approved) was not written as proposed');
      walk.check(!existsSync(join(WORKSPACE, 'd.txt')), 'd.txt was denied and must not exist');
      walk.check(readFileSync(join(WORKSPACE, 'e.txt'), 'utf8') === edited.content, 'e.txt does not hold the edited content');
    }
    walk.done('keyboard walk through a run');
  });

  test('keyboard only: approve and remember a call of keeper for this run only (Escape closes the form), then revoke the grant on the Grants page', async (t) => {
    const page = await open(t);
    const walk = new Walk(page);
    await page.goto(`${BASE_URL}#/runs/${runs.keeperKeys}`);
    const card = page.locator('#held article.call').first();
    await card.waitFor();
    const describeFocus = () => page.evaluate(() => window.__a11y.describe(document.activeElement));

    // "Approve and remember…" opens its form with the focus on the pattern; Escape closes it.
    const open_ = card.getByRole('button', { name: 'Approve and remember…' });
    const pattern = card.getByLabel('Pattern for fs_write (JSON)');
    await walk.tabTo(open_, '"Approve and remember…"');
    await walk.press('Enter', 'opening the remember form');
    await pattern.waitFor();
    walk.check(await walk.has(pattern), `Enter on "Approve and remember…" left the focus on ${await describeFocus()}, not on the pattern`);
    await walk.press('Escape', 'Escape in the remember form');
    walk.check((await pattern.count()) === 0, 'Escape in the remember form did not close it');
    walk.check(await walk.has(open_), `Escape in the remember form left the focus on ${await describeFocus()}, not on "Approve and remember…"`);
    walk.check((await open_.getAttribute('aria-expanded')) === 'false', 'after Escape, "Approve and remember…" still says aria-expanded="true"');
    await walk.press('Enter', 'opening the remember form again');
    await pattern.waitFor();

    // This run only (an arrow key in the scope's radio group), a reason, sent with Enter.
    await walk.tabTo(card.getByLabel('Every run of keeper'), 'the scope "Every run of keeper"');
    await walk.press('ArrowDown', 'choosing the scope "This run only"');
    walk.check(await card.getByLabel('This run only').isChecked(), 'ArrowDown in the scope group did not choose "This run only"');
    await walk.tabTo(card.getByLabel('Reason (optional, kept with the grant)'), 'the reason field');
    await walk.type('typed on the keyboard', 'typing the reason');
    await walk.tabTo(card.getByRole('button', { name: 'Approve and remember', exact: true }), '"Approve and remember"');
    await page.keyboard.press('Enter');
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await walk.settled('approving and remembering with Enter; the run completed');

    // The Grants page from the navigation: its heading has the focus; the new grant is the newest.
    const nav = page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Grants' });
    await walk.tabTo(nav, 'the "Grants" link of the navigation');
    await page.keyboard.press('Enter');
    await page.waitForURL(/#\/grants$/);
    const entry = page.locator('#grant-list article.grant').first();
    await entry.waitFor();
    const there = await walk.settled('opening the Grants page with Enter');
    walk.check(await walk.has(page.getByRole('heading', { level: 1, name: 'Grants' })), `opening the Grants page left the focus on ${there}, not on its heading`);
    walk.check(/^only run …/.test(await entry.locator('dd.grant-scope').textContent()), 'the newest grant is not the one for this run only');
    walk.check((await entry.locator('dd.grant-reason').textContent()) === 'typed on the keyboard', 'the newest grant does not have the typed reason');

    // Revoke…: the confirmation opens on "Revoke grant"; Escape closes it; Enter revokes.
    const revoke = entry.getByRole('button', { name: 'Revoke…' });
    const confirm = entry.getByRole('button', { name: 'Revoke grant' });
    await walk.tabTo(revoke, 'Revoke… of the new grant');
    await walk.press('Enter', 'opening the revoke confirmation');
    walk.check(await walk.has(confirm), `Enter on "Revoke…" left the focus on ${await describeFocus()}, not on "Revoke grant"`);
    await walk.press('Escape', 'Escape in the revoke confirmation');
    walk.check((await confirm.count()) === 0, 'Escape did not close the revoke confirmation');
    walk.check(await walk.has(revoke), `Escape in the revoke confirmation left the focus on ${await describeFocus()}, not on "Revoke…"`);
    await walk.press('Enter', 'opening the revoke confirmation again');
    await page.keyboard.press('Enter');
    await entry.and(page.locator('[data-state="revoked"]')).waitFor();
    const after = await walk.settled('revoking with Enter on "Revoke grant"');
    walk.check(await walk.has(entry.locator('.grant-title')), `after the revoke the focus is on ${after}, not on the grant's heading`);
    walk.done('keyboard walk through approve and remember and a revoke');
  });

  test('keyboard only: the API-token popup closes on Escape (focus back on its summary) and when the focus leaves it', async (t) => {
    const page = await open(t);
    const walk = new Walk(page);
    await home(page);
    const box = page.locator('#token-box');
    const summary = box.locator('summary');
    const isOpen = () => box.evaluate((el) => el.open);

    await walk.tabTo(summary, 'the API-token summary');
    await walk.press('Enter', 'opening the API-token popup');
    walk.check(await isOpen(), 'Enter on the API-token summary did not open the popup');
    await walk.press('Tab', 'moving into the API-token popup');
    walk.check(await walk.has(page.locator('#token')), 'Tab from the open API-token summary did not reach the token field');
    await walk.press('Escape', 'Escape in the API-token popup');
    walk.check(!(await isOpen()), 'Escape in the API-token popup did not close it');
    const there = await walk.focus('Escape in the API-token popup');
    walk.check(await walk.has(summary), `Escape in the API-token popup left the focus on ${there}, not on its summary`);

    await walk.tabTo(summary, 'the API-token summary again');
    await walk.press('Enter', 'opening the API-token popup again');
    walk.check(await isOpen(), 'Enter on the API-token summary did not open the popup again');
    let left = false;
    for (let i = 1; i <= 8 && !left; i++) {
      await walk.press('Tab', `Tab ×${i} through the API-token popup`);
      left = await box.evaluate((el) => !el.contains(document.activeElement));
    }
    walk.check(left, 'eight presses of Tab never left the API-token popup');
    walk.check(!(await isOpen()), `the focus left the API-token popup (to ${await page.evaluate(() => window.__a11y.describe(document.activeElement))}) but it stayed open`);
    walk.done('the API-token popup and the keyboard');
  });

  test('keyboard only: the skip link of a run page moves the focus into the content and keeps the run on show', async (t) => {
    const page = await open(t);
    const walk = new Walk(page);
    await waitingRun(page);
    const route = `#/runs/${runs.waiting}`;
    await walk.tabTo(page.locator('.skip-link'), 'the skip link');
    await walk.press('Enter', 'Enter on the skip link');
    await page.waitForTimeout(200);
    const hash = await page.evaluate(() => location.hash);
    walk.check(hash === route, `the skip link changed location.hash from ${route} to ${hash}`);
    walk.check((await page.locator('#held article.call').count()) === 2, 'after the skip link the run page no longer shows its held calls');
    const inMain = await page.evaluate(() => document.getElementById('main').contains(document.activeElement));
    walk.check(inMain, `after the skip link the focus is on ${await page.evaluate(() => window.__a11y.describe(document.activeElement))}, not in <main>`);
    const next = await walk.press('Tab', 'Tab after the skip link');
    const nextInMain = await page.evaluate(() => document.getElementById('main').contains(document.activeElement));
    walk.check(nextInMain, `Tab after the skip link went to ${next}, outside <main>`);
    walk.done('the skip link of a run page');
  });
});

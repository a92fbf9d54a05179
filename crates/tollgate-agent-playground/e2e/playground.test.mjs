// The playground in a real headless Chromium, driven by playwright-core, against a running
// `tollgate serve` (started by tests/browser.rs, which sets the environment below).
//
//   BASE_URL       the server without auth, whose agent `scribe` writes a.txt and b.txt in one turn,
//                  whose agent `talker` streams "Streaming words one by one." slowly (a mock model), and
//                  whose agent `trickster` holds a shell call and an fs_write whose arguments hide
//                  direction-changing characters (issue 31), and whose agent `keeper` writes
//                  kept/INPUT.txt in one ask-gated call (V2 §1 grants: its suggested grant is kept/*)
//                  and whose agent `watcher` writes w1.txt and w2.txt in one turn, escalated once held a
//                  second to the Slack notifiers `ops` and `oncall` (V2 §4), whose signed links decide as
//                  `ops-desk`
//   WORKSPACE      that server's workspace folder (to check the files on disk)
//   HOOK_PORT      optional: the loopback port those notifiers post to; this test listens there
//   AUTH_BASE_URL  optional: a second server with auth on, and AUTH_TOKEN a token of it (actor alice);
//                  its agent `pair` writes q.txt, which its policy gives `approvals = 2` (V2 §4 quorum)
//   AUTH_TOKEN_2   optional: a second approver's token of that server (actor bob), for the quorum test
//   AUTH_WORKSPACE optional: that server's workspace folder
//   SCREENSHOT     where to write the run page's PNG (default target/playground-run.png)
//   CHROMIUM       the browser (default /usr/bin/chromium)
//   PLAYWRIGHT_CORE the playwright-core package folder (default .ci/npm/node_modules/playwright-core)
//
// Run: node --test crates/tollgate-agent-playground/e2e/playground.test.mjs

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT_CORE ?? join(repo, '.ci/npm/node_modules/playwright-core'));

const BASE_URL = process.env.BASE_URL;
const WORKSPACE = process.env.WORKSPACE;
const SCREENSHOT = resolve(process.env.SCREENSHOT ?? join(repo, 'target/playground-run.png'));
const INPUT = 'hello from the browser';

assert.ok(BASE_URL, 'BASE_URL must name a running tollgate serve');

let browser;

/** The Slack messages the notifiers posted to HOOK_PORT, in order: `{path, body}` (`/ops`, `/oncall`). */
const posted = [];
let hooks;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  if (process.env.HOOK_PORT) {
    hooks = createServer((request, response) => {
      let text = '';
      request.setEncoding('utf8');
      request.on('data', (chunk) => (text += chunk));
      request.on('end', () => {
        try {
          posted.push({ path: request.url, body: JSON.parse(text) });
        } catch {
          posted.push({ path: request.url, body: null });
        }
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('ok');
      });
    });
    await new Promise((resolve, reject) => {
      hooks.once('error', reject);
      hooks.listen(Number(process.env.HOOK_PORT), '127.0.0.1', resolve);
    });
  }
});

after(async () => {
  await browser?.close();
  hooks?.close();
});

/**
 * A fresh page that fails the test on any uncaught script error; with `token`, one whose API token is
 * set already (as the token popup stores it).
 */
async function open(t, { token } = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  if (token) await context.addInitScript((value) => localStorage.setItem('tollgate.token', value), token);
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (401|403|409)/.test(m.text())) errors.push(m.text());
  });
  t.after(async () => {
    await context.close();
    assert.deepEqual(errors, [], 'the page logged errors');
  });
  return page;
}

/** A run of `agent` started through the API and waiting at the gate (`wait: true`): the run's JSON. */
async function startWaiting(agent, input) {
  const started = await fetch(new URL('v1/runs', BASE_URL), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ agent, input, wait: true }),
  });
  assert.equal(started.status, 201);
  const run = await started.json();
  assert.equal(run.status, 'waiting_for_approval');
  return run;
}

/** Calls the API of the server without auth: the parsed answer (null when empty); fails on an error status. */
async function call(method, path, body) {
  const response = await fetch(new URL(path, BASE_URL), {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: HTTP ${response.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

/** The run, once it has `status` (within 15 s). */
async function waitForStatus(id, status) {
  const deadline = Date.now() + 15_000;
  let run;
  while (Date.now() < deadline) {
    run = await call('GET', `v1/runs/${id}`);
    if (run.status === status) return run;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`run ${id} did not reach ${status} within 15 s (it is ${run?.status})`);
}

/** What `check` answers once it answers something truthy, asked every 150 ms for at most `seconds`. */
async function eventually(what, seconds, check) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const found = await check();
    if (found) return found;
    if (Date.now() > deadline) assert.fail(`${what} did not happen within ${seconds} s`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/**
 * Keeps every text the live region says from now on in `window.__said` (one batch replaces the last, so a
 * check after the fact could miss it).
 */
async function recordAnnouncements(page) {
  await page.evaluate(() => {
    window.__said = [];
    const region = document.getElementById('announcer');
    new MutationObserver(() => {
      if (region.textContent) window.__said.push(region.textContent);
    }).observe(region, { childList: true, characterData: true, subtree: true });
  });
}

/** Waits until the live region has said something that holds `text`. */
async function said(page, text) {
  await page.waitForFunction((part) => (window.__said ?? []).some((t) => t.includes(part)), text);
}

/** The step list as [seq, kind, the text a person reads] (title and body; not the relative times). */
async function history(page) {
  return page.$$eval('#steps li.step', (items) =>
    items.map((li) => {
      const text = [...li.querySelectorAll('.step-title, .step-body')].map((el) => el.innerText).join(' ');
      return [Number(li.dataset.seq), li.dataset.kind, text.replace(/\s+/g, ' ').trim()];
    }),
  );
}

describe('the playground', () => {
  test('start a run, decide a two-call turn (deny one, approve one), watch it finish live, reload', async (t) => {
    const page = await open(t);
    await page.goto(BASE_URL);

    // Start a run from the form.
    await page.getByLabel('Agent').selectOption('scribe');
    await page.getByLabel('Input').fill(INPUT);
    await page.getByRole('button', { name: 'Start run' }).click();
    await page.locator('.notice-success', { hasText: 'started' }).waitFor();

    // It shows up in the inbox (it reaches the gate at once) and opens from there.
    const item = page.locator('#inbox-list a.inbox-item', { hasText: INPUT });
    await item.waitFor();
    assert.match(await page.locator('#inbox-count').textContent(), /^[1-9]/);
    assert.match(await item.textContent(), /2 to decide/);
    await item.click();
    await page.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
    const runId = page.url().split('/').pop();

    const held = page.locator('#held');
    await held.waitFor();
    const callA = held.locator('article.call[data-call-id="call_1"]');
    const callB = held.locator('article.call[data-call-id="call_2"]');
    assert.equal(await held.locator('article.call').count(), 2);

    // b.txt exists, so its preview is a diff, shown as one.
    assert.equal(await callB.locator('.diff-del').textContent(), '-B: old');
    assert.equal(await callB.locator('.diff-add').textContent(), `+B: ${INPUT}`);
    assert.equal(await callA.locator('pre.preview').textContent(), `create a.txt (${`A: ${INPUT}\n`.length} bytes)`);

    // The editor checks JSON syntax and the tool's schema before anything is sent.
    await callA.getByRole('button', { name: 'Edit…' }).click();
    const editor = callA.getByLabel('Arguments for fs_write (JSON)');
    assert.deepEqual(JSON.parse(await editor.inputValue()), { path: 'a.txt', content: `A: ${INPUT}\n` });
    await callA.getByText('Valid against the fs_write schema.').waitFor();
    await editor.fill('{"path": "a.txt",');
    await callA.locator('.error-list', { hasText: 'Invalid JSON' }).waitFor();
    assert.equal(await callA.getByRole('button', { name: 'Approve with these arguments' }).isDisabled(), true);
    await editor.fill('{"path": 7, "mode": "append"}');
    const problems = await callA.locator('.error-list li').allTextContents();
    assert.deepEqual(problems.sort(), [
      '/mode: is not allowed: "mode" is not a property of this tool (known: path, content)',
      '/path: must be a string, not a number',
      'arguments: is missing the required property "content"',
    ]);
    assert.equal(await editor.getAttribute('aria-invalid'), 'true');
    await callA.getByRole('button', { name: 'Cancel' }).click();

    // A decision refused with 409 (someone else was first) is explained, and the run is read again.
    await page.route('**/decisions', (route) =>
      route.fulfill({
        status: 409,
        contentType: 'application/problem+json',
        body: JSON.stringify({ type: 'https://tollgate.dev/problems/conflict', title: 'Conflict', status: 409, detail: 'call call_2 is already decided' }),
      }),
    );
    const reread = page.waitForRequest((r) => r.method() === 'GET' && r.url().endsWith(`/v1/runs/${runId}`));
    await callB.getByRole('button', { name: 'Approve', exact: true }).click();
    await page.locator('#notices .notice-error', { hasText: 'Your decision was not recorded.' }).waitFor();
    assert.match(await page.locator('#notices .notice-error').textContent(), /call call_2 is already decided.*Someone else may have decided first/);
    await reread;
    await page.unroute('**/decisions');

    // Deny a.txt with a reason: recorded at once, the run still waits for b.txt.
    await callA.getByRole('button', { name: 'Deny…' }).click();
    await callA.getByLabel('Reason (the model sees it)').fill('not this one');
    await callA.getByRole('button', { name: 'Deny', exact: true }).click();
    await held.locator('article.call.is-decided', { hasText: 'Denied by local: not this one' }).waitFor();
    assert.equal(await page.locator('.run-head .badge').textContent(), 'waiting for approval');

    // Approve b.txt: the run resumes and finishes, shown live (no reload).
    const reloads = [];
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) reloads.push(frame.url());
    });
    await callB.getByRole('button', { name: 'Approve', exact: true }).click();
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await page.locator('.run-head .badge', { hasText: 'completed' }).waitFor();
    await held.waitFor({ state: 'hidden' });
    await page.locator('#steps li[data-kind="run_completed"]').waitFor();
    assert.deepEqual(reloads, [], 'the page must not reload to show the end');

    // The files on disk: a.txt denied (never written), b.txt replaced.
    if (WORKSPACE) {
      assert.equal(existsSync(join(WORKSPACE, 'a.txt')), false, 'a.txt was denied and must not exist');
      assert.equal(readFileSync(join(WORKSPACE, 'b.txt'), 'utf8'), `B: ${INPUT}\nsecond line\n`);
    }

    const before = await history(page);
    const kinds = before.map(([, kind]) => kind);
    for (const kind of ['run_started', 'model_response', 'approval_requested', 'decision', 'run_resumed', 'tool_started', 'run_completed']) {
      assert.ok(kinds.includes(kind), `the steps show ${kind}: ${kinds.join(', ')}`);
    }
    const decisions = before.filter(([, kind]) => kind === 'decision').map(([, , text]) => text);
    assert.equal(decisions.length, 2);
    assert.match(decisions[0], /^Denied by local fs_write call_1 Reason: not this one$/);
    assert.match(decisions[1], /^Approved by local fs_write call_2$/);
    const tool = page.locator('#steps li[data-kind="tool_started"]');
    assert.equal(await tool.count(), 1, 'only the approved call ran');
    assert.match(await tool.textContent(), /call_2.*done/);

    // The 409 message has been read; dismiss it (by keyboard) before the picture.
    await page.locator('#notices .notice-error').getByRole('button', { name: 'Dismiss this message' }).focus();
    await page.keyboard.press('Enter');
    await page.locator('#notices .notice-error').waitFor({ state: 'detached' });

    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.locator('#steps li.step').first().scrollIntoViewIfNeeded();
    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // A reload shows the same history, from the API alone.
    await page.reload();
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await page.locator('#steps li[data-kind="run_completed"]').waitFor();
    assert.deepEqual(await history(page), before);

    // Home again: the run left the inbox and is listed as completed.
    await page.getByRole('link', { name: '← All runs' }).click();
    const row = page.locator(`#runs-body tr[data-run-id="${runId}"]`);
    await row.waitFor();
    await row.locator('.badge', { hasText: 'completed' }).waitFor();
    await page.locator('#inbox-list').waitFor();
    assert.equal(await page.locator(`#inbox-list a[data-run-id="${runId}"]`).count(), 0);
    await page.getByLabel('Status').selectOption('completed');
    await page.locator(`#runs-body tr[data-run-id="${runId}"]`).waitFor();
    await page.getByLabel('Status').selectOption('waiting_for_approval');
    await page.waitForFunction((id) => !document.querySelector(`#runs-body tr[data-run-id="${id}"]`), runId);
  });

  test('the model\'s text grows live on the run page, then the stored turn replaces it', async (t) => {
    const page = await open(t);
    const started = await fetch(new URL('v1/runs', BASE_URL), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'talker', input: 'talk to me' }),
    });
    assert.equal(started.status, 201);
    const run = await started.json();
    await page.goto(`${BASE_URL}#/runs/${run.id}`);

    // Part of the text shows while the model still writes (the mock sends a piece every 400 ms).
    const live = page.locator('#steps li.step-live .live-text');
    await live.filter({ hasText: 'Streaming' }).waitFor();
    const partial = await live.innerText();
    assert.ok(partial.startsWith('Streaming') && partial !== 'Streaming words one by one.', partial);
    assert.equal(await page.locator('#steps li.step[data-kind="model_response"]').count(), 0, 'no stored turn yet');

    // Then the stored turn takes its place, whole, and the live step is gone.
    await page.locator('#steps li.step[data-kind="model_response"]', { hasText: 'Streaming words one by one.' }).waitFor();
    await page.locator('#steps li.step[data-kind="run_completed"]').waitFor();
    assert.equal(await page.locator('#steps li.step-live').count(), 0, 'the live text is replaced by the stored turn');
    const kinds = (await history(page)).map(([, kind]) => kind);
    assert.ok(!kinds.includes('model_delta'), `${kinds}`);
  });

  test('a run read before its events (claimed and driven to the gate between the two reads) still shows its held calls', async (t) => {
    const page = await open(t);
    const run = await startWaiting('scribe', 'read out of order');

    // The page's first read of the run answers as the run stood before it was claimed (queued, nothing
    // held), while its read of the events sees the turn held: the stream then has nothing newer to say.
    let stale = true;
    await page.route(`**/v1/runs/${run.id}`, async (route) => {
      if (!stale || route.request().method() !== 'GET') return route.continue();
      stale = false;
      const response = await route.fetch();
      const body = { ...(await response.json()), status: 'queued', pending: null, version: 1 };
      await route.fulfill({ response, json: body });
    });
    await page.goto(`${BASE_URL}#/runs/${run.id}`);
    await page.locator('#held article.call').nth(1).waitFor();
    assert.equal(await page.locator('.run-head .badge').textContent(), 'waiting for approval');
    assert.equal(stale, false, 'the stale answer was served');
  });

  test('invisible and direction-changing characters are marked, never drawn; the arguments show beside the preview (issue 31)', async (t) => {
    // Every character the page must never draw (a subset: the ones this run's texts hold, and their kin).
    const RAW = /[\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/u;
    const ARGV = 'echo build done \u2067\u2066&& rm -rf notes\u2069 #\u2069';
    const PATH = 'invoice\u202efdp.sh';
    const REASON = 'not \u202eyou';

    // How the held calls reach the page: the run's JSON (`pending.calls`), the characters raw in its strings.
    const run = await startWaiting('trickster', 'tidy up');
    const [shellCall, writeCall] = run.pending.calls;
    assert.deepEqual(shellCall.arguments, { argv: ['sh', '-c', ARGV] });
    assert.deepEqual(writeCall.arguments, { path: PATH, content: 'echo paid\n' });
    assert.ok(shellCall.preview && writeCall.preview, 'both calls have a preview');

    const page = await open(t);
    await page.goto(`${BASE_URL}#/runs/${run.id}`);
    const shell = page.locator(`#held article.call[data-call-id="${shellCall.call_id}"]`);
    const write = page.locator(`#held article.call[data-call-id="${writeCall.call_id}"]`);
    await write.waitFor();

    // The arguments are shown, open, beside the preview (side by side at this width).
    for (const card of [shell, write]) {
      const preview = card.locator('.preview-wrap pre');
      const args = card.locator('.args-wrap pre');
      assert.equal(await preview.isVisible(), true);
      assert.equal(await args.isVisible(), true, 'the arguments are visible although there is a preview');
      assert.equal(await card.locator('details').count(), 0, 'nothing is folded away');
      const [p, a] = [await preview.boundingBox(), await args.boundingBox()];
      assert.ok(a.x >= p.x + p.width && a.y < p.y + p.height, `the arguments sit beside the preview: ${JSON.stringify({ p, a })}`);
    }

    // Each character is a mark, named in its title; the text around it stays in logical order.
    const shellArgs = shell.locator('.args-wrap pre');
    assert.match(await shellArgs.textContent(), /"echo build done ⟨U\+2067⟩⟨U\+2066⟩&& rm -rf notes⟨U\+2069⟩ #⟨U\+2069⟩"/);
    assert.deepEqual(
      await shellArgs.locator('.invisible-char').evaluateAll((marks) => marks.map((m) => [m.textContent, m.title])),
      [
        ['⟨U+2067⟩', 'U+2067 RIGHT-TO-LEFT ISOLATE'],
        ['⟨U+2066⟩', 'U+2066 LEFT-TO-RIGHT ISOLATE'],
        ['⟨U+2069⟩', 'U+2069 POP DIRECTIONAL ISOLATE'],
        ['⟨U+2069⟩', 'U+2069 POP DIRECTIONAL ISOLATE'],
      ],
    );
    assert.match(await write.locator('.args-wrap pre').textContent(), /"path": "invoice⟨U\+202E⟩fdp\.sh"/);
    assert.match(await write.locator('.preview-wrap pre').textContent(), /invoice⟨U\+202E⟩fdp\.sh/);
    // Drawn in reading order: `rm` before `#` (drawn raw, the `#` comes first, and `rm` looks commented
    // out), and the path's `fdp.sh` left to right after `invoice`.
    const order = await shellArgs.evaluate((pre) => {
      const where = (needle) => {
        const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const at = node.textContent.indexOf(needle);
          if (at < 0) continue;
          const range = document.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + 1);
          const r = range.getBoundingClientRect();
          return { x: r.left, y: Math.round(r.top) };
        }
        return null;
      };
      return { rm: where('rm -rf'), hash: where(' #') };
    });
    assert.ok(order.rm && order.hash, JSON.stringify(order));
    assert.ok(order.rm.y < order.hash.y || (order.rm.y === order.hash.y && order.rm.x < order.hash.x), `rm is drawn before # : ${JSON.stringify(order)}`);

    // A warning on each held call says how many there are and which.
    const shellWarning = shell.locator('.invisible-warning');
    assert.equal(await shellWarning.isVisible(), true);
    assert.match(
      await shellWarning.textContent(),
      /^Contains \d+ invisible or direction-changing characters \(4 in the arguments[^)]*\): .*U\+2066 LEFT-TO-RIGHT ISOLATE, U\+2067 RIGHT-TO-LEFT ISOLATE, U\+2069 POP DIRECTIONAL ISOLATE\./,
    );
    assert.match(await write.locator('.invisible-warning').textContent(), /^Contains 2 invisible or direction-changing characters \(1 in the arguments, 1 in the preview\): U\+202E RIGHT-TO-LEFT OVERRIDE\./);
    // Approve is described by it, so a screen reader hears it on the way to deciding.
    const approve = shell.getByRole('button', { name: 'Approve', exact: true });
    assert.equal(await approve.getAttribute('aria-describedby'), await shellWarning.getAttribute('id'));

    // The editor spells them as JSON escapes, which parse back to the very same arguments.
    await shell.getByRole('button', { name: 'Edit…' }).click();
    const editor = shell.locator('textarea');
    const json = await editor.inputValue();
    assert.ok(!RAW.test(json), `the editor holds a raw character: ${JSON.stringify(json)}`);
    assert.match(json, /echo build done \\u2067\\u2066&& rm -rf notes\\u2069 #\\u2069/);
    assert.deepEqual(JSON.parse(json), shellCall.arguments);
    await shell.getByRole('button', { name: 'Cancel' }).click();

    /** Every text on the page and every attribute people read, with a raw character in it. */
    const rawOnPage = () =>
      page.evaluate((source) => {
        const raw = new RegExp(source, 'u');
        const found = [];
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          if (raw.test(node.textContent)) found.push(`text in ${node.parentElement.tagName}.${node.parentElement.className}: ${JSON.stringify(node.textContent)}`);
        }
        for (const el of document.querySelectorAll('[title], [aria-label], [placeholder], [alt]')) {
          for (const name of ['title', 'aria-label', 'placeholder', 'alt']) {
            const value = el.getAttribute(name);
            if (value && raw.test(value)) found.push(`${name} of ${el.tagName}: ${JSON.stringify(value)}`);
          }
        }
        for (const field of document.querySelectorAll('textarea, input')) {
          if (raw.test(field.value)) found.push(`value of ${field.tagName}#${field.id}`);
        }
        return found;
      }, RAW.source);
    await page.locator('#steps li[data-kind="approval_requested"]').waitFor();
    assert.deepEqual(await rawOnPage(), [], 'no raw character is drawn on the waiting run\'s page');

    // "Approve and remember…" spells them as escapes in its pattern too (V2 §1: shell suggests the exact argv).
    assert.deepEqual(shellCall.suggested_match, { '/argv': ['sh', '-c', ARGV] });
    await shell.getByRole('button', { name: 'Approve and remember…' }).click();
    const suggested = await shell.getByLabel('Pattern for shell (JSON)').inputValue();
    assert.match(suggested, /echo build done \\u2067\\u2066&& rm -rf notes\\u2069 #\\u2069/);
    assert.deepEqual(JSON.parse(suggested), shellCall.suggested_match);
    await shell.locator('.remember-effect', { hasText: 'No other waiting run of trickster' }).waitFor();
    assert.deepEqual(await rawOnPage(), [], 'no raw character is drawn with the remember form open');
    await shell.getByRole('button', { name: 'Cancel' }).click();

    // Deny both with a reason that holds one too: the decided cards, the decision steps and the end.
    await page.getByLabel('Reason for denying all').fill(REASON);
    await page.getByRole('button', { name: 'Deny all' }).click();
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    const decisions = page.locator('#steps li[data-kind="decision"]');
    await decisions.nth(1).waitFor();
    for (const text of await decisions.allTextContents()) assert.match(text, /Reason: not ⟨U\+202E⟩you/);
    assert.equal(await page.locator('#steps li[data-kind="tool_started"]').count(), 0, 'nothing ran');
    const marks = await page.locator('#steps .invisible-char').count();
    assert.ok(marks >= 7, `the steps mark the arguments, previews and reasons (${marks} marks)`);
    assert.deepEqual(await rawOnPage(), [], 'no raw character is drawn on the finished run\'s page');
    if (WORKSPACE) assert.equal(existsSync(join(WORKSPACE, PATH)), false, 'the denied write wrote nothing');

    // The Grants page marks them too: a grant whose pattern and reason hold them (made to match nothing).
    const grant = await call('POST', 'v1/grants', { agent: 'trickster', tool: 'fs_write', match: { '/path': 'never/\u2067*' }, reason: REASON, ttl: '1h' });
    await page.goto(`${BASE_URL}#/grants/${grant.id}`);
    const entry = page.locator(`article.grant[data-grant-id="${grant.id}"]`);
    await entry.waitFor();
    assert.equal(await entry.locator('dd.grant-match').textContent(), '/path → never/⟨U+2067⟩*');
    assert.equal(await entry.locator('dd.grant-reason').textContent(), 'not ⟨U+202E⟩you');
    await entry.getByRole('button', { name: 'Revoke…' }).click();
    assert.match(await entry.locator('form').textContent(), /matching \/path → never\/⟨U\+2067⟩\*/);
    assert.deepEqual(await rawOnPage(), [], 'no raw character is drawn on a grant\'s page');
    await entry.getByRole('button', { name: 'Revoke grant' }).click();
    await entry.and(page.locator('[data-state="revoked"]')).waitFor();
  });

  // V2 §1: kept between the two grant tests — a waiting run of keeper the first one's grant would likely
  // also decide, and leaves waiting; the second one approves it through `apply_to_waiting`.
  let spare = null;

  test('approve and remember (V2 §1): the grant decides the next run of the agent without a person, the Grants page lists it with its use, revoked the next run waits', async (t) => {
    const first = await startWaiting('keeper', 'first');
    spare = await startWaiting('keeper', 'spare');
    const [held] = first.pending.calls;
    assert.deepEqual(held.suggested_match, { '/path': 'kept/*' });

    const page = await open(t);
    await page.goto(`${BASE_URL}#/runs/${first.id}`);
    const card = page.locator(`#held article.call[data-call-id="${held.call_id}"]`);
    await card.waitFor();
    assert.deepEqual(await card.locator('.actions button').allTextContents(), ['Approve', 'Approve and remember…', 'Edit…', 'Deny…', 'Respond…']);

    // The form: the suggested pattern, 8 h, every run of keeper; the spare run is one it would likely decide.
    const remember = card.getByRole('button', { name: 'Approve and remember…' });
    await remember.click();
    assert.equal(await remember.getAttribute('aria-expanded'), 'true');
    const pattern = card.getByLabel('Pattern for fs_write (JSON)');
    await page.waitForFunction((id) => document.activeElement?.id === id, await pattern.getAttribute('id'));
    assert.deepEqual(JSON.parse(await pattern.inputValue()), { '/path': 'kept/*' });
    assert.equal(await card.getByLabel('Expires after').inputValue(), '8h');
    assert.equal(await card.getByLabel('Every run of keeper').isChecked(), true);
    const effect = card.locator('.remember-effect');
    await effect.locator(`a[data-run-id="${spare.id}"]`).waitFor();
    assert.match(await effect.textContent(), /would likely also decide 1 other waiting run of keeper/);
    assert.equal(await effect.locator(`a[data-run-id="${first.id}"]`).count(), 0, 'the run on show is not "other"');

    // Edited: checked as typed, and the list follows the pattern.
    const submit = card.getByRole('button', { name: 'Approve and remember', exact: true });
    await pattern.fill('{"path": "kept/*"}');
    await card.locator('.error-list', { hasText: '"path" is not a JSON pointer' }).waitFor();
    assert.equal(await submit.isDisabled(), true);
    await pattern.fill('{"/path": "elsewhere/*"}');
    await effect.getByText('No other waiting run of keeper has only calls this pattern matches.').waitFor();
    await card.getByLabel('Expires after').fill('1w');
    await card.locator('.error-list', { hasText: 'Expires after: "1w" is not a duration' }).waitFor();
    await card.getByLabel('This run only').check();
    await effect.getByText('A grant for this run only decides no other run', { exact: false }).waitFor();
    assert.equal(await card.getByLabel('Also approve the other waiting runs of keeper it allows').isDisabled(), true);
    await card.getByLabel('Every run of keeper').check();
    await pattern.fill('{"/path": "kept/*"}');
    await card.getByLabel('Expires after').fill('8h');
    await effect.locator(`a[data-run-id="${spare.id}"]`).waitFor();
    assert.equal(await submit.isDisabled(), false);
    await card.getByLabel('Reason (optional, kept with the grant)').fill('kept notes are fine');

    // Sent: the call is approved with `remember`, the run completes, its decision names the grant.
    const sent = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/decisions'));
    await recordAnnouncements(page);
    await submit.click();
    assert.deepEqual(JSON.parse((await sent).postData()).decisions, [
      { call_id: held.call_id, action: 'approve', remember: { scope: 'agent', match: { '/path': 'kept/*' }, ttl: '8h', reason: 'kept notes are fine' } },
    ]);
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await said(page, `Approved and remembered: fs_write ${held.call_id}.`);
    const decided = page.locator('#steps li[data-kind="decision"]');
    assert.match(await decided.innerText(), /Approved by local[\s\S]*Remembered as grant …[0-9a-f]{6}: calls like this one pass without a person/);
    const grantId = await decided.locator('a.grant-link').getAttribute('data-grant-id');
    const grant = await call('GET', `v1/grants/${grantId}`);
    assert.deepEqual(
      { agent: grant.agent, tool: grant.tool, match: grant.match, scope: grant.scope, reason: grant.reason, uses: grant.uses, created_by: grant.created_by },
      { agent: 'keeper', tool: 'fs_write', match: { '/path': 'kept/*' }, scope: 'agent', reason: 'kept notes are fine', uses: 0, created_by: 'local' },
    );
    assert.equal((await call('GET', `v1/runs/${spare.id}`)).status, 'waiting_for_approval', 'the spare run keeps waiting (the box was not ticked)');

    // A second run of keeper passes the gate without a person; its run page says which grant allowed it.
    const second = await call('POST', 'v1/runs', { agent: 'keeper', input: 'second' });
    await waitForStatus(second.id, 'completed');
    if (WORKSPACE) assert.equal(readFileSync(join(WORKSPACE, 'kept/second.txt'), 'utf8'), 'K: second\n');
    await page.goto(`${BASE_URL}#/runs/${second.id}`);
    const ran = page.locator('#steps li[data-kind="tool_started"]');
    await ran.waitFor();
    assert.match(await ran.innerText(), new RegExp(`Allowed by grant …${grantId.replaceAll('-', '').slice(-6)}, without a person\\.`));
    assert.equal(await page.locator('#steps li[data-kind="approval_requested"]').count(), 0, 'nobody was asked');

    // Its link opens the grant's own page: one use.
    await ran.locator('a.grant-link').click();
    await page.waitForURL(new RegExp(`#/grants/${grantId}$`));
    await page.locator('h1', { hasText: 'Grant …' }).waitFor();
    await page.waitForFunction(() => document.activeElement?.tagName === 'H1');
    const own = page.locator(`article.grant[data-grant-id="${grantId}"]`);
    assert.equal(await own.locator('dd.grant-uses').textContent(), '1');
    assert.equal(await page.locator('.site-nav a[aria-current]').textContent(), 'Grants');

    // The Grants page, from the navigation: the grant is listed, in force, with its facts.
    await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Grants' }).click();
    await page.waitForURL(/#\/grants$/);
    const entry = page.locator(`#grant-list article.grant[data-grant-id="${grantId}"]`);
    await entry.waitFor();
    assert.equal(await page.locator('.site-nav a[aria-current="page"]').textContent(), 'Grants');
    assert.equal(await entry.getAttribute('data-state'), 'active');
    assert.equal(await entry.locator('dd.grant-uses').textContent(), '1');
    assert.equal(await entry.locator('dd.grant-agent').textContent(), 'keeper');
    assert.equal(await entry.locator('dd.grant-tool').textContent(), 'fs_write');
    assert.equal(await entry.locator('dd.grant-match').textContent(), '/path → kept/*');
    assert.equal(await entry.locator('dd.grant-scope').textContent(), 'every run of keeper');
    assert.match(await entry.locator('dd.grant-creator').textContent(), /^local, /);
    assert.equal(await entry.locator('dd.grant-reason').textContent(), 'kept notes are fine');
    assert.match(await entry.locator('dd.grant-expires').textContent(), /^in [78] h$/);

    // Refusals are shown like the rest of the app's: a 403 (role) keeps the focus on the button, a 409
    // reads the grant again.
    const revoke = entry.getByRole('button', { name: 'Revoke…' });
    await revoke.click();
    const confirm = entry.getByRole('button', { name: 'Revoke grant' });
    await page.waitForFunction(() => document.activeElement?.textContent === 'Revoke grant');
    assert.match(await entry.locator('form').textContent(), /fs_write calls of keeper matching \/path → kept\/\* will ask a person again/);
    const refuse = (status, detail) =>
      page.route('**/v1/grants/*', (route) =>
        route.request().method() === 'DELETE'
          ? route.fulfill({ status, contentType: 'application/problem+json', body: JSON.stringify({ title: 'Refused', status, detail }) })
          : route.continue(),
      );
    await refuse(403, 'the token lacks the approver role');
    await confirm.click();
    await page.locator('#notices .notice-error', { hasText: 'The grant was not revoked.' }).waitFor();
    assert.match(await page.locator('#notices .notice-error').textContent(), /lacks the approver role.*needs a token with the approver role/);
    await page.waitForFunction(() => document.activeElement?.textContent === 'Revoke grant');
    await page.unroute('**/v1/grants/*');
    await refuse(409, `grant ${grantId} is already revoked`);
    await confirm.click();
    await page.locator('#notices .notice-error', { hasText: 'is already revoked' }).waitFor();
    await page.unroute('**/v1/grants/*');
    // Read again (the focus then on its heading), it is still in force (the 409 was staged): Revoke… once
    // more, for real.
    await page.waitForFunction(() => document.activeElement?.classList.contains('grant-title'));
    assert.equal(await entry.getByRole('button', { name: 'Revoke…' }).getAttribute('aria-expanded'), 'false');
    await entry.getByRole('button', { name: 'Revoke…' }).click();
    await recordAnnouncements(page);
    await entry.getByRole('button', { name: 'Revoke grant' }).click();
    await entry.and(page.locator('[data-state="revoked"]')).waitFor();
    assert.match(await entry.locator('dd.grant-revoked').textContent(), /^by local, /);
    assert.equal(await entry.getByRole('button', { name: 'Revoke…' }).count(), 0);
    await page.waitForFunction(() => document.activeElement?.classList.contains('grant-title'));
    await said(page, `Revoked grant …${grantId.replaceAll('-', '').slice(-6)}: fs_write calls of keeper matching /path → kept/* ask a person again.`);
    assert.notEqual((await call('GET', `v1/grants/${grantId}`)).revoked_at, null);

    // Active only: it is gone; all, past included: it is listed as revoked.
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForFunction((id) => !document.querySelector(`#grant-list article[data-grant-id="${id}"]`), grantId);
    await page.getByLabel('Show').selectOption('all');
    await page.locator(`#grant-list article.grant[data-grant-id="${grantId}"][data-state="revoked"]`).waitFor();
    assert.equal(await page.locator('#grants-heading').textContent(), 'All grants');

    // Revoked, it allows nothing: a third run of keeper waits for a person.
    const third = await startWaiting('keeper', 'third');
    await call('POST', `v1/runs/${third.id}/decisions`, { turn_digest: third.pending.turn_digest, deny_all: true, reason: 'cleaning up' });

    // In a turn held for another call, a call a grant allowed says which grant, linked (`calls[].grant`).
    const narrow = await call('POST', 'v1/grants', { agent: 'scribe', tool: 'fs_write', match: { '/path': 'a.txt' }, ttl: '1h' });
    const mixed = await startWaiting('scribe', 'one granted, one asked');
    assert.deepEqual(mixed.pending.calls.map((c) => [c.state, c.grant ?? null]), [['allowed', narrow.id], ['waiting', null]]);
    await page.goto(`${BASE_URL}#/runs/${mixed.id}`);
    const allowed = page.locator('#held article.call[data-call-id="call_1"]');
    await allowed.locator('p.granted').waitFor();
    assert.match(await allowed.locator('p.granted').innerText(), /^Allowed by grant …[0-9a-f]{6}: it runs together with the approved calls/);
    assert.equal(await allowed.locator('a.grant-link').getAttribute('href'), `#/grants/${narrow.id}`);
    assert.equal(await allowed.locator('.actions button').count(), 0, 'nothing to decide on it');
    await call('DELETE', `v1/grants/${narrow.id}`);
    await call('POST', `v1/runs/${mixed.id}/decisions`, { turn_digest: mixed.pending.turn_digest, deny_all: true, reason: 'cleaning up' });
  });

  test('approve and remember, also approving the waiting runs it allows: the grant is made with apply_to_waiting, both runs complete', async (t) => {
    assert.ok(spare, 'the previous test left a waiting run of keeper');
    const again = await startWaiting('keeper', 'again');
    const page = await open(t);
    await page.goto(`${BASE_URL}#/runs/${again.id}`);
    const card = page.locator('#held article.call').first();
    await card.getByRole('button', { name: 'Approve and remember…' }).click();
    await card.locator(`.remember-effect a[data-run-id="${spare.id}"]`).waitFor();
    await card.getByLabel('Also approve the other waiting runs of keeper it allows').check();
    const made = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/v1/grants'));
    await card.getByRole('button', { name: 'Approve and remember', exact: true }).click();
    const body = JSON.parse((await made).postData());
    assert.deepEqual(body, { agent: 'keeper', tool: 'fs_write', match: { '/path': 'kept/*' }, scope: 'agent', ttl: '8h', apply_to_waiting: true });
    const notice = page.locator('#notices .notice-success', { hasText: 'made.' });
    await notice.waitFor();
    assert.match(await notice.textContent(), new RegExp(`It approved 1 other waiting run: …${spare.id.replaceAll('-', '').slice(-6)}\\. It approved this run too\\.`));
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    await waitForStatus(spare.id, 'completed');
    if (WORKSPACE) {
      assert.equal(readFileSync(join(WORKSPACE, 'kept/spare.txt'), 'utf8'), 'K: spare\n');
      assert.equal(readFileSync(join(WORKSPACE, 'kept/again.txt'), 'utf8'), 'K: again\n');
    }
    const grantId = await notice.locator('a').getAttribute('href').then((href) => href.split('/').pop());
    await call('DELETE', `v1/grants/${grantId}`);
  });

  test(
    'an escalated run (V2 §4): the inbox and the run page say when and whom it told, its step is in the timeline, a decision through a signed link says so, and the names are text',
    { skip: !process.env.HOOK_PORT },
    async (t) => {
      const run = await startWaiting('watcher', 'watch me');
      // The server's sweep escalates the held turn once it has waited a second.
      const escalated = await eventually('the escalation', 20, async () => (await call('GET', `v1/runs/${run.id}`)).pending?.escalated);
      assert.deepEqual(escalated.notified, ['ops', 'oncall']);

      // The inbox: the run's entry says it, in words inside its link (so in the link's name), and is marked.
      const page = await open(t);
      await page.goto(BASE_URL);
      const item = page.locator(`#inbox-list a.inbox-item[data-run-id="${run.id}"]`);
      const line = item.locator('.escalation');
      await line.waitFor();
      assert.match(await line.innerText(), /^escalated (just now|\d+ s ago) · notified ops, oncall$/);
      assert.equal(await line.locator('.badge.escalated').textContent(), 'escalated');
      assert.equal(await line.locator('time').getAttribute('datetime'), escalated.at);
      assert.match(await item.getAttribute('class'), /\bis-escalated\b/);
      await page.getByRole('link', { name: /watch me.*escalated.*notified ops, oncall/ }).waitFor();
      assert.equal(await page.locator('#inbox-list a.inbox-item:not(.is-escalated) .escalation').count(), 0, 'only escalated runs say so');

      // Names that hold markup or a direction-changing character are drawn as text (a staged answer).
      const HOSTILE = ['<img src=x onerror="window.__pwned = 1">', 'on\u202ecall'];
      const inboxRead = (url) => url.pathname.endsWith('/v1/runs') && url.searchParams.get('status') === 'waiting_for_approval';
      await page.route(
        inboxRead,
        async (route) => {
          const response = await route.fetch();
          const body = await response.json();
          for (const r of body.runs) if (r.id === run.id) r.pending.escalated.notified = HOSTILE;
          await route.fulfill({ response, json: body });
        },
      );
      await page.reload();
      const names = page.locator(`#inbox-list a.inbox-item[data-run-id="${run.id}"] .escalation .notified`);
      await names.filter({ hasText: 'onerror' }).waitFor();
      assert.equal(await names.textContent(), '<img src=x onerror="window.__pwned = 1">, on⟨U+202E⟩call');
      assert.equal(await names.locator('img').count(), 0, 'no element was made from the name');
      assert.equal(await names.locator('.invisible-char').getAttribute('title'), 'U+202E RIGHT-TO-LEFT OVERRIDE');
      assert.equal(await page.evaluate(() => window.__pwned ?? null), null);
      await page.unroute(inboxRead);

      // The notifiers were told, each with a signed Approve link per call.
      const message = await eventually('the message to ops', 20, () =>
        posted.find((m) => m.path === '/ops' && JSON.stringify(m.body ?? '').includes(run.id)),
      );
      assert.ok(posted.some((m) => m.path === '/oncall' && JSON.stringify(m.body ?? '').includes(run.id)), 'oncall was told too');
      const buttons = message.body.blocks.flatMap((block) => block.elements ?? []);
      const approveLink = buttons.find((b) => b.action_id === 'approve-1')?.url;
      assert.match(approveLink ?? '', /\/approve\/[^/]+$/);

      // The link's page decides nothing until its button is pressed; then call_1 is approved as ops-desk.
      const linkContext = await browser.newContext();
      t.after(() => linkContext.close());
      const linkPage = await linkContext.newPage();
      await linkPage.goto(approveLink);
      assert.equal((await call('GET', `v1/runs/${run.id}`)).pending.calls[0].decision, null, 'opening the link decides nothing');
      await linkPage.getByRole('button', { name: 'Approve' }).click();
      await linkPage.locator('h1', { hasText: 'Approved' }).waitFor();
      const after = await call('GET', `v1/runs/${run.id}`);
      assert.equal(after.pending.calls[0].decision.actor, 'ops-desk');
      assert.deepEqual(after.pending.escalated, escalated, 'the turn stays escalated while it waits');

      // The run page: the held panel says it (after how long, from the event), the live region too, and the
      // timeline shows the escalation and the decision made through the link.
      await page.goto(`${BASE_URL}#/runs/${run.id}`);
      const note = page.locator('#held .escalation');
      await note.filter({ hasText: 'after 1s' }).waitFor();
      assert.match(await note.innerText(), /^escalated after 1s · (just now|\d+ s ago) · notified ops, oncall$/);
      await page.locator('#announcer', { hasText: 'Escalated: notified ops, oncall' }).waitFor({ state: 'attached' });
      const step = page.locator('#steps li[data-kind="approval_escalated"]');
      await step.waitFor();
      assert.equal(await step.locator('.step-title').innerText(), 'Approval escalated');
      assert.equal(await step.locator('.step-body').innerText(), 'Still waiting after 1s: notified ops, oncall.');
      const viaLink = (await history(page)).filter(([, kind]) => kind === 'decision').map(([, , text]) => text);
      assert.deepEqual(viaLink, ['Approved by ops-desk via signed link fs_write call_1']);
      const card = page.locator('#held article.call[data-call-id="call_2"]');
      assert.equal(await card.getByRole('button', { name: 'Approve', exact: true }).count(), 1, 'an escalated call is decided as any');

      // Deny the other call in the page: the run completes; its decision is not marked.
      await page.getByLabel('Reason for denying all').fill('enough');
      await page.getByRole('button', { name: 'Deny all' }).click();
      await page.locator('#answer', { hasText: 'done' }).waitFor();
      await page.locator('#held').waitFor({ state: 'hidden' });
      const decisions = (await history(page)).filter(([, kind]) => kind === 'decision').map(([, , text]) => text);
      assert.deepEqual(decisions, ['Approved by ops-desk via signed link fs_write call_1', 'Denied by local fs_write call_2 Reason: enough']);
      if (WORKSPACE) {
        assert.equal(readFileSync(join(WORKSPACE, 'w1.txt'), 'utf8'), 'W1: watch me\n');
        assert.equal(existsSync(join(WORKSPACE, 'w2.txt')), false, 'w2.txt was denied');
      }
    },
  );

  test(
    'a quorum call (approvals = 2): the first approval shows "1 of 2", a second one by the same person is refused and explained, a second approver completes the run',
    { skip: !process.env.AUTH_BASE_URL || !process.env.AUTH_TOKEN_2 },
    async (t) => {
      const server = process.env.AUTH_BASE_URL;
      const [ALICE, BOB] = [process.env.AUTH_TOKEN, process.env.AUTH_TOKEN_2];
      const started = await fetch(new URL('v1/runs', server), {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ALICE}` },
        body: JSON.stringify({ agent: 'pair', input: 'two keys', wait: true }),
      });
      assert.equal(started.status, 201);
      const run = await started.json();
      assert.equal(run.status, 'waiting_for_approval');
      const [held] = run.pending.calls;
      assert.deepEqual(held.approvals, { required: 2, given: [] }, 'the API marks the call as a quorum call');
      const cardOf = (page) => page.locator(`#held article.call[data-call-id="${held.call_id}"]`);
      const buttons = (card) => card.locator('.actions button').allTextContents();

      // Alice sees how many approvals it needs, and only approve and deny, with the reason why.
      const alice = await open(t, { token: ALICE });
      await alice.goto(`${server}#/runs/${run.id}`);
      const card = cardOf(alice);
      await card.waitFor();
      assert.equal(await card.locator('.quorum-count').textContent(), '0 of 2 approvals. Needs 2.');
      assert.equal(await card.locator('.quorum-hint').textContent(), 'Needs 2 approvals from different people: approve or deny only.');
      assert.deepEqual(await buttons(card), ['Approve', 'Deny…'], 'no edit or respond on a quorum call');
      assert.equal(await card.locator('.quorum-badge').textContent(), 'quorum: 2');
      const approve = card.getByRole('button', { name: 'Approve', exact: true });
      assert.deepEqual(
        await approve.evaluate((b) => b.getAttribute('aria-describedby').split(' ').map((id) => document.getElementById(id)?.textContent)),
        ['0 of 2 approvals. Needs 2.', 'Needs 2 approvals from different people: approve or deny only.'],
        'Approve is described by the count and the hint',
      );
      await alice.locator('.live', { hasText: 'Live' }).waitFor();

      // Her approval is in: "1 of 2", and the page says the run waits for another approver.
      await approve.click();
      await card.locator('.quorum-count', { hasText: '1 of 2 approvals — alice. Needs 1 more.' }).waitFor();
      assert.equal(
        await card.locator('.quorum-mine').textContent(),
        'Your approval is in. The run waits for another approver; you can still deny this call.',
      );
      assert.deepEqual(await buttons(card), ['Deny…'], 'no second approval offered');
      assert.equal(await alice.locator('#held-heading').textContent(), 'Waiting for another approver');
      assert.equal(
        await alice.locator('#held > p').first().textContent(),
        `Your approval is in. The run waits for someone else to approve: fs_write ${held.call_id} needs 1 more approval.`,
      );
      assert.equal(await alice.getByRole('button', { name: /^Approve all/ }).count(), 0, 'nothing left for her to approve');
      assert.equal(await alice.getByRole('button', { name: 'Deny all' }).count(), 1);
      assert.equal(await alice.locator('.run-head .badge').textContent(), 'waiting for approval');
      await alice.waitForFunction(() => document.activeElement?.id === 'held-heading');
      await alice.locator('#announcer', { hasText: 'Your approval is in' }).waitFor({ state: 'attached' });
      const firstVote = alice.locator('#steps li[data-kind="decision"]');
      await firstVote.waitFor();
      assert.match(await firstVote.innerText(), /Approved by alice[\s\S]*Approvals: 1 of 2 approvals — alice\. Needs 1 more\./);

      // Alice again, on a page that does not know who she is: Approve is offered, the server refuses the
      // second approval (409), and the page says so and then shows her approval as in.
      const again = await open(t, { token: ALICE });
      await again.goto(`${server}#/runs/${run.id}`);
      const card2 = cardOf(again);
      await card2.locator('.quorum-count', { hasText: '1 of 2 approvals — alice. Needs 1 more.' }).waitFor();
      await card2.getByRole('button', { name: 'Approve', exact: true }).click();
      const refused = again.locator('#notices .notice-error', { hasText: 'You have already approved this call.' });
      await refused.waitFor();
      assert.match(await refused.textContent(), /alice already approved call .*distinct people.*the run waits for another approver/);
      await card2.locator('.quorum-mine').waitFor();
      assert.deepEqual(await buttons(card2), ['Deny…']);

      // Bob, the second approver, completes it; the run resumes and writes the note.
      const bob = await open(t, { token: BOB });
      await bob.goto(`${server}#/runs/${run.id}`);
      const card3 = cardOf(bob);
      await card3.locator('.quorum-count', { hasText: '1 of 2 approvals — alice. Needs 1 more.' }).waitFor();
      assert.equal(await card3.locator('.quorum-mine').count(), 0, 'bob has not approved yet');
      assert.deepEqual(await buttons(card3), ['Approve', 'Deny…']);
      await card3.getByRole('button', { name: 'Approve', exact: true }).click();
      await bob.locator('#answer', { hasText: 'done' }).waitFor();
      const votes = (await history(bob)).filter(([, kind]) => kind === 'decision').map(([, , text]) => text);
      assert.deepEqual(votes, [
        `Approved by alice fs_write ${held.call_id} Approvals: 1 of 2 approvals — alice. Needs 1 more.`,
        `Approved by bob fs_write ${held.call_id} Approvals: 2 of 2 approvals — alice, bob.`,
      ]);
      assert.equal(await bob.locator('#steps li[data-kind="tool_started"]').count(), 1, 'the call ran once');

      // Alice's page, waiting for another approver all along, follows the run to its end.
      await alice.locator('#answer', { hasText: 'done' }).waitFor();
      await alice.locator('#held').waitFor({ state: 'hidden' });
      if (process.env.AUTH_WORKSPACE) assert.equal(readFileSync(join(process.env.AUTH_WORKSPACE, 'q.txt'), 'utf8'), 'Q: two keys\n');
    },
  );

  test('with auth on: a 401 asks for the token, and the run is followed live with it', { skip: !process.env.AUTH_BASE_URL }, async (t) => {
    const page = await open(t);
    await page.goto(process.env.AUTH_BASE_URL);

    // No token yet: the page says so and offers the field.
    await page.locator('#auth-banner', { hasText: 'Token needed.' }).waitFor();
    const field = page.getByLabel('API token', { exact: true });
    await field.waitFor();
    await field.fill(process.env.AUTH_TOKEN);
    await page.getByRole('button', { name: 'Save token' }).click();
    await page.locator('#auth-banner').waitFor({ state: 'hidden' });
    assert.equal(await page.evaluate(() => localStorage.getItem('tollgate.token')), process.env.AUTH_TOKEN);

    await page.getByLabel('Input').fill('with a token');
    await page.getByRole('button', { name: 'Start run' }).click();
    await page.locator('.notice-success a', { hasText: 'Open it' }).click();
    await page.locator('#held article.call').nth(1).waitFor();
    await page.locator('.live', { hasText: 'Live' }).waitFor();

    // Approve both at once; the end arrives over the fetch()-read stream that carries the token.
    await page.getByRole('button', { name: 'Approve all 2' }).click();
    await page.locator('#answer', { hasText: 'done' }).waitFor();
    const decisions = await page.locator('#steps li[data-kind="decision"]').allTextContents();
    assert.equal(decisions.length, 2);
    for (const text of decisions) assert.match(text, /Approved by alice.*fs_write call_\d/);
  });
});

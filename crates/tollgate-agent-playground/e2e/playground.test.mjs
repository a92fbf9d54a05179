// The playground in a real headless Chromium, driven by playwright-core, against a running
// `tollgate serve` (started by tests/browser.rs, which sets the environment below).
//
//   BASE_URL       the server without auth, whose agent `scribe` writes a.txt and b.txt in one turn,
//                  whose agent `talker` streams "Streaming words one by one." slowly (a mock model), and
//                  whose agent `trickster` holds a shell call and an fs_write whose arguments hide
//                  direction-changing characters (issue 31)
//   WORKSPACE      that server's workspace folder (to check the files on disk)
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

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});

after(async () => {
  await browser?.close();
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
    if (m.type() === 'error' && !/status of (401|409)/.test(m.text())) errors.push(m.text());
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
  });

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

// Unit tests of the playground's DOM-free modules: the schema check of the argument editor, the SSE
// parser used when a token must be sent, the preview/diff and time formatting, which held calls take
// a decision, a quorum call's approvals in words, an escalated run's summary, which characters are shown as marks (invisible.js), and
// grants (grant.js): the glob and JSON-pointer matching that says which waiting runs a grant would likely
// also decide, the checks of a pattern and an expiry, a grant in words.
//
// Run: node --test crates/tollgate-agent-playground/e2e/units.test.mjs (needs node only)

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { checkArguments, describe as describeErrors, parseJson, validate } from '../assets/schema.js';
import { parseDelta, SseParser } from '../assets/sse.js';
import { diffLines, duration, isUnifiedDiff, openCalls, relative, settledNote, shortId, summarize } from '../assets/format.js';
import { decisionAnnouncement, idTail, runLinkName, runSummary, runTag, statusText, truncate } from '../assets/format.js';
import { approvalsText, approvedBy, heldSummary, notifiedText, quorumHint } from '../assets/format.js';
import { appliedText, checkPattern, globMatches, grantState, grantSummary, grantTag, matchesArguments, matchLines, pointerGet, ttlProblem, wouldDecide } from '../assets/grant.js';
import { charName, escapeInvisibleJson, hasRightToLeft, invisibleIn, invisibleWarning, markedText, splitInvisible } from '../assets/invisible.js';

// The schemas of two built-in tools, as GET /v1/tools returns them.
const FS_WRITE = {
  type: 'object',
  properties: {
    path: { type: 'string', description: 'File to write, relative to the workspace root.' },
    content: { type: 'string', description: 'The whole new content of the file.' },
  },
  required: ['path', 'content'],
  additionalProperties: false,
};
const SHELL = {
  type: 'object',
  properties: {
    argv: { type: 'array', items: { type: 'string' }, minItems: 1 },
    timeout_secs: { type: 'integer', minimum: 1, maximum: 600 },
  },
  required: ['argv'],
  additionalProperties: false,
};
const HTTP = {
  type: 'object',
  properties: {
    method: { type: 'string', enum: ['GET', 'POST'] },
    headers: { type: 'object', additionalProperties: { type: 'string' } },
    body: { type: ['string', 'null'] },
  },
  required: ['method'],
};

describe('schema check', () => {
  test('valid arguments have no problems', () => {
    assert.deepEqual(validate(FS_WRITE, { path: 'a.txt', content: '' }), []);
    assert.deepEqual(validate(SHELL, { argv: ['ls', '-l'], timeout_secs: 30 }), []);
    assert.deepEqual(validate(HTTP, { method: 'GET', headers: { accept: 'text/plain' }, body: null, extra: 1 }), []);
  });

  test('required, types, unknown properties, each with its JSON pointer', () => {
    assert.deepEqual(validate(FS_WRITE, { path: 7, mode: 'append' }), [
      { path: '', message: 'is missing the required property "content"' },
      { path: '/path', message: 'must be a string, not a number' },
      { path: '/mode', message: 'is not allowed: "mode" is not a property of this tool (known: path, content)' },
    ]);
  });

  test('items, integer, bounds, enum, additionalProperties schema, type lists', () => {
    assert.deepEqual(describeErrors(validate(SHELL, { argv: ['ls', 3], timeout_secs: 1.5 })), [
      '/argv/1: must be a string, not a number',
      '/timeout_secs: must be an integer, not a number',
    ]);
    assert.deepEqual(describeErrors(validate(SHELL, { argv: [], timeout_secs: 601 })), [
      '/argv: must have at least 1 item(s)',
      '/timeout_secs: must be at most 600',
    ]);
    assert.deepEqual(describeErrors(validate(HTTP, { method: 'PUT', headers: { a: 1 }, body: 2 })), [
      '/method: must be one of "GET", "POST"',
      '/headers/a: must be a string, not a number',
      '/body: must be a string or a null, not a number',
    ]);
  });

  test('pointers escape / and ~', () => {
    const schema = { type: 'object', properties: {}, additionalProperties: false };
    assert.deepEqual(validate(schema, { 'a/b~c': 1 }).map((e) => e.path), ['/a~1b~0c']);
  });

  test('JSON syntax errors say where', () => {
    const result = parseJson('{\n  "path": "a.txt",\n}');
    assert.equal(result.ok, false);
    assert.match(result.error.message, /^Invalid JSON: /);
    assert.equal(result.error.line, 3);
    assert.equal(parseJson('  ').ok, false);
  });

  test('edited text: syntax first, then an object, then the schema', () => {
    assert.deepEqual(checkArguments('{"path": "a.txt", "content": "x"}', FS_WRITE).problems, []);
    assert.match(checkArguments('{"path": ', FS_WRITE).problems[0], /^Invalid JSON/);
    assert.deepEqual(checkArguments('[1]', FS_WRITE).problems, ['arguments: must be an object, not an array']);
    assert.deepEqual(checkArguments('{"x": 1}', undefined).problems, [], 'no schema known: any object');
  });
});

describe('SSE parser', () => {
  function parse(chunks) {
    const events = [];
    const parser = new SseParser((e) => events.push(e));
    for (const chunk of chunks) parser.push(chunk);
    return events;
  }

  test('events as the server sends them, with keep-alive comments', () => {
    const stream = ': keep-alive\n\nid: 1\nevent: run_started\ndata: {"seq":1}\n\nid: 2\nevent: decision\ndata: {"seq":2}\n\n';
    assert.deepEqual(parse([stream]), [
      { id: '1', event: 'run_started', data: '{"seq":1}' },
      { id: '2', event: 'decision', data: '{"seq":2}' },
    ]);
  });

  test('chunks split anywhere, CR LF split across chunks, multi-line data', () => {
    const stream = 'id: 7\r\nevent: model_response\r\ndata: line one\r\ndata:line two\r\n\r\ndata: x\n\n';
    const whole = parse([stream]);
    assert.deepEqual(whole, [
      { id: '7', event: 'model_response', data: 'line one\nline two' },
      { id: '7', event: 'message', data: 'x' },
    ]);
    for (let cut = 1; cut < stream.length; cut += 1) {
      assert.deepEqual(parse([stream.slice(0, cut), stream.slice(cut)]), whole, `cut at ${cut}`);
    }
    assert.deepEqual(parse([...stream]), whole, 'one character at a time');
  });

  test('an event without data is not dispatched; an incomplete one waits', () => {
    assert.deepEqual(parse(['event: x\n\n', 'data: partial']), []);
  });
});

describe('formatting', () => {
  test('unified diffs are recognised and their lines classified', () => {
    const diff = '--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n-old\n+new\n same\n--- not a header\n\\ No newline at end of file\n';
    assert.equal(isUnifiedDiff(diff), true);
    assert.equal(isUnifiedDiff('create a.txt (5 bytes)'), false);
    assert.equal(isUnifiedDiff('--- a\n+++ b\n'), false, 'no hunk');
    assert.deepEqual(
      diffLines(diff).map((l) => l.kind),
      ['file', 'file', 'hunk', 'del', 'add', 'context', 'del', 'note'],
    );
  });

  test('relative times and durations', () => {
    const now = Date.parse('2026-11-29T10:00:00Z');
    assert.equal(relative('2026-11-29T09:55:00Z', now), '5 min ago');
    assert.equal(relative('2026-11-30T09:00:00Z', now), 'in 23 h');
    assert.equal(relative('2026-11-29T10:00:02Z', now), 'just now');
    assert.equal(duration(42_000), '42 s');
    assert.equal(duration(3 * 86_400_000), '3 d');
  });

  test('ids and argument summaries', () => {
    assert.equal(shortId('0193b0c6-1111-7000-8000-000000000000'), '0193b0c6');
    assert.equal(summarize({ path: 'a.txt', content: 'hi' }), 'path: "a.txt", content: "hi"');
    assert.equal(summarize({ content: 'x'.repeat(300) }, 20).length, 20);
  });
});

describe('held calls', () => {
  // A turn held again after a crash, as GET /v1/runs/{id} shows it: call_1 ran before the crash, call_2
  // is in doubt, call_3 was decided, call_4 is allow-gated, call_5 was refused.
  const call = (call_id, gate, in_doubt, state, takes_decision, extra = {}) =>
    ({ call_id, tool: 'fs_write', arguments: {}, gate, preview: null, in_doubt, decision: null, state, takes_decision, result: null, ...extra });
  const pending = {
    turn_digest: 'sha256:01',
    expires_at: null,
    calls: [
      call('call_1', 'ask', false, 'finished', false, { result: { content: 'wrote a', is_error: false } }),
      call('call_2', 'ask', true, 'in_doubt', true),
      call('call_3', 'ask', false, 'decided', false, { decision: { action: 'approve', actor: 'bo', at: '2026-11-29T10:00:00.000Z' } }),
      call('call_4', 'allow', false, 'allowed', false),
      call('call_5', 'forbid', false, 'refused', false),
    ],
  };

  test('only the calls the server says take a decision get buttons', () => {
    assert.deepEqual(openCalls(pending).map((c) => c.call_id), ['call_2']);
    assert.deepEqual(openCalls(null), []);
    assert.deepEqual(openCalls({ calls: [call('c', 'ask', false, 'waiting', true)] }).map((c) => c.call_id), ['c']);
  });

  test('a call that takes no decision says why', () => {
    assert.match(settledNote(pending.calls[0]), /ran to its end before a crash/);
    assert.match(settledNote(pending.calls[3]), /Allowed by its gate/);
    assert.match(settledNote(pending.calls[4]), /Refused before any gate/);
  });
});

describe('quorum calls (approvals = N)', () => {
  const quorum = (call_id, given, extra = {}) => ({
    call_id,
    tool: 'fs_write',
    arguments: {},
    gate: 'ask',
    preview: null,
    in_doubt: false,
    decision: null,
    state: 'waiting',
    takes_decision: true,
    result: null,
    approvals: { required: 2, given },
    ...extra,
  });

  test('the count says who approved and how many are missing, in words', () => {
    assert.equal(approvalsText({ required: 2, given: [] }), '0 of 2 approvals. Needs 2.');
    assert.equal(approvalsText({ required: 2, given: ['alice'] }), '1 of 2 approvals — alice. Needs 1 more.');
    assert.equal(approvalsText({ required: 3, given: ['alice', 'bob'] }), '2 of 3 approvals — alice, bob. Needs 1 more.');
    assert.equal(approvalsText({ required: 2, given: ['alice', 'bob'] }), '2 of 2 approvals — alice, bob.');
    assert.equal(approvalsText({ required: 2, given: ['alice'] }, { open: false }), '1 of 2 approvals — alice.', 'a denied call: no "needs"');
    assert.equal(approvalsText(null), null, 'a call one decision settles');
    assert.equal(approvalsText(undefined), null, 'an event from before quorums');
    assert.equal(quorumHint({ required: 2, given: [] }), 'Needs 2 approvals from different people: approve or deny only.');
  });

  test('this person\'s approval is in when this page gave it or their name is among the approvals', () => {
    const call = quorum('call_1', ['alice']);
    assert.equal(approvedBy(call, 'alice'), true);
    assert.equal(approvedBy(call, 'bob'), false);
    assert.equal(approvedBy(call, ''), false, 'an unknown actor approved nothing');
    assert.equal(approvedBy(call, '', new Set(['call_1'])), true);
    assert.equal(approvedBy({ ...call, approvals: null }, 'alice', new Set(['call_1'])), false, 'not a quorum call');
  });

  test('the panel says the run waits for another approver once every call left is one this person approved', () => {
    const pending = { turn_digest: 'sha256:01', expires_at: null, calls: [quorum('call_1', ['alice'])] };
    assert.deepEqual(heldSummary(pending, new Set()), {
      heading: 'Waiting for a decision',
      text: '1 of 1 call(s) need your decision. Nothing of this turn has run yet.',
    });
    assert.deepEqual(heldSummary(pending, new Set(['call_1'])), {
      heading: 'Waiting for another approver',
      text: 'Your approval is in. The run waits for someone else to approve: fs_write call_1 needs 1 more approval.',
    });
    const two = { ...pending, calls: [quorum('call_1', ['alice']), quorum('call_2', [])] };
    assert.deepEqual(heldSummary(two, new Set(['call_1'])), {
      heading: 'Waiting for a decision',
      text:
        '1 of 2 call(s) need your decision. Your approval is in on 1 call, which waits for another approver ' +
        '(fs_write call_1 needs 1 more approval). Nothing of this turn has run yet.',
    });
    const decided = { ...pending, calls: [quorum('call_1', ['alice', 'bob'], { takes_decision: false, state: 'decided' })] };
    assert.equal(heldSummary(decided, new Set()).text, 'Every call is decided; the run resumes.');
  });

  test('a first approval is said with its count and who the run waits for', () => {
    const open = [{ call_id: 'call_1', tool: 'fs_write', approvals: { required: 2, given: [] } }];
    const waiting = [{ call_id: 'call_1', tool: 'fs_write', approvals: { required: 2, given: ['alice'] } }];
    assert.equal(
      decisionAnnouncement({ decisions: [{ call_id: 'call_1', action: 'approve' }] }, open, 0, waiting),
      'Approved: fs_write call_1. Your approval is in: fs_write call_1 has 1 of 2 approvals, waiting for another approver.',
    );
    const two = [...open, { call_id: 'call_2', tool: 'shell' }];
    assert.equal(
      decisionAnnouncement({ decisions: [{ call_id: 'call_1', action: 'approve' }] }, two, 1, waiting),
      'Approved: fs_write call_1. 1 call left to decide. fs_write call_1 has 1 of 2 approvals, waiting for another approver.',
    );
    assert.equal(
      decisionAnnouncement({ approve_all: true }, two, 0, waiting),
      'Approved all 2 calls. Your approval is in: fs_write call_1 has 1 of 2 approvals, waiting for another approver.',
    );
  });
});

describe('names and announcements', () => {
  // UUIDv7 ids of runs started in the same second share their first block.
  const A = '01a22f8d-5ac9-7141-aeb7-33a6523f9a2c';
  const B = '01a22f8d-6b10-7c2e-9d4f-0e1b2c7d4e5f';

  test('run links are told apart by the tail of the id and the input', () => {
    assert.equal(idTail(A), '3f9a2c');
    assert.notEqual(idTail(A), idTail(B));
    assert.equal(runTag(A), '…3f9a2c');
    assert.equal(runLinkName({ id: A, input: 'hello from the browser' }), 'Run …3f9a2c: hello from the browser');
    assert.equal(runLinkName({ id: A, input: '  two\n lines  ' }), 'Run …3f9a2c: two lines');
    assert.equal(runLinkName({ id: A, input: '' }), 'Run …3f9a2c');
    const long = runLinkName({ id: B, input: 'x'.repeat(100) });
    assert.equal(long, `Run …7d4e5f: ${'x'.repeat(39)}…`);
  });

  test('truncation counts characters, not UTF-16 units', () => {
    assert.equal(truncate('héllo wörld', 20), 'héllo wörld');
    assert.equal(truncate('😀'.repeat(5), 3), '😀😀…');
    assert.equal(truncate(null, 5), '');
  });

  test('the run page says the run\'s state in one sentence', () => {
    const call = (call_id, takes_decision) => ({ call_id, tool: 'fs_write', takes_decision });
    assert.equal(
      runSummary({ id: A, status: 'waiting_for_approval', pending: { calls: [call('call_1', true), call('call_2', true)] } }),
      'Run …3f9a2c waiting for approval, 2 calls to decide',
    );
    assert.equal(
      runSummary({ id: A, status: 'waiting_for_approval', pending: { calls: [call('call_1', false), call('call_2', true)] } }),
      'Run …3f9a2c waiting for approval, 1 call to decide',
    );
    // V2 §4: an escalated turn is said too, with whom it told.
    const escalated = (notified) => ({ calls: [call('call_1', true)], escalated: { at: '2026-12-05T09:00:00.000Z', notified } });
    assert.equal(
      runSummary({ id: A, status: 'waiting_for_approval', pending: escalated(['ops', 'oncall']) }),
      'Run …3f9a2c waiting for approval, 1 call to decide. Escalated: notified ops, oncall',
    );
    assert.equal(
      runSummary({ id: A, status: 'waiting_for_approval', pending: escalated([]) }),
      'Run …3f9a2c waiting for approval, 1 call to decide. Escalated: notified nobody',
    );
    assert.equal(notifiedText(['ops']), 'ops');
    assert.equal(notifiedText(undefined), 'nobody');
    assert.equal(runSummary({ id: A, status: 'completed', output: 'done' }), 'Run …3f9a2c completed: done');
    assert.equal(runSummary({ id: A, status: 'completed', output: null }), 'Run …3f9a2c completed');
    assert.equal(runSummary({ id: A, status: 'failed', error: { kind: 'model', message: 'timed out' } }), 'Run …3f9a2c failed: timed out');
    assert.equal(runSummary({ id: A, status: 'running' }), 'Run …3f9a2c running');
    assert.equal(statusText('waiting_for_approval'), 'waiting for approval');
    assert.equal(statusText('new_status'), 'new status');
  });

  test('a decision is said with what is left to decide', () => {
    const open = [
      { call_id: 'call_1', tool: 'fs_write' },
      { call_id: 'call_2', tool: 'shell' },
    ];
    assert.equal(
      decisionAnnouncement({ decisions: [{ call_id: 'call_1', action: 'deny', reason: 'no' }] }, open, 1),
      'Denied: fs_write call_1. 1 call left to decide.',
    );
    assert.equal(
      decisionAnnouncement({ decisions: [{ call_id: 'call_2', action: 'respond', result: 'x' }] }, open, 0),
      'Answered in the tool’s place: shell call_2. Every call is decided; the run resumes.',
    );
    assert.equal(decisionAnnouncement({ approve_all: true }, open, 0), 'Approved all 2 calls. Every call is decided; the run resumes.');
    assert.equal(decisionAnnouncement({ deny_all: true, reason: 'no' }, open.slice(0, 1), 0), 'Denied 1 call. Every call is decided; the run resumes.');
    assert.equal(
      decisionAnnouncement({ decisions: [{ call_id: 'call_1', action: 'approve', remember: { match: {} } }] }, open, 1),
      'Approved and remembered: fs_write call_1. 1 call left to decide.',
    );
  });
});

describe('grants (approve and remember)', () => {
  test('globs read as the policy language: * within a segment, ** across, **/ folders, /** the folder too', () => {
    const cases = [
      ['kept/*', 'kept/a.txt', true],
      ['kept/*', 'kept/a/b.txt', false],
      ['kept/*', 'kept', false],
      ['*', 'a.txt', true],
      ['*', 'kept/a.txt', false],
      ['notes/**', 'notes', true],
      ['notes/**', 'notes/2026/today.md', true],
      ['**/*.md', 'a.md', true],
      ['**/*.md', 'x/y/a.md', true],
      ['a/**/b', 'a/b', true],
      ['a/**/b', 'a/x/y/b', true],
      ['f?o', 'foo', true],
      ['f?o', 'f/o', false],
      ['a.b', 'axb', false],
      ['[x]', '[x]', true],
      ['GET', 'GET', true],
      ['https://api.example.com/**', 'https://api.example.com/v1/x', true],
      ['https://api.example.com/**', 'https://evil.example/api.example.com/', false],
    ];
    for (const [pattern, text, expected] of cases) assert.equal(globMatches(pattern, text), expected, `${pattern} on ${text}`);
  });

  test('a pattern reads JSON pointers; strings are globs over strings, other values equal', () => {
    assert.deepEqual(pointerGet({ a: { 'b/c': [1, 2] } }, '/a/b~1c/1'), { found: true, value: 2 });
    assert.deepEqual(pointerGet({ a: 1 }, '/b'), { found: false });
    assert.deepEqual(pointerGet([1], '/01'), { found: false });
    const args = { path: 'kept/a.txt', content: 'x', argv: ['sh', '-c', 'ls'], n: 1 };
    assert.equal(matchesArguments({ '/path': 'kept/*' }, args), true);
    assert.equal(matchesArguments({ '/path': 'other/*' }, args), false);
    assert.equal(matchesArguments({ '/argv': ['sh', '-c', 'ls'] }, args), true);
    assert.equal(matchesArguments({ '/argv': ['sh'] }, args), false);
    assert.equal(matchesArguments({ '/n': 1, '/path': '**' }, args), true);
    assert.equal(matchesArguments({ '/n': '1' }, args), false, 'a glob never matches a number');
    assert.equal(matchesArguments({ '/missing': '*' }, args), false);
    assert.equal(matchesArguments({}, args), true);
  });

  test('which waiting runs a grant would likely decide: every call that takes a decision, of that tool, matching', () => {
    const call = (path, extra = {}) => ({
      call_id: 'call_1', tool: 'fs_write', arguments: { path }, takes_decision: true, in_doubt: false, suggested_match: { '/path': 'kept/*' }, ...extra,
    });
    const run = (...calls) => ({ status: 'waiting_for_approval', pending: { calls } });
    const pattern = { '/path': 'kept/*' };
    assert.equal(wouldDecide(run(call('kept/a.txt')), 'fs_write', pattern), true);
    assert.equal(wouldDecide(run(call('kept/a.txt'), call('else/b.txt')), 'fs_write', pattern), false, 'one call it does not match');
    assert.equal(wouldDecide(run(call('kept/a.txt'), call('else/b.txt', { takes_decision: false })), 'fs_write', pattern), true, 'decided calls do not count');
    assert.equal(wouldDecide(run(call('kept/a.txt', { tool: 'shell' })), 'fs_write', pattern), false, 'another tool');
    assert.equal(wouldDecide(run(call('kept/a.txt', { in_doubt: true })), 'fs_write', pattern), false, 'a call in doubt always asks');
    assert.equal(wouldDecide(run(call('kept/a.txt', { approvals: { required: 2, given: [] } })), 'fs_write', pattern), false, 'a quorum call always asks');
    assert.equal(wouldDecide(run(call('kept/a.txt', { suggested_match: undefined })), 'fs_write', pattern), false, 'a call kept from grants');
    assert.equal(wouldDecide({ status: 'completed', pending: null }, 'fs_write', pattern), false);
  });

  test('a pattern and an expiry are checked before anything is sent', () => {
    assert.deepEqual(checkPattern('{"/path": "kept/*"}'), { value: { '/path': 'kept/*' }, problems: [] });
    assert.deepEqual(checkPattern('{}').problems, []);
    assert.match(checkPattern('{"path": "x"}').problems[0], /^"path" is not a JSON pointer/);
    assert.match(checkPattern('{"/a~2": 1}').problems[0], /is not a JSON pointer/);
    assert.match(checkPattern('["/path"]').problems[0], /must be a JSON object/);
    assert.match(checkPattern('{"/path": ').problems[0], /^Invalid JSON/);
    for (const ok of ['30s', '30m', '8h', '7d', ' 8h ']) assert.equal(ttlProblem(ok), null, ok);
    for (const bad of ['', '8', 'h', '1w', '1.5h', '8 h', '-1d', '0h']) assert.notEqual(ttlProblem(bad), null, bad);
  });

  test('a grant in words', () => {
    const grant = {
      id: '01a2454d-de15-7013-8e3f-eab5f2d2deba', agent: 'keeper', tool: 'fs_write', match: { '/path': 'kept/*' }, scope: 'agent', run_id: null,
      expires_at: '2026-12-05T16:00:00.000Z', revoked_at: null,
    };
    assert.equal(grantTag(grant.id), '…d2deba');
    assert.deepEqual(matchLines(grant.match), ['/path → kept/*']);
    assert.deepEqual(matchLines({ '/argv': ['ls'] }), ['/argv → ["ls"]']);
    assert.deepEqual(matchLines({}), ['any arguments']);
    assert.equal(grantSummary(grant), 'fs_write calls of keeper matching /path → kept/*');
    assert.equal(grantSummary({ ...grant, match: {}, scope: 'run', run_id: '01a2454d-cfe4-7163-b510-45546d075626' }), 'fs_write calls of keeper (any arguments) in run …075626');
    const now = Date.parse('2026-12-05T12:00:00.000Z');
    assert.equal(grantState(grant, now), 'active');
    assert.equal(grantState(grant, Date.parse('2026-12-05T16:00:00.000Z')), 'expired');
    assert.equal(grantState({ ...grant, revoked_at: '2026-12-05T09:00:00.000Z' }, Date.parse('2026-12-06T00:00:00.000Z')), 'revoked');
    assert.equal(appliedText({ applied_to: ['run-aaaaaa', 'run-bbbbbb'] }, 'run-aaaaaa'), 'It approved 1 other waiting run: …bbbbbb. It approved this run too.');
    assert.equal(appliedText({ applied_to: [] }, 'run-aaaaaa'), 'It approved no other waiting run.');
  });
});

describe('live model text (model_delta)', () => {
  test('text and resets are read, anything else is dropped', () => {
    assert.deepEqual(parseDelta('{"round": 2, "text": "Sav"}'), { round: 2, text: 'Sav' });
    assert.deepEqual(parseDelta('{"round": 2, "reset": true}'), { round: 2, reset: true });
    for (const bad of ['', 'nope', 'null', '[]', '{"text": "x"}', '{"round": "2", "text": "x"}', '{"round": 1.5, "text": "x"}', '{"round": 2}', '{"round": 2, "text": 3}']) {
      assert.equal(parseDelta(bad), null, bad);
    }
  });

  test('a model_delta event parses like any named event, with no id', () => {
    const events = [];
    const parser = new SseParser((e) => events.push(e));
    parser.push('event: model_delta\ndata: {"round": 1, "text": "hi"}\n\nid: 5\nevent: model_response\ndata: {}\n\n');
    assert.equal(events[0].event, 'model_delta');
    assert.equal(events[0].id, null);
    assert.deepEqual(parseDelta(events[0].data), { round: 1, text: 'hi' });
    assert.equal(events[1].id, '5');
  });
});

describe('invisible and direction-changing characters (issue 31)', () => {
  // The attack of issue 31: drawn raw, the isolates show `echo build done # && rm -rf notes`.
  const ARGV = 'echo build done \u2067\u2066&& rm -rf notes\u2069 #\u2069';

  test('every kind the brief names is marked; newline, tab, spaces and letters are not', () => {
    const marked = [
      0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069, // embeddings, overrides, isolates
      0x200e, 0x200f, 0x061c, // marks
      0x200b, 0x200c, 0x200d, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0xfeff, // zero-width
      0x00ad, // soft hyphen
      0x0600, 0x180e, 0xfff9, 0xe0001, 0xe0041, // other format characters (Cf), tags included
      0x0000, 0x0007, 0x000d, 0x001b, 0x007f, 0x0085, 0x009b, // C0 and C1 controls
      0x2028, 0x2029, 0x3164, 0xd800, // separators, a Hangul filler, a lone surrogate
    ];
    for (const code of marked) {
      const char = String.fromCodePoint(code);
      const parts = splitInvisible(`a${char}b`);
      assert.equal(parts.length, 3, `U+${code.toString(16)} is marked`);
      assert.equal(parts[1].code, code);
      assert.equal(parts[1].label, `⟨U+${code.toString(16).toUpperCase().padStart(4, '0')}⟩`);
    }
    for (const text of ['a\nb\tc', 'plain ASCII ~!@#$%^&*()', 'héllo wörld', 'שלום עולם', 'مرحبا', '日本語', '😀👍🏽', 'a\u00a0b']) {
      assert.deepEqual(splitInvisible(text), [text], JSON.stringify(text));
    }
  });

  test('text is cut around the marks in order, and named', () => {
    assert.deepEqual(splitInvisible(ARGV), [
      'echo build done ',
      { code: 0x2067, label: '⟨U+2067⟩', title: 'U+2067 RIGHT-TO-LEFT ISOLATE' },
      { code: 0x2066, label: '⟨U+2066⟩', title: 'U+2066 LEFT-TO-RIGHT ISOLATE' },
      '&& rm -rf notes',
      { code: 0x2069, label: '⟨U+2069⟩', title: 'U+2069 POP DIRECTIONAL ISOLATE' },
      ' #',
      { code: 0x2069, label: '⟨U+2069⟩', title: 'U+2069 POP DIRECTIONAL ISOLATE' },
    ]);
    assert.deepEqual(splitInvisible(''), ['']);
    assert.equal(markedText('notes/\u202Etxt.exe'), 'notes/⟨U+202E⟩txt.exe');
    assert.equal(charName(0x202e), 'RIGHT-TO-LEFT OVERRIDE');
    assert.equal(charName(0xe0041), 'TAG "A"', 'tag characters say the letter they hide');
    assert.equal(charName(0x0600), 'FORMAT CHARACTER');
    assert.equal(charName(0x0090), 'C1 CONTROL CHARACTER');
  });

  test('found in every string of a JSON value, keys included', () => {
    assert.deepEqual(invisibleIn({ argv: ['sh', '-c', ARGV], ['k\u200b']: 1, n: 5 }), [0x2067, 0x2066, 0x2069, 0x2069, 0x200b]);
    assert.deepEqual(invisibleIn({ path: 'a.txt', content: 'fine\n' }), []);
    assert.deepEqual(invisibleIn(null), []);
  });

  test('a held call says how many it holds, where, and which', () => {
    const call = { tool: 'shell', call_id: 'call_1', arguments: { argv: ['sh', '-c', ARGV] }, preview: 'run: x\u202e' };
    assert.deepEqual(invisibleWarning(call), {
      headline:
        'Contains 5 invisible or direction-changing characters (4 in the arguments, 1 in the preview): ' +
        'U+202E RIGHT-TO-LEFT OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE, U+2067 RIGHT-TO-LEFT ISOLATE, U+2069 POP DIRECTIONAL ISOLATE.',
      detail: 'Each is shown as a ⟨U+…⟩ mark where it stands; the call runs with the characters themselves, which can make text look other than it is.',
    });
    assert.equal(
      invisibleWarning({ tool: 'fs_write', call_id: 'c\u200f', arguments: {} }).headline,
      'Contains 1 invisible or direction-changing character (1 in the tool name or call id): U+200F RIGHT-TO-LEFT MARK.',
    );
    assert.equal(invisibleWarning({ tool: 'fs_write', call_id: 'call_2', arguments: { path: 'שלום.txt' }, preview: null }), null);
  });

  test('JSON for the editor spells them as escapes that parse to the same value', () => {
    const value = { argv: ['sh', '-c', ARGV], path: 'notes/\u202etxt.exe', tag: '\u{e0041}', ok: 'é\n' };
    const json = escapeInvisibleJson(JSON.stringify(value, null, 2));
    assert.deepEqual(invisibleIn(json), [], 'no raw character left');
    assert.match(json, /\\u2067\\u2066&& rm -rf notes\\u2069 #\\u2069/);
    assert.match(json, /"\\udb40\\udc41"/);
    assert.deepEqual(JSON.parse(json), value);
  });

  test('right-to-left letters are found (their text is isolated)', () => {
    assert.equal(hasRightToLeft('notes/שלום.txt'), true);
    assert.equal(hasRightToLeft('مرحبا'), true);
    assert.equal(hasRightToLeft('plain/path.txt'), false);
  });

  test('truncation keeps U+FEFF (to be marked) while it folds real whitespace', () => {
    assert.equal(truncate(' a\ufeff  b ', 20), 'a\ufeff b');
  });
});

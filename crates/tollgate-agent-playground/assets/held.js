// The held calls of a waiting run (`run.pending.calls`) and the decisions on them; once the held turn
// was escalated (`pending.escalated`, V2 §4), a line under the panel's summary says so: after how long,
// when, and whom it told.
//
// Each call the server says takes a decision (`takes_decision`: it waits, or is in doubt after a crash)
// gets approve, edit (a JSON editor checked against the tool's schema before anything is sent), deny with
// a reason and respond; the panel adds approve-all and deny-all. A call that already ran before a crash
// (`state: finished`) is shown with its result and no buttons. Every decision names the `turn_digest` the person saw, so a
// decision on a turn that changed since is refused (409) instead of landing on calls nobody looked at.
// Cards are kept across refreshes while their call is undecided, so a half-typed edit survives a
// decision someone makes on another call.
//
// A quorum call (a policy rule's `approvals = N`: `call.approvals` is `{required, given}`) shows how many
// approvals it has and whose, and offers only approve and deny (the server refuses edit and respond for
// it). Once this person's approval of it is in, it still takes a decision — from someone else: its card
// says so, offers deny only, and the panel says the run waits for another approver. Who "this person" is
// comes from the answers to their own decisions (api.js `knownActor`), or from this page having approved
// the call; a second approval the server refuses (409) is explained as such.
//
// A call that may be remembered (`suggested_match`: it asks, one person decides it, no policy rule keeps it
// from grants) also gets "Approve and remember…": a form with the grant's pattern (prefilled with the
// suggestion), expiry, scope and reason, which lists the other waiting runs of the agent the grant would
// likely also decide (judged here: see grant.js). Submitted, it approves the call with `remember` (the
// grant is made in the same transaction as the decision). With "also approve the other waiting runs"
// ticked, it makes the grant with `POST /v1/grants` and `apply_to_waiting` instead (the server approves
// every waiting run whose calls the grant allows, this one included when it allows them all), then
// approves this call as a plain approval unless the grant already decided this run.
//
// Keyboard: Escape closes an open edit, deny, respond or remember form and gives the focus back to its button.
// After a decision the focus goes to the next call still to decide (its first button), or, when none is
// left, to wherever the page says (`onDone`: the outcome). The live region says what was decided.

import { api, ApiError, knownActor, learnActor } from './api.js';
import { h, replace, uid } from './dom.js';
import { ACTION_WORDS, approvalsText, approvedBy, decisionAnnouncement, heldSummary, openCalls, plural, pretty, quorumHint, runLinkName, settledNote } from './format.js';
import { appliedText, checkPattern, grantTag, ttlProblem, wouldDecide } from './grant.js';
import { escapeInvisibleJson, invisibleWarning } from './invisible.js';
import { checkArguments } from './schema.js';
import { announce, escalationNote, focusEl, focusLost, grantLink, jsonBlock, notify, previewBlock } from './ui.js';

/** The expiry "Approve and remember…" proposes (the server's default `default_ttl`). */
const DEFAULT_TTL = '8h';

/** How many waiting runs of the agent the remember form reads to say which it would likely also decide. */
const WAITING_LIMIT = 100;

export { ACTION_WORDS };

/**
 * "Denied by alice: not on a Friday" — a recorded decision in words; a quorum call's approval names every
 * approver ("Approved by alice and bob").
 */
export function decisionText(decision, approvals = null) {
  const words = ACTION_WORDS[decision.action] ?? decision.action;
  const approvers = decision.action === 'approve' && approvals?.given?.length ? approvals.given : null;
  const names = approvers ? new Intl.ListFormat('en', { type: 'conjunction' }).format(approvers) : decision.actor;
  const by = names ? ` by ${names}` : '';
  const why = decision.action === 'deny' && decision.reason ? `: ${decision.reason}` : '';
  return `${words}${by}${why}`;
}

export class HeldPanel {
  /**
   * @param {{runId: string, schemaOf: (tool: string) => (object|undefined), onRun: (run: object) => void,
   *   onConflict: () => void, onDone: () => void, escalatedAfter?: (digest: string) => (string|null)}}
   *   options `onDone`: every call is decided (move the focus); `escalatedAfter`: how long the held turn
   *   of that digest waited before it was escalated, as its `approval_escalated` event says (null until
   *   that event is read)
   */
  constructor({ runId, schemaOf, onRun, onConflict, onDone, escalatedAfter = () => null }) {
    this.runId = runId;
    this.schemaOf = schemaOf;
    this.escalatedAfter = escalatedAfter;
    this.onRun = onRun;
    this.onConflict = onConflict;
    this.onDone = onDone;
    this.deciding = false; // true while a decision's answer is being shown (it moves the focus itself)
    this.digest = null;
    this.cards = new Map(); // call_id -> {el, key}: a card is drawn again when its key changes
    this.approvedHere = new Set(); // quorum calls of this turn this page's approval is in on
    this.list = h('div.calls');
    this.bulk = h('div.bulk');
    this.summary = h('p.muted.small');
    // Once the held turn was escalated (V2 §4): when, after how long, and whom it told.
    this.escalation = h('div.escalation-slot', { hidden: true });
    this.heading = h('h2', { id: 'held-heading', tabindex: '-1', text: 'Waiting for a decision' });
    this.el = h(
      'section.card.held',
      { id: 'held', 'aria-labelledby': 'held-heading', hidden: true },
      this.heading,
      this.summary,
      this.escalation,
      this.list,
      this.bulk,
    );
  }

  /** Shows the run's held calls (or hides the panel when the run is not waiting). */
  update(run) {
    const pending = run.status === 'waiting_for_approval' ? run.pending : null;
    if (!pending) {
      this.el.hidden = true;
      this.digest = null;
      this.cards.clear();
      this.list.replaceChildren();
      this.bulk.replaceChildren();
      this.showEscalation(null);
      return;
    }
    this.el.hidden = false;
    this.agent = run.agent;
    if (pending.turn_digest !== this.digest) {
      this.digest = pending.turn_digest;
      this.cards.clear();
      this.approvedHere.clear();
      this.list.replaceChildren();
    }
    this.calls = pending.calls;
    const mine = this.mine(pending.calls);
    for (const call of pending.calls) {
      const known = this.cards.get(call.call_id);
      // A half-typed form survives updates that leave its call as it was.
      const key = JSON.stringify([Boolean(call.decision), call.approvals?.given ?? null, mine.has(call.call_id)]);
      if (known && known.key === key) continue;
      const card = this.card(call, mine.has(call.call_id));
      if (known) known.el.replaceWith(card);
      else this.list.append(card);
      this.cards.set(call.call_id, { el: card, key });
    }
    const { heading, text } = heldSummary(pending, mine);
    if (this.heading.textContent !== heading) this.heading.textContent = heading;
    this.summary.textContent = text;
    this.showEscalation(pending.escalated ? { escalated: pending.escalated, after: this.escalatedAfter(pending.turn_digest) } : null);
    const open = openCalls(pending);
    this.renderBulk(open, open.filter((c) => !mine.has(c.call_id)));
  }

  /**
   * Shows the held turn's escalation line (`{escalated, after}`), or hides it (null); drawn again only
   * when it changes, so its relative time is not read out again at every update.
   */
  showEscalation(shown) {
    const key = shown ? JSON.stringify(shown) : '';
    if (this.escalation.dataset.key === key) return;
    this.escalation.dataset.key = key;
    this.escalation.hidden = !shown;
    replace(this.escalation, shown ? escalationNote(shown.escalated, { after: shown.after }) : null);
  }

  /** The quorum calls still open whose approval by this person is in: they wait for other approvers. */
  mine(calls) {
    const actor = knownActor();
    return new Set(calls.filter((c) => c.takes_decision && approvedBy(c, actor, this.approvedHere)).map((c) => c.call_id));
  }

  /** `open`: every call still to decide (deny all takes them); `approvable`: those this person can approve. */
  renderBulk(open, approvable) {
    if (open.length === 0) {
      this.bulk.replaceChildren();
      return;
    }
    const shape = `${approvable.length}/${open.length}`;
    if (this.bulk.dataset.open === shape && this.bulk.childElementCount > 0) return;
    this.bulk.dataset.open = shape;
    const reasonId = uid('deny-all-reason');
    const reason = h('input', { id: reasonId, type: 'text', placeholder: 'Why not?', autocomplete: 'off' });
    // Approve all gives this person's approval to each call they have not approved yet.
    const approveAll =
      approvable.length === 0
        ? null
        : h('button.approve', {
            type: 'button',
            text: approvable.length > 1 ? `Approve all ${approvable.length}` : 'Approve all',
            onClick: () => this.send({ approve_all: true }, approveAll),
          });
    const denyAll = h('button.danger', { type: 'submit', text: 'Deny all' });
    replace(
      this.bulk,
      approveAll ? h('div.bulk-group', { role: 'group', 'aria-label': 'Decide every undecided call' }, approveAll) : null,
      h(
        'form.bulk-group.inline',
        {
          'aria-label': 'Deny every undecided call',
          onSubmit: (e) => {
            e.preventDefault();
            const body = { deny_all: true };
            if (reason.value.trim()) body.reason = reason.value.trim();
            this.send(body, denyAll);
          },
        },
        h('label', { for: reasonId, text: 'Reason for denying all' }),
        reason,
        denyAll,
      ),
    );
  }

  /** A held call's card; `mine`: a quorum call this person approved already (it waits for others). */
  card(call, mine = false) {
    const headingId = uid('call');
    const badges = [h(`span.badge.gate-${call.gate}`, { text: `gate: ${call.gate}` })];
    if (call.approvals) {
      badges.push(
        h('span.badge.quorum-badge', {
          text: `quorum: ${call.approvals.required}`,
          title: `It needs ${call.approvals.required} approvals from different people.`,
        }),
      );
    }
    if (call.state === 'finished') {
      badges.push(
        h('span.badge.call-finished', {
          text: 'finished',
          title: 'It ran to its end before a crash; its result is recorded.',
        }),
      );
    }
    if (call.in_doubt) {
      badges.push(
        h('span.badge.in-doubt', {
          text: 'in doubt',
          title: 'It started before a crash and never reported back: it may have run already.',
        }),
      );
    }
    // Marks alone are easy to miss in a long diff: say that they are there, and what they are.
    const hidden = invisibleWarning(call);
    const warningId = hidden ? uid('invisible') : null;
    const quorum = call.approvals ? this.quorumBlock(call, mine) : null;
    const card = h(
      'article.call',
      { 'aria-labelledby': headingId, dataset: { callId: call.call_id, tool: call.tool } },
      h(
        'header.call-head',
        null,
        h('h3', { id: headingId, tabindex: '-1' }, h('code', { text: call.tool }), ' ', h('span.call-id', { text: call.call_id })),
        h('span.badges', null, badges),
      ),
      call.in_doubt
        ? h('p.warning', { text: 'This call started before a crash and never reported back: it may already have run. Approving runs it again.' })
        : null,
      hidden ? h('p.warning.invisible-warning', { id: warningId }, h('strong', { text: hidden.headline }), ' ', hidden.detail) : null,
      // The preview is the tool's account of the call; the arguments are what the model chose and what
      // runs. Both are shown, side by side where there is room, never one folded away behind the other.
      h(
        'div.call-views',
        null,
        call.preview
          ? h('div.preview-wrap', null, h('h4.label', { text: 'Preview' }), previewBlock(call.preview, `Preview of ${call.tool} ${call.call_id}`))
          : null,
        h('div.args-wrap', null, h('h4.label', { text: 'Arguments' }), jsonBlock(call.arguments, `Arguments of ${call.call_id}`)),
      ),
      quorum?.el,
    );
    if (call.decision) {
      const d = call.decision;
      const extra = [];
      if (d.action === 'edit') extra.push(jsonBlock(d.arguments, 'Edited arguments'));
      if (d.action === 'respond') extra.push(h('pre.code', null, h('code', { text: d.result })));
      card.append(h(`p.decided.decided-${d.action}`, { text: decisionText(d, call.approvals) }), ...extra);
      card.classList.add('is-decided');
      return card;
    }
    if (!call.takes_decision) {
      card.append(
        call.grant
          ? h('p.note.granted', null, 'Allowed by ', grantLink(call.grant), ': it runs together with the approved calls once every call is decided.')
          : h('p.note', { text: settledNote(call) }),
      );
      if (call.result) {
        card.append(
          h(
            'div.result-wrap',
            null,
            h('h4.label', { text: call.result.is_error ? 'Result (the tool failed)' : 'Result' }),
            h('pre.code', { 'aria-label': `Result of ${call.call_id}` }, h('code', { text: call.result.content || '(empty)' })),
          ),
        );
      }
      return card;
    }
    if (mine) card.classList.add('is-awaiting-others');
    card.append(this.controls(call, [warningId, quorum?.describedBy].filter(Boolean).join(' ') || null, mine));
    return card;
  }

  /**
   * A quorum call's approvals, labelled like the preview and arguments: the count and who
   * (`1 of 2 approvals — alice. Needs 1 more.`); while it takes approvals, why it offers only approve and
   * deny; once this person's approval is in, that the run waits for someone else.
   * @returns {{el: Element, describedBy: string}} `describedBy`: the ids its Approve button is described by
   */
  quorumBlock(call, mine) {
    const open = call.takes_decision && !call.decision;
    const countId = uid('approvals');
    const hintId = uid('quorum-hint');
    const missing = Math.max(0, call.approvals.required - (call.approvals.given ?? []).length);
    const el = h(
      'div.quorum',
      null,
      h('h4.label', { text: 'Approvals' }),
      h('p.quorum-count', { id: countId, text: approvalsText(call.approvals, { open }) }),
      open ? h('p.hint.quorum-hint', { id: hintId, text: quorumHint(call.approvals) }) : null,
      open && mine
        ? h('p.quorum-mine', {
            text: `Your approval is in. The run waits for ${missing === 1 ? 'another approver' : `${missing} more approvers`}; you can still deny this call.`,
          })
        : null,
    );
    return { el, describedBy: `${countId} ${hintId}` };
  }

  /**
   * The decision buttons and forms; `describedBy`: the ids Approve is described by (the call's warning, a
   * quorum call's count and hint). A quorum call gets approve and deny only; once this person approved
   * it (`mine`), deny only.
   */
  controls(call, describedBy = null, mine = false) {
    const area = h('div.form-area', { id: uid('decide') });
    const buttons = [];
    let closeOpen = null; // closes the form on show, focus back on its button
    area.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape' || e.isComposing || !closeOpen) return;
      e.preventDefault();
      e.stopPropagation();
      closeOpen();
    });
    const toggle = (label, build) => {
      const button = h('button', { type: 'button', 'aria-expanded': 'false', 'aria-controls': area.id, text: label });
      const close = () => {
        button.setAttribute('aria-expanded', 'false');
        area.replaceChildren();
        closeOpen = null;
        button.focus();
      };
      button.addEventListener('click', () => {
        const opening = button.getAttribute('aria-expanded') !== 'true';
        for (const b of buttons) b.setAttribute('aria-expanded', 'false');
        area.replaceChildren();
        closeOpen = null;
        if (opening) {
          button.setAttribute('aria-expanded', 'true');
          const form = build(close);
          area.append(form);
          closeOpen = close;
          form.querySelector('textarea, input')?.focus();
        }
      });
      buttons.push(button);
      return button;
    };
    const approve = mine
      ? null
      : h('button.approve', {
          type: 'button',
          text: 'Approve',
          'aria-describedby': describedBy,
          onClick: () => this.send({ decisions: [{ call_id: call.call_id, action: 'approve' }] }, approve),
        });
    const quorum = Boolean(call.approvals);
    const rememberable = !mine && !quorum && call.suggested_match && typeof call.suggested_match === 'object';
    const group = h(
      'div.actions',
      { role: 'group', 'aria-label': `Decide ${call.tool} ${call.call_id}` },
      approve,
      rememberable ? toggle('Approve and remember…', (close) => this.rememberForm(call, close)) : null,
      quorum ? null : toggle('Edit…', (close) => this.editForm(call, close)),
      toggle('Deny…', (close) => this.denyForm(call, close)),
      quorum ? null : toggle('Respond…', (close) => this.respondForm(call, close)),
    );
    return h('div.decide', null, group, area);
  }

  editForm(call, close) {
    const id = uid('edit');
    const problemsId = `${id}-problems`;
    const schema = this.schemaOf(call.tool);
    // A text field cannot mark characters: it shows them as JSON escapes, which parse to the same value.
    const json = escapeInvisibleJson(pretty(call.arguments));
    const text = h('textarea.json', {
      id,
      rows: Math.min(16, Math.max(5, json.split('\n').length + 1)),
      spellcheck: 'false',
      autocapitalize: 'off',
      'aria-describedby': problemsId,
    });
    text.value = json;
    const problems = h('div.problems', { id: problemsId, 'aria-live': 'polite' });
    const submit = h('button.primary', { type: 'submit', text: 'Approve with these arguments' });
    const check = () => {
      const result = checkArguments(text.value, schema);
      const ok = result.problems.length === 0;
      text.setAttribute('aria-invalid', String(!ok));
      submit.disabled = !ok;
      if (ok) {
        replace(problems, h('p.ok', { text: schema ? `Valid against the ${call.tool} schema.` : 'Valid JSON (no schema known for this tool).' }));
      } else {
        replace(
          problems,
          h('p.error-title', { text: `${result.problems.length} problem(s) — fix before sending:` }),
          h('ul.error-list', null, result.problems.map((p) => h('li', { text: p }))),
        );
      }
      return result;
    };
    text.addEventListener('input', check);
    check();
    return h(
      'form.stack.decide-form',
      {
        'aria-label': `Edit the arguments of ${call.call_id}`,
        onSubmit: (e) => {
          e.preventDefault();
          const result = check();
          if (result.problems.length) {
            text.focus();
            return;
          }
          this.send({ decisions: [{ call_id: call.call_id, action: 'edit', arguments: result.value }] }, submit, problems);
        },
      },
      h('label', { for: id, text: `Arguments for ${call.tool} (JSON)` }),
      text,
      problems,
      h('div.row', null, submit, h('button', { type: 'button', text: 'Cancel', onClick: close })),
    );
  }

  denyForm(call, close) {
    const id = uid('deny');
    const reason = h('input', { id, type: 'text', autocomplete: 'off', placeholder: 'e.g. not on a Friday' });
    const submit = h('button.danger', { type: 'submit', text: 'Deny' });
    const error = h('div.problems', { 'aria-live': 'polite' });
    return h(
      'form.stack.decide-form',
      {
        'aria-label': `Deny ${call.call_id}`,
        onSubmit: (e) => {
          e.preventDefault();
          const item = { call_id: call.call_id, action: 'deny' };
          if (reason.value.trim()) item.reason = reason.value.trim();
          this.send({ decisions: [item] }, submit, error);
        },
      },
      h('label', { for: id, text: 'Reason (the model sees it)' }),
      reason,
      error,
      h('div.row', null, submit, h('button', { type: 'button', text: 'Cancel', onClick: close })),
    );
  }

  respondForm(call, close) {
    const id = uid('respond');
    const result = h('textarea', { id, rows: 4, placeholder: 'The result the model receives instead of running the tool' });
    const submit = h('button.primary', { type: 'submit', text: 'Send response' });
    const error = h('div.problems', { 'aria-live': 'polite' });
    return h(
      'form.stack.decide-form',
      {
        'aria-label': `Respond in place of ${call.call_id}`,
        onSubmit: (e) => {
          e.preventDefault();
          this.send({ decisions: [{ call_id: call.call_id, action: 'respond', result: result.value }] }, submit, error);
        },
      },
      h('label', { for: id, text: `Result given to the model in place of ${call.tool}` }),
      result,
      error,
      h('div.row', null, submit, h('button', { type: 'button', text: 'Cancel', onClick: close })),
    );
  }

  /**
   * "Approve and remember…": the grant's pattern (JSON, the call's `suggested_match` to start with), how
   * long it lasts, its scope and an optional reason, and the other waiting runs of the agent it would
   * likely also decide. Sent as an approval with `remember`; with "also approve the other waiting runs"
   * ticked (scope agent only), as a grant with `apply_to_waiting` and then a plain approval
   * (`grantAndApprove`).
   */
  rememberForm(call, close) {
    const id = uid('remember');
    const agent = this.agent ?? 'this agent';
    const problemsId = `${id}-problems`;
    const json = escapeInvisibleJson(pretty(call.suggested_match));
    const pattern = h('textarea.json', {
      id: `${id}-pattern`,
      rows: Math.min(10, Math.max(3, json.split('\n').length + 1)),
      spellcheck: 'false',
      autocapitalize: 'off',
      'aria-describedby': `${id}-pattern-hint ${problemsId}`,
    });
    pattern.value = json;
    const ttl = h('input.ttl', {
      id: `${id}-ttl`,
      type: 'text',
      autocomplete: 'off',
      spellcheck: 'false',
      value: DEFAULT_TTL,
      'aria-describedby': `${id}-ttl-hint ${problemsId}`,
    });
    const scopeAgent = h('input', { id: `${id}-scope-agent`, type: 'radio', name: `${id}-scope`, value: 'agent', checked: true });
    const scopeRun = h('input', { id: `${id}-scope-run`, type: 'radio', name: `${id}-scope`, value: 'run' });
    const reason = h('input', { id: `${id}-reason`, type: 'text', autocomplete: 'off', placeholder: 'e.g. notes are fine today' });
    const effect = h('div.remember-effect', { id: `${id}-effect` });
    const also = h('input', { id: `${id}-also`, type: 'checkbox', 'aria-describedby': `${id}-also-hint` });
    const problems = h('div.problems', { id: problemsId, 'aria-live': 'polite' });
    const submit = h('button.primary', { type: 'submit', text: 'Approve and remember' });

    // The agent's waiting runs, read once when the form opens: which of them the pattern would decide
    // is judged again at each edit.
    let waiting = null;
    const showEffect = () => {
      also.disabled = scopeRun.checked;
      const judged = checkPattern(pattern.value);
      let body;
      if (scopeRun.checked) {
        body = [h('p.muted', { text: 'A grant for this run only decides no other run: later calls of this run that match pass without a person.' })];
      } else if (waiting === null) {
        body = [h('p.muted', { text: `Looking for other waiting runs of ${agent}…` })];
      } else if (waiting.error) {
        body = [h('p.muted', { text: `The other waiting runs could not be listed: ${waiting.error}` })];
      } else if (judged.problems.length) {
        body = [h('p.muted', { text: 'Fix the pattern to see which other waiting runs it matches.' })];
      } else {
        const runs = waiting.runs.filter((run) => run.id !== this.runId && wouldDecide(run, call.tool, judged.value));
        const among = waiting.more ? ` (among the first ${WAITING_LIMIT} waiting runs)` : '';
        body = runs.length
          ? [
              h('p', { text: `It would likely also decide ${plural(runs.length, 'other waiting run')} of ${agent}${among}:` }),
              h(
                'ul.likely-runs',
                null,
                runs.map((run) => h('li', null, h('a', { href: `#/runs/${run.id}`, dataset: { runId: run.id }, text: runLinkName(run) }))),
              ),
              h('p.hint', {
                text: 'Likely: the server judges path arguments as the tool resolves them. These runs keep waiting unless you tick the box below.',
              }),
            ]
          : [h('p', { text: `No other waiting run of ${agent} has only calls this pattern matches${among}.` })];
      }
      replace(effect, h('h4.label', { text: 'Other waiting runs' }), body);
    };
    api('GET', `v1/runs?status=waiting_for_approval&agent=${encodeURIComponent(agent)}&limit=${WAITING_LIMIT}`)
      .then((page) => {
        waiting = { runs: page.runs ?? [], more: Boolean(page.next_cursor) };
      })
      .catch((e) => {
        waiting = { error: e.message };
      })
      .finally(() => {
        if (effect.isConnected) showEffect();
      });

    const check = () => {
      const result = checkPattern(pattern.value);
      const late = ttlProblem(ttl.value);
      pattern.setAttribute('aria-invalid', String(result.problems.length > 0));
      ttl.setAttribute('aria-invalid', String(late !== null));
      const all = [...result.problems.map((p) => `Pattern: ${p}`), ...(late ? [`Expires after: ${late}`] : [])];
      submit.disabled = all.length > 0;
      if (all.length) {
        replace(problems, h('p.error-title', { text: `${all.length} problem(s) — fix before sending:` }), h('ul.error-list', null, all.map((p) => h('li', { text: p }))));
      } else {
        problems.replaceChildren();
      }
      showEffect();
      return { result, late };
    };
    pattern.addEventListener('input', check);
    ttl.addEventListener('input', check);
    scopeAgent.addEventListener('change', showEffect);
    scopeRun.addEventListener('change', showEffect);
    check();

    return h(
      'form.stack.decide-form.remember-form',
      {
        'aria-label': `Approve and remember ${call.call_id}`,
        onSubmit: (e) => {
          e.preventDefault();
          const { result, late } = check();
          if (result.problems.length || late) {
            (result.problems.length ? pattern : ttl).focus();
            return;
          }
          const remember = { scope: scopeRun.checked ? 'run' : 'agent', match: result.value, ttl: ttl.value.trim() };
          if (reason.value.trim()) remember.reason = reason.value.trim();
          if (also.checked && !also.disabled) this.grantAndApprove(call, remember, submit, problems);
          else this.send({ decisions: [{ call_id: call.call_id, action: 'approve', remember }] }, submit, problems);
        },
      },
      h(
        'div.field',
        null,
        h('label', { for: pattern.id, text: `Pattern for ${call.tool} (JSON)` }),
        pattern,
        h('p.hint', {
          id: `${id}-pattern-hint`,
          text: 'JSON pointer into the arguments → a glob: * within one path segment, ** across them; any other value must be equal. {} allows every call of the tool.',
        }),
      ),
      h(
        'div.field',
        null,
        h('label', { for: ttl.id, text: 'Expires after' }),
        ttl,
        h('p.hint', { id: `${id}-ttl-hint`, text: 'A whole number and s, m, h or d: 30m, 8h, 7d (the server caps it).' }),
      ),
      h(
        'fieldset.choices',
        null,
        h('legend', { text: 'Applies to' }),
        h('div.choice', null, scopeAgent, h('label', { for: scopeAgent.id, text: `Every run of ${agent}` })),
        h('div.choice', null, scopeRun, h('label', { for: scopeRun.id, text: 'This run only' })),
      ),
      h('div.field', null, h('label', { for: reason.id, text: 'Reason (optional, kept with the grant)' }), reason),
      effect,
      h(
        'div.field',
        null,
        h('div.choice', null, also, h('label', { for: also.id, text: `Also approve the other waiting runs of ${agent} it allows` })),
        h('p.hint', {
          id: `${id}-also-hint`,
          text: 'The server then checks every waiting run and approves each whose held calls the grant all allows, as your decisions; this call is approved too. Unticked, the other runs keep waiting for a person.',
        }),
      ),
      problems,
      h('div.row', null, submit, h('button', { type: 'button', text: 'Cancel', onClick: close })),
    );
  }

  /**
   * "Also approve the other waiting runs": makes the grant with `POST /v1/grants` and `apply_to_waiting`
   * (the server approves every waiting run whose calls it allows, as this person's decisions), then
   * approves this call as usual — unless the grant approved this run already (it allowed all its calls).
   */
  async grantAndApprove(call, remember, button, errorBox) {
    const label = button.textContent;
    button.disabled = true;
    button.textContent = 'Sending…';
    const body = { agent: this.agent, tool: call.tool, match: remember.match, scope: 'agent', ttl: remember.ttl, apply_to_waiting: true };
    if (remember.reason) body.reason = remember.reason;
    let grant;
    try {
      grant = await api('POST', 'v1/grants', body);
    } catch (e) {
      if (button.isConnected) {
        button.disabled = false;
        button.textContent = label;
        if (focusLost()) focusEl(button);
      }
      if (e instanceof ApiError && e.status === 422) replace(errorBox, h('p.error-title', { role: 'alert', text: `Refused by the server: ${e.message}` }));
      else notify(e.message, { kind: 'error', title: 'The grant was not made, and nothing was approved.' });
      return;
    }
    const open = h('a', { href: `#/grants/${encodeURIComponent(grant.id)}` }, 'Open grant ', h('code', { text: grantTag(grant.id) }));
    notify(appliedText(grant, this.runId), { kind: 'success', title: `Grant ${grantTag(grant.id)} made.`, action: open });
    button.disabled = false;
    button.textContent = label;
    if (!(grant.applied_to ?? []).includes(this.runId)) {
      await this.send({ decisions: [{ call_id: call.call_id, action: 'approve' }] }, button, errorBox);
      return;
    }
    // The grant approved this run itself: show it as it is now, then on to what is left to decide.
    try {
      const run = await api('GET', `v1/runs/${encodeURIComponent(this.runId)}`);
      this.deciding = true;
      try {
        this.onRun(run);
      } finally {
        this.deciding = false;
      }
    } catch {
      this.onConflict();
    }
    if (focusLost() || document.activeElement === button) this.focusNext(call.call_id);
  }

  /**
   * Posts decisions on the digest this panel shows. A 409 is explained and the run refreshed (a second
   * approval of a quorum call by the same person as such); a 422 (e.g. edited arguments the server's
   * validator refuses) is shown next to the form.
   */
  async send(body, button, errorBox) {
    const label = button?.textContent;
    const mineBefore = this.mine(this.calls);
    const open = openCalls({ calls: this.calls });
    // The calls the request acts on: approve all skips those this person approved already.
    const acted = body.approve_all ? open.filter((c) => !mineBefore.has(c.call_id)) : open;
    const decided = body.decisions?.[0]?.call_id ?? null;
    if (button) {
      button.disabled = true;
      button.textContent = 'Sending…';
    }
    try {
      const run = await api('POST', `v1/runs/${encodeURIComponent(this.runId)}/decisions`, { turn_digest: this.digest, ...body });
      this.learn(body, acted, run);
      const after = run.status === 'waiting_for_approval' ? run.pending : null;
      const mine = after ? this.mine(after.calls) : new Set();
      const still = openCalls(after);
      const waiting = still.filter((c) => mine.has(c.call_id));
      announce(decisionAnnouncement(body, acted, still.length - waiting.length, waiting));
      this.deciding = true;
      try {
        this.onRun(run);
      } finally {
        this.deciding = false;
      }
      // Unless the person went elsewhere meanwhile, on to the next call (the decided one's card is gone).
      if (focusLost() || document.activeElement === button) this.focusNext(decided);
    } catch (e) {
      if (button?.isConnected) {
        button.disabled = false;
        button.textContent = label;
        // The disabled button lost the focus; a refresh after a conflict may still take it away.
        if (focusLost()) focusEl(button);
      }
      const twice = e instanceof ApiError && e.status === 409 ? this.approvedTwice(body, acted, e) : [];
      if (twice.length) {
        for (const call of twice) this.approvedHere.add(call.call_id);
        notify(
          `${e.message}. Your approval is counted once; the run waits for another approver (you can still deny the call).`,
          { kind: 'error', title: 'You have already approved this call.' },
        );
        this.onConflict();
      } else if (e instanceof ApiError && e.status === 409) {
        notify(
          `${e.message}. Someone else may have decided first, or the held turn changed since this page showed it. The run has been refreshed: look again before deciding.`,
          { kind: 'error', title: 'Your decision was not recorded.' },
        );
        this.onConflict();
      } else if (e instanceof ApiError && e.status === 422 && errorBox) {
        replace(errorBox, h('p.error-title', { role: 'alert', text: `Refused by the server: ${e.message}` }));
      } else {
        notify(e.message, { kind: 'error', title: 'Your decision was not recorded.' });
      }
    }
  }

  /**
   * After an accepted decision: the quorum calls it approved are this page's (until the turn changes),
   * and the actor it was recorded as is learned — the one name a call's approvals gained, or the actor of
   * the decision it recorded.
   */
  learn(body, acted, run) {
    const approved = body.approve_all
      ? acted.map((c) => c.call_id)
      : (body.decisions ?? []).filter((d) => d.action === 'approve').map((d) => d.call_id);
    const actors = new Set();
    const before = new Map(acted.map((c) => [c.call_id, c]));
    const after = new Map((run.pending?.calls ?? []).map((c) => [c.call_id, c]));
    const decidedIds = body.decisions ? body.decisions.map((d) => d.call_id) : acted.map((c) => c.call_id);
    for (const id of decidedIds) {
      const was = before.get(id);
      const now = after.get(id);
      if (!was || !now) continue;
      if (!was.decision && now.decision?.actor) actors.add(now.decision.actor);
      else if (now.approvals && approved.includes(id)) {
        const known = new Set(was.approvals?.given ?? []);
        const gained = (now.approvals.given ?? []).filter((name) => !known.has(name));
        if (gained.length === 1) actors.add(gained[0]);
      }
    }
    for (const id of approved) if (before.get(id)?.approvals) this.approvedHere.add(id);
    // Two names would mean someone else's decision landed at the same moment: learn nothing then.
    if (actors.size === 1) learnActor([...actors][0]);
  }

  /**
   * The quorum calls a refused (409) approval was a second approval of, by its answer's words: none when
   * the conflict was something else (a stale turn, a call decided meanwhile).
   */
  approvedTwice(body, acted, error) {
    if (!/already approved/i.test(error.message)) return [];
    const ids = body.approve_all
      ? acted.map((c) => c.call_id)
      : (body.decisions ?? []).filter((d) => d.action === 'approve').map((d) => d.call_id);
    return acted.filter((c) => c.approvals && ids.includes(c.call_id));
  }

  /**
   * The first button of the next call still to decide: after call `after` (wrapping around), or the
   * first one; null when none is left.
   */
  nextControl(after = null) {
    if (this.el.hidden) return null;
    const cards = [...this.list.querySelectorAll('article.call')];
    const from = cards.findIndex((card) => card.dataset.callId === after);
    const order = from < 0 ? cards : [...cards.slice(from + 1), ...cards.slice(0, from)];
    for (const card of order) {
      // A call this person approved waits for someone else: nothing for them to do there.
      const button = card.matches('.is-decided, .is-awaiting-others') ? null : card.querySelector('.actions button');
      if (button) return button;
    }
    return null;
  }

  /**
   * After a decision: focus the next call still to decide, so deciding a turn needs no mouse; when none
   * is left, what the page says (the outcome, where the answer comes).
   */
  focusNext(after) {
    if (!focusEl(this.nextControl(after))) this.onDone();
  }
}

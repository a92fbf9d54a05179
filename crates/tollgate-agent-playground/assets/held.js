// The held calls of a waiting run (`run.pending.calls`) and the decisions on them.
//
// Each call the server says takes a decision (`takes_decision`: it waits, or is in doubt after a crash)
// gets approve, edit (a JSON editor checked against the tool's schema before anything is sent), deny with
// a reason and respond; the panel adds approve-all and deny-all. A call that already ran before a crash
// (`state: finished`) is shown with its result and no buttons. Every decision names the `turn_digest` the person saw, so a
// decision on a turn that changed since is refused (409) instead of landing on calls nobody looked at.
// Cards are kept across refreshes while their call is undecided, so a half-typed edit survives a
// decision someone makes on another call.
//
// Keyboard: Escape closes an open edit, deny or respond form and gives the focus back to its button.
// After a decision the focus goes to the next call still to decide (its first button), or, when none is
// left, to wherever the page says (`onDone`: the outcome). The live region says what was decided.

import { api, ApiError } from './api.js';
import { h, replace, uid } from './dom.js';
import { ACTION_WORDS, decisionAnnouncement, openCalls, pretty, settledNote } from './format.js';
import { escapeInvisibleJson, invisibleWarning } from './invisible.js';
import { checkArguments } from './schema.js';
import { announce, focusEl, focusLost, jsonBlock, notify, previewBlock } from './ui.js';

export { ACTION_WORDS };

/** "Denied by alice: not on a Friday" — a recorded decision in words. */
export function decisionText(decision) {
  const words = ACTION_WORDS[decision.action] ?? decision.action;
  const by = decision.actor ? ` by ${decision.actor}` : '';
  const why = decision.action === 'deny' && decision.reason ? `: ${decision.reason}` : '';
  return `${words}${by}${why}`;
}

export class HeldPanel {
  /**
   * @param {{runId: string, schemaOf: (tool: string) => (object|undefined), onRun: (run: object) => void,
   *   onConflict: () => void, onDone: () => void}} options `onDone`: every call is decided (move the focus)
   */
  constructor({ runId, schemaOf, onRun, onConflict, onDone }) {
    this.runId = runId;
    this.schemaOf = schemaOf;
    this.onRun = onRun;
    this.onConflict = onConflict;
    this.onDone = onDone;
    this.deciding = false; // true while a decision's answer is being shown (it moves the focus itself)
    this.digest = null;
    this.cards = new Map(); // call_id -> {el, decided}
    this.list = h('div.calls');
    this.bulk = h('div.bulk');
    this.summary = h('p.muted.small');
    this.heading = h('h2', { id: 'held-heading', tabindex: '-1', text: 'Waiting for a decision' });
    this.el = h(
      'section.card.held',
      { id: 'held', 'aria-labelledby': 'held-heading', hidden: true },
      this.heading,
      this.summary,
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
      return;
    }
    this.el.hidden = false;
    if (pending.turn_digest !== this.digest) {
      this.digest = pending.turn_digest;
      this.cards.clear();
      this.list.replaceChildren();
    }
    this.calls = pending.calls;
    for (const call of pending.calls) {
      const known = this.cards.get(call.call_id);
      const decided = Boolean(call.decision);
      if (known && known.decided === decided) continue;
      const card = this.card(call);
      if (known) known.el.replaceWith(card);
      else this.list.append(card);
      this.cards.set(call.call_id, { el: card, decided });
    }
    const open = openCalls(pending);
    const deadline = pending.expires_at ? ` Deadline: ${new Date(pending.expires_at).toLocaleString()}.` : '';
    const ran = pending.calls.filter((c) => c.state === 'finished').length;
    const sofar = ran === 0 ? 'Nothing of this turn has run yet.' : `${ran} call(s) already ran before a crash.`;
    this.summary.textContent =
      open.length === 0
        ? `Every call is decided; the run resumes.${deadline}`
        : `${open.length} of ${pending.calls.length} call(s) need your decision. ${sofar}${deadline}`;
    this.renderBulk(open);
  }

  renderBulk(open) {
    if (open.length === 0) {
      this.bulk.replaceChildren();
      return;
    }
    if (this.bulk.dataset.open === String(open.length) && this.bulk.childElementCount > 0) return;
    this.bulk.dataset.open = String(open.length);
    const reasonId = uid('deny-all-reason');
    const reason = h('input', { id: reasonId, type: 'text', placeholder: 'Why not?', autocomplete: 'off' });
    const approveAll = h('button.approve', {
      type: 'button',
      text: open.length > 1 ? `Approve all ${open.length}` : 'Approve all',
      onClick: () => this.send({ approve_all: true }, approveAll),
    });
    const denyAll = h('button.danger', { type: 'submit', text: 'Deny all' });
    replace(
      this.bulk,
      h('div.bulk-group', { role: 'group', 'aria-label': 'Decide every undecided call' }, approveAll),
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

  card(call) {
    const headingId = uid('call');
    const badges = [h(`span.badge.gate-${call.gate}`, { text: `gate: ${call.gate}` })];
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
    );
    if (call.decision) {
      const d = call.decision;
      const extra = [];
      if (d.action === 'edit') extra.push(jsonBlock(d.arguments, 'Edited arguments'));
      if (d.action === 'respond') extra.push(h('pre.code', null, h('code', { text: d.result })));
      card.append(h(`p.decided.decided-${d.action}`, { text: decisionText(d) }), ...extra);
      card.classList.add('is-decided');
      return card;
    }
    if (!call.takes_decision) {
      card.append(h('p.note', { text: settledNote(call) }));
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
    card.append(this.controls(call, warningId));
    return card;
  }

  /** The decision buttons and forms; `warningId`: the call's warning, which Approve is described by. */
  controls(call, warningId = null) {
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
    const approve = h('button.approve', {
      type: 'button',
      text: 'Approve',
      'aria-describedby': warningId,
      onClick: () => this.send({ decisions: [{ call_id: call.call_id, action: 'approve' }] }, approve),
    });
    const group = h(
      'div.actions',
      { role: 'group', 'aria-label': `Decide ${call.tool} ${call.call_id}` },
      approve,
      toggle('Edit…', (close) => this.editForm(call, close)),
      toggle('Deny…', (close) => this.denyForm(call, close)),
      toggle('Respond…', (close) => this.respondForm(call, close)),
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
   * Posts decisions on the digest this panel shows. A 409 is explained and the run refreshed; a 422
   * (e.g. edited arguments the server's validator refuses) is shown next to the form.
   */
  async send(body, button, errorBox) {
    const label = button?.textContent;
    const open = openCalls({ calls: this.calls });
    const decided = body.decisions?.[0]?.call_id ?? null;
    if (button) {
      button.disabled = true;
      button.textContent = 'Sending…';
    }
    try {
      const run = await api('POST', `v1/runs/${encodeURIComponent(this.runId)}/decisions`, { turn_digest: this.digest, ...body });
      const left = run.status === 'waiting_for_approval' ? openCalls(run.pending).length : 0;
      announce(decisionAnnouncement(body, open, left));
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
      if (e instanceof ApiError && e.status === 409) {
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
   * The first button of the next call still to decide: after call `after` (wrapping around), or the
   * first one; null when none is left.
   */
  nextControl(after = null) {
    if (this.el.hidden) return null;
    const cards = [...this.list.querySelectorAll('article.call')];
    const from = cards.findIndex((card) => card.dataset.callId === after);
    const order = from < 0 ? cards : [...cards.slice(from + 1), ...cards.slice(0, from)];
    for (const card of order) {
      const button = card.matches('.is-decided') ? null : card.querySelector('.actions button');
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

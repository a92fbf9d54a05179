// The run page: the run's facts, its held calls (when waiting), its outcome, and the step list drawn
// from its events — loaded with GET (so a reload shows the same history, held calls included) and then
// followed live over SSE until the run's terminal event.
//
// Focus: opening the page focuses its heading; after the last decision, the outcome (the answer, or the
// run's state until then); when an update takes away the element that had the focus, the next call to
// decide, else the outcome, else the heading. The live region says the run's state when the page opens
// and when its status changes. A call a grant allowed, and a decision that made one, link to the grant's
// own page (`#/grants/ID`). An escalated held turn says so in the held panel (after how long: its
// `approval_escalated` step's `after`), and a decision made through a signed link says so in its step.

import { api, ApiError } from './api.js';
import { appendTo, h, replace } from './dom.js';
import { approvalsText, notifiedText, runSummary, runTag, statusText, summarize } from './format.js';
import { ACTION_WORDS, HeldPanel } from './held.js';
import { follow, TERMINAL } from './live.js';
import { announce, focusEl, focusLost, grantLink, jsonBlock, notify, previewBlock, statusBadge, timeEl } from './ui.js';

const TERMINAL_STATUSES = new Set(['completed', 'failed', 'cancelled', 'expired']);

/**
 * Renders the run page into `root`; returns its `destroy`.
 * @param {{focus?: boolean}} [options] `focus`: this is a page change, so focus the page's heading
 */
export function runView(root, id, { focus = false } = {}) {
  const page = new RunPage(root, id, focus);
  return { destroy: () => page.destroy() };
}

class RunPage {
  constructor(root, id, focus) {
    this.root = root;
    this.id = id;
    this.lastSeq = 0;
    this.lastRound = 0;
    this.answeredRound = 0; // the last round whose stored turn is shown
    this.liveStep = null; // {round, el, text}: the model's text of the round under way
    this.calls = new Map(); // call_id -> {tool, arguments}, from model responses
    this.toolSteps = new Map(); // call_id -> the step of its execution
    this.escalations = new Map(); // turn_digest -> how long it waited before it was escalated (`after`)
    this.schemas = new Map();
    this.stop = null;
    this.refreshTimer = null;
    document.title = `Tollgate — run ${runTag(id)}`;
    this.renderShell();
    if (focus) this.title.focus();
    this.load();
  }

  /** The breadcrumb and the heading, shown at once (the heading takes the focus), then filled in. */
  renderShell() {
    this.title = h('h1', { tabindex: '-1', 'data-page-heading': true }, 'Run ', h('code', { text: runTag(this.id) }));
    this.badge = h('span.status-slot');
    // Live / Reconnecting… is for the eyes; the live region says what changes.
    this.live = h('span.live');
    this.loading = h('p.muted.loading', { text: 'Loading the run…' });
    this.head = h('header.card.run-head', null, h('div.title-row', null, this.title, this.badge, this.live), this.loading);
    this.page = h('div.run-page', null, h('nav.crumbs', { 'aria-label': 'Breadcrumb' }, h('a', { href: '#/', text: '← All runs' })), this.head);
    replace(this.root, this.page);
  }

  destroy() {
    this.destroyed = true;
    this.stop?.();
    clearTimeout(this.refreshTimer);
  }

  async load() {
    let run;
    let events;
    try {
      [run, { events }] = await Promise.all([
        api('GET', `v1/runs/${encodeURIComponent(this.id)}`),
        api('GET', `v1/runs/${encodeURIComponent(this.id)}/events`),
      ]);
    } catch (e) {
      if (this.destroyed) return;
      const text = e instanceof ApiError && e.status === 404 ? `There is no run ${this.id}.` : `The run could not be loaded: ${e.message}`;
      this.loading.replaceWith(h('p.notice.notice-error', { role: 'alert', text }));
      return;
    }
    if (this.destroyed) return;
    await this.loadSchemas(run.agent);
    if (this.destroyed) return;
    this.render();
    for (const event of events) this.addEvent(event);
    this.applyRun(run);
    // The two reads raced: only a run whose terminal event is already shown has nothing more to come.
    if (TERMINAL_STATUSES.has(run.status) && events.some((e) => TERMINAL.has(e.kind))) this.setLive('ended');
    else this.goLive();
  }

  async loadSchemas(agent) {
    try {
      const { tools } = await api('GET', `v1/tools?agent=${encodeURIComponent(agent)}`);
      for (const tool of tools) this.schemas.set(tool.name, tool.parameters);
    } catch {
      // Without schemas the editor still checks JSON syntax; the server validates anyway.
    }
  }

  render() {
    this.facts = h('dl.facts');
    this.input = h('p.run-input');
    this.actions = h('div.run-actions');
    this.held = new HeldPanel({
      runId: this.id,
      schemaOf: (tool) => this.schemas.get(tool),
      onRun: (run) => this.applyRun(run),
      onConflict: () => this.refresh(),
      onDone: () => this.focusOutcome(),
      escalatedAfter: (digest) => this.escalations.get(digest) ?? null,
    });
    // The answer once the run ends; until then (and not waiting) the run's state. It takes the focus
    // after the last decision, so the answer is where the person already is when it comes.
    this.outcome = h('section.card.outcome', { id: 'outcome', hidden: true, tabindex: '-1', 'aria-labelledby': 'outcome-heading' });
    this.steps = h('ol.steps', { id: 'steps', 'aria-labelledby': 'steps-heading' });
    this.loading.replaceWith(h('h2.label', { text: 'Input' }), this.input, this.facts, this.actions);
    this.page.append(
      this.held.el,
      this.outcome,
      h('section.card', { 'aria-labelledby': 'steps-heading' }, h('h2', { id: 'steps-heading', tabindex: '-1', text: 'Steps' }), this.steps),
    );
  }

  /** After the last decision: the outcome when it shows, else the held panel's heading until it does. */
  focusOutcome() {
    if (!focusEl(this.outcome)) focusEl(this.held.heading);
  }

  /**
   * The focus was on something an update took away (a decided call's card, the held panel, the cancel
   * form): the next call to decide, else the held panel's heading, else the outcome, else the heading.
   */
  rescueFocus() {
    const target = this.held.el.hidden ? null : (this.held.nextControl() ?? this.held.heading);
    if (!focusEl(target) && !focusEl(this.outcome)) focusEl(this.title);
  }

  goLive() {
    let opened = false;
    this.stop = follow(this.id, this.lastSeq, {
      onEvent: (event) => {
        if (this.addEvent(event)) this.scheduleRefresh(TERMINAL.has(event.kind) ? 0 : 120);
      },
      onDelta: (delta) => this.addDelta(delta),
      onState: (state) => {
        this.setLive(state);
        // The first load read the run and its events at once, so the run may be older than the events
        // (a queued run claimed and driven to the gate between the two reads): the stream then brings
        // nothing new, and the held calls would never show. Once the stream is open, read the run again:
        // that read comes after the events', so it shows at least what they say.
        if (state === 'live' && !opened) {
          opened = true;
          this.scheduleRefresh(0);
        }
        // The stream is over (the run ended, maybe before it opened): show the run as it ended.
        if (state === 'ended') this.scheduleRefresh(0);
      },
    });
  }

  setLive(state) {
    const text = { live: 'Live', reconnecting: 'Reconnecting…', ended: '' }[state] ?? '';
    this.live.className = `live live-${state}`;
    this.live.textContent = text;
  }

  scheduleRefresh(delay) {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refresh(), delay);
  }

  async refresh() {
    try {
      const run = await api('GET', `v1/runs/${encodeURIComponent(this.id)}`);
      if (!this.destroyed) this.applyRun(run);
    } catch (e) {
      if (!this.destroyed) notify(e.message, { kind: 'error', title: 'The run could not be refreshed.' });
    }
  }

  /** Shows the run's current state: facts, held calls, outcome. */
  applyRun(run) {
    if (this.destroyed) return;
    // An older answer (e.g. a decision's response after the stream already showed more) never wins.
    if (this.run && run.version < this.run.version) return;
    const before = this.run;
    const hadFocus = this.root.contains(document.activeElement) && document.activeElement !== this.root;
    this.run = run;
    replace(this.badge, statusBadge(run.status));
    replace(this.input, run.input);
    const usage = run.usage ?? {};
    const fact = (term, ...value) => h('div', { class: term === 'Id' ? 'wide' : null }, h('dt', { text: term }), h('dd', null, ...value));
    replace(
      this.facts,
      fact('Agent', run.agent),
      fact('Started by', run.created_by),
      fact('Created', timeEl(run.created_at)),
      fact(run.finished_at ? 'Finished' : 'Updated', timeEl(run.finished_at ?? run.updated_at)),
      fact('Model calls', String(run.iterations)),
      fact('Tokens', `${usage.input_tokens ?? 0} in · ${usage.output_tokens ?? 0} out`),
      fact('Id', h('code.select', { text: run.id })),
    );
    this.renderActions(run);
    this.held.update(run);
    this.renderOutcome(run);
    // The page opened, or the run's status changed: say so (not for every event).
    if (!before || before.status !== run.status) announce(runSummary(run));
    // A decision being sent moves the focus itself once its answer is shown.
    if (hadFocus && focusLost() && !this.held.deciding) this.rescueFocus();
    if (TERMINAL_STATUSES.has(run.status) && this.stop) {
      // The stream ends by itself after the terminal event; nothing more will come.
      this.setLive('ended');
    }
  }

  renderActions(run) {
    if (TERMINAL_STATUSES.has(run.status)) {
      this.actions.replaceChildren();
      return;
    }
    if (this.actions.childElementCount > 0) return;
    const reason = h('input', { id: 'cancel-reason', type: 'text', autocomplete: 'off', placeholder: 'optional' });
    const button = h('button.danger.subtle', { type: 'submit', text: 'Cancel run' });
    const summary = h('summary', { text: 'Cancel this run…' });
    replace(
      this.actions,
      h(
        'details.cancel',
        {
          onKeydown: (e) => {
            if (e.key !== 'Escape' || !e.currentTarget.open) return;
            e.preventDefault();
            e.currentTarget.open = false;
            summary.focus();
          },
        },
        summary,
        h(
          'form.row',
          {
            'aria-label': 'Cancel this run',
            onSubmit: async (e) => {
              e.preventDefault();
              button.disabled = true;
              try {
                const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
                this.applyRun(await api('POST', `v1/runs/${encodeURIComponent(this.id)}/cancel`, body));
              } catch (err) {
                notify(err.message, { kind: 'error', title: 'The run was not cancelled.' });
                if (err instanceof ApiError && err.status === 409) this.refresh();
              } finally {
                button.disabled = false;
              }
              // The disabled button lost the focus: back to it, or (cancelled) to the outcome.
              if (focusLost() && !focusEl(button)) this.rescueFocus();
            },
          },
          h('label', { for: 'cancel-reason', text: 'Reason' }),
          reason,
          button,
        ),
      ),
    );
  }

  renderOutcome(run) {
    if (run.status === 'waiting_for_approval') {
      this.outcome.hidden = true;
      delete this.outcome.dataset.version;
      return;
    }
    // Until the end the state is all it says; at the end, the run as it ended.
    const key = TERMINAL_STATUSES.has(run.status) ? String(run.version) : run.status;
    if (this.outcome.dataset.version === key) return;
    this.outcome.dataset.version = key;
    this.outcome.hidden = false;
    this.outcome.className = `card outcome outcome-${run.status}`;
    const body = [];
    if (!TERMINAL_STATUSES.has(run.status)) {
      body.push(h('h2', { id: 'outcome-heading', text: 'Answer' }));
      body.push(h('p.muted', { text: `The run is ${statusText(run.status)}: its answer appears here when it ends.` }));
    } else if (run.status === 'completed') {
      body.push(h('h2', { id: 'outcome-heading', text: 'Answer' }));
      body.push(run.output === null ? h('p.muted', { text: 'The model gave no text.' }) : h('p.answer', { id: 'answer', text: run.output }));
      if (run.termination_reason && run.termination_reason !== 'completed') {
        body.push(h('p.note', { text: `Stopped early: ${run.termination_reason.replaceAll('_', ' ')}.` }));
      }
    } else if (run.status === 'failed') {
      body.push(h('h2', { id: 'outcome-heading', text: 'Failed' }));
      body.push(h('p.error-text', { text: run.error ? `${run.error.kind}: ${run.error.message}` : 'The run failed.' }));
    } else {
      body.push(h('h2', { id: 'outcome-heading', text: run.status === 'cancelled' ? 'Cancelled' : 'Expired' }));
      body.push(h('p', { text: run.status === 'cancelled' ? 'The run was cancelled before it finished.' : 'The approval deadline passed.' }));
    }
    replace(this.outcome, body);
  }

  /**
   * The model's text of the round under way, as it streams: one step at the end of the list, growing,
   * until the round's stored turn replaces it (a reset clears it: the call is tried again).
   */
  addDelta(delta) {
    if (delta.round <= this.answeredRound) return;
    if (!this.liveStep || this.liveStep.round !== delta.round) {
      this.liveStep?.el.remove();
      const text = h('p.model-text.live-text');
      const el = h(
        'li.step.step-model.step-live',
        { dataset: { kind: 'model_delta', round: delta.round } },
        h('div.step-head', null, h('h3.step-title', null, 'Model writing…'), h('span.step-meta', { text: `round ${delta.round}` })),
        h('div.step-body', null, text),
      );
      this.liveStep = { round: delta.round, el, text };
      this.steps.append(el);
    }
    if (delta.reset) this.liveStep.text.replaceChildren();
    else appendTo(this.liveStep.text, delta.text);
  }

  /** Adds one event to the step list; false when it was already shown. */
  addEvent(event) {
    if (typeof event.seq !== 'number' || event.seq <= this.lastSeq) return false;
    this.lastSeq = event.seq;
    if (event.kind === 'model_response' || TERMINAL.has(event.kind)) {
      // The stored turn (or the end) replaces the live text of its round.
      this.answeredRound = Math.max(this.answeredRound ?? 0, event.round ?? 0);
      if (this.liveStep && this.liveStep.round <= this.answeredRound) {
        this.liveStep.el.remove();
        this.liveStep = null;
      }
      if (TERMINAL.has(event.kind)) {
        this.liveStep?.el.remove();
        this.liveStep = null;
      }
    }
    if (event.kind === 'approval_escalated' && typeof event.data?.turn_digest === 'string' && typeof event.data.after === 'string') {
      this.escalations.set(event.data.turn_digest, event.data.after);
    }
    if (event.round > 0 && event.round !== this.lastRound) {
      this.lastRound = event.round;
      this.steps.append(h('li.round', null, h('span', { text: `Round ${event.round}` })));
    }
    const step = this.step(event);
    if (step) this.steps.append(step);
    return true;
  }

  toolOf(callId) {
    return this.calls.get(callId)?.tool ?? 'tool';
  }

  step(event) {
    const d = event.data ?? {};
    const item = (kind, title, ...body) =>
      h(
        `li.step.step-${kind}`,
        { dataset: { seq: event.seq, kind: event.kind } },
        // Each step's title is a heading under "Steps" (h2), so the labels inside a step (h4) skip no level.
        h('div.step-head', null, h('h3.step-title', null, title), h('span.step-meta', null, `#${event.seq} · `, timeEl(event.at))),
        body.length ? h('div.step-body', null, ...body) : null,
      );
    switch (event.kind) {
      case 'run_started':
        return item('start', 'Run started', h('p', null, `Started by `, h('strong', { text: d.actor ?? '?' }), ` with agent `, h('strong', { text: d.agent ?? '?' }), '.'));
      case 'model_request': {
        const tools = Array.isArray(d.tools) ? d.tools.join(', ') : '';
        return item('quiet', 'Model called', h('p.muted', { text: `${d.messages ?? '?'} message(s)${tools ? ` · tools: ${tools}` : ' · no tools'}` }));
      }
      case 'model_response': {
        const calls = Array.isArray(d.tool_calls) ? d.tool_calls : [];
        for (const c of calls) this.calls.set(c.call_id, { tool: c.tool, arguments: c.arguments });
        const usage = d.usage ? `${d.usage.input_tokens ?? 0} in · ${d.usage.output_tokens ?? 0} out tokens` : '';
        return item(
          'model',
          calls.length ? `Model turn: ${calls.length} tool call(s)` : 'Model turn',
          d.text ? h('p.model-text', { text: d.text }) : null,
          calls.length
            ? h(
                'ul.call-list',
                null,
                calls.map((c) =>
                  h(
                    'li',
                    null,
                    h('div.call-line', null, h('code.tool', { text: c.tool }), ' ', h('span.call-id', { text: c.call_id })),
                    jsonBlock(c.arguments, `Arguments of ${c.call_id}`),
                  ),
                ),
              )
            : null,
          usage ? h('p.muted.small', { text: usage }) : null,
        );
      }
      case 'approval_requested': {
        const calls = Array.isArray(d.calls) ? d.calls : [];
        return item(
          'gate',
          'Approval requested',
          h('ul.call-list', null,
            calls.map((c) =>
              h(
                'li',
                null,
                h('div.call-line', null, h('code.tool', { text: c.tool }), ' ', h('span.call-id', { text: c.call_id }), ' ', h(`span.badge.gate-${c.gate}`, { text: `gate: ${c.gate}` }), c.in_doubt ? h('span.badge.in-doubt', { text: 'in doubt' }) : null),
                c.gate === 'ask' || c.in_doubt ? previewBlock(c.preview, `Preview of ${c.call_id}`) : null,
              ),
            ),
          ),
          d.expires_at ? h('p.muted.small', null, 'Deadline ', timeEl(d.expires_at)) : null,
        );
      }
      case 'decision': {
        const tool = this.toolOf(d.call_id);
        const title = [ACTION_WORDS[d.action] ?? d.action, ' by ', h('span.actor', { text: d.actor ?? '?' })];
        // Made through a signed link from a Slack message or a mail (V2 §4): its actor is the notifier's `as`.
        if (d.link) title.push(' ', h('span.via-link', { text: 'via signed link', title: `Signed link ${d.link}` }));
        const body = [h('div.call-line', null, h('code.tool', { text: tool }), ' ', h('span.call-id', { text: d.call_id }))];
        if (d.action === 'deny') body.push(h('p.reason', null, 'Reason: ', h('q', { text: d.reason ?? '' })));
        if (d.action === 'edit') body.push(jsonBlock(d.arguments, 'Edited arguments'));
        if (d.action === 'respond') body.push(h('pre.code', null, h('code', { text: d.result ?? '' })));
        // Approve and remember: the grant made with this decision.
        if (d.grant) body.push(h('p.grant-note', null, 'Remembered as ', grantLink(d.grant), ': calls like this one pass without a person until it expires or is revoked.'));
        // A quorum call's vote: its count after this vote (how many are still missing, while it takes more).
        const approvals = approvalsText(d.approvals, { open: d.action === 'approve' });
        if (approvals) body.push(h('p.quorum-count', null, h('span.label-inline', { text: 'Approvals: ' }), approvals));
        return item(`decision.decision-${d.action}`, title, ...body);
      }
      case 'approval_escalated':
        // The held turn waited its agent's `escalate_after` (V2 §4): more people were told; it keeps waiting.
        return item(
          'escalation',
          'Approval escalated',
          h(
            'p',
            null,
            'Still waiting after ',
            h('strong', { text: d.after ?? '?' }),
            ': notified ',
            h('span.notified', { text: notifiedText(d.notified) }),
            '.',
          ),
        );
      case 'run_resumed':
        return item('quiet', 'Resumed', h('p.muted', null, 'by ', h('strong', { text: d.actor ?? '?' })));
      case 'run_taken_over':
        return item(
          'quiet',
          'Taken over',
          h('p.muted', null, 'by ', h('strong', { text: d.owner ?? '?' }), ' after the lease of ', h('strong', { text: d.previous_owner ?? '?' }), ' expired'),
        );
      case 'tool_started': {
        const status = h('span.tool-status', { text: 'running…' });
        const step = item(
          'tool',
          ['Ran ', h('code.tool', { text: d.tool ?? this.toolOf(d.call_id) })],
          h('div.call-line', null, h('span.call-id', { text: d.call_id }), ' ', status),
          h('p.muted.small', { text: summarize(d.arguments) }),
          // No person was asked: a grant allowed it (`grant` is null on every other call, absent before grants).
          d.grant ? h('p.grant-note', null, 'Allowed by ', grantLink(d.grant), ', without a person.') : null,
        );
        step.dataset.callId = d.call_id;
        this.toolSteps.set(d.call_id, { step, status });
        return step;
      }
      case 'tool_finished': {
        const result = h(`pre.code.result${d.is_error ? '.is-error' : ''}`, { 'aria-label': `Result of ${d.call_id}` }, h('code', { text: d.result ?? '' }));
        const known = this.toolSteps.get(d.call_id);
        if (known) {
          known.status.textContent = d.is_error ? 'error' : 'done';
          known.status.className = `tool-status ${d.is_error ? 'is-error' : 'is-ok'}`;
          known.step.querySelector('.step-body')?.append(h('h4.label', { text: 'Result' }), result);
          return null;
        }
        return item('tool', `Tool result: ${d.tool ?? this.toolOf(d.call_id)}`, h('div.call-line', null, h('span.call-id', { text: d.call_id })), result);
      }
      case 'run_completed':
        return item(
          'end.end-ok',
          'Completed',
          d.output === null || d.output === undefined ? h('p.muted', { text: 'No final text.' }) : h('p.answer', { text: d.output }),
          d.termination_reason && d.termination_reason !== 'completed' ? h('p.note', { text: `Termination: ${d.termination_reason}` }) : null,
        );
      case 'run_failed':
        return item('end.end-error', 'Failed', h('p.error-text', { text: d.error ? `${d.error.kind}: ${d.error.message}` : 'The run failed.' }));
      case 'run_cancelled':
        return item('end', 'Cancelled', h('p', null, 'by ', h('strong', { text: d.actor ?? '?' }), d.reason ? `: ${d.reason}` : ''));
      case 'run_expired':
        return item('end', 'Expired', h('p', null, 'The approval deadline passed ', timeEl(d.deadline), '.'));
      default:
        return item('quiet', event.kind, jsonBlock(d));
    }
  }
}

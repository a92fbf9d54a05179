// The home view: start a run, the inbox of runs waiting for approval (an escalated one says so: when,
// and whom it told), and every run with a status filter. The inbox and the first page of runs refresh
// every few seconds while the page is visible.
//
// Focus: a refresh that re-renders a list gives the focus back to the same run's link; starting a run
// focuses the notice's link to it; coming back from a run page focuses that run's link (else the list's
// heading).

import { api } from './api.js';

/** Why a list is empty, in words: a missing token is not a failure of the server. */
function reasonOf(error) {
  return error.status === 401 ? 'enter an API token (top right) to see it.' : error.message;
}
import { h, replace } from './dom.js';
import { openCalls, plural, runLinkName, runTag } from './format.js';
import { announce, escalationNote, focusEl, focusLost, notify, STATUSES, statusBadge, timeEl } from './ui.js';

const POLL_MS = 2000;
const PAGE = 25;
const INBOX_LIMIT = 100;

/** Which list the last run link followed was in (`inbox` or `runs`), to come back to it. */
let openedFrom = null;

/**
 * Renders the home view into `root`; returns its `destroy`.
 * @param {{focus?: boolean, from?: string|null}} [options] `focus`: this is a page change, so move the
 *   focus (to the link of run `from`, the run page just left, else to a list heading)
 */
export function homeView(root, { focus = false, from = null } = {}) {
  const view = new HomeView(root, { focus, from });
  return { destroy: () => view.destroy() };
}

/** The calls of a waiting run that still need a person. */
function undecided(run) {
  return openCalls(run.pending).length;
}

class HomeView {
  constructor(root, { focus, from }) {
    this.root = root;
    this.filter = '';
    this.nextCursor = null;
    this.extraPages = false;
    this.inboxSignature = null;
    this.runsSignature = null;
    this.render();
    this.loadAgents();
    const loaded = this.refresh();
    if (focus) this.focusOnArrival(loaded, from);
    this.timer = setInterval(() => {
      if (!document.hidden) this.refresh();
    }, POLL_MS);
  }

  /**
   * A page change to the list: once the lists are in (or after a moment), focus the link of the run
   * just left, in the list it was opened from first; else that list's heading. Then say where we are.
   */
  focusOnArrival(loaded, from) {
    const lists = openedFrom === 'inbox' ? [this.inboxList, this.runsBody] : [this.runsBody, this.inboxList];
    const heading = openedFrom === 'inbox' ? this.inboxHeading : this.runsHeading;
    const early = setTimeout(() => {
      if (focusLost()) focusEl(heading);
    }, 400);
    loaded.then(() => {
      clearTimeout(early);
      if (this.destroyed) return;
      if (focusLost() || document.activeElement === heading) {
        const link = from ? lists.map((list) => linkOf(list, from)).find(Boolean) : null;
        focusEl(link ?? heading);
      }
      const waiting = this.inboxCount.getAttribute('aria-label');
      announce(waiting ? `All runs. Inbox: ${waiting}.` : 'All runs.');
    });
  }

  /**
   * Re-renders a list with `update`; when one of its links had the focus, gives it back to the same
   * run's link, else the link now in its place, else the list's heading (never to `<body>`).
   */
  keepFocus(list, heading, update) {
    const active = document.activeElement;
    const had = active && list.contains(active) ? active.closest('a[data-run-id]') : null;
    const index = had ? links(list).indexOf(had) : -1;
    update();
    if (!had || list.contains(document.activeElement)) return;
    const now = links(list);
    focusEl(linkOf(list, had.dataset.runId) ?? now[Math.min(index, now.length - 1)] ?? heading);
  }

  destroy() {
    clearInterval(this.timer);
    this.destroyed = true;
  }

  render() {
    document.title = 'Tollgate — runs';
    this.agentSelect = h('select', { id: 'agent', name: 'agent' }, h('option', { value: '', text: 'Loading agents…' }));
    this.agentHint = h('p.hint', { id: 'agent-hint' });
    this.agentSelect.setAttribute('aria-describedby', 'agent-hint');
    this.agentSelect.addEventListener('change', () => this.describeAgent());
    this.input = h('textarea', {
      id: 'run-input',
      name: 'input',
      rows: 4,
      required: true,
      placeholder: 'What should the agent do?',
    });
    this.startButton = h('button.primary', { type: 'submit', text: 'Start run' });
    // Which list a run was opened from, for the way back.
    const remember = (list) => (e) => {
      if (e.target.closest?.('a[data-run-id]')) openedFrom = list;
    };
    const form = h(
      'form.stack',
      { 'aria-labelledby': 'start-heading', onSubmit: (e) => this.start(e) },
      h('div.field', null, h('label', { for: 'agent', text: 'Agent' }), this.agentSelect, this.agentHint),
      h('div.field', null, h('label', { for: 'run-input', text: 'Input' }), this.input),
      h('div.row', null, this.startButton),
    );
    const start = h('section.card', { 'aria-labelledby': 'start-heading' }, h('h2', { id: 'start-heading', text: 'Start a run' }), form);

    this.inboxCount = h('span.count', { id: 'inbox-count', text: '…' });
    this.inboxList = h('ul.inbox-list', { id: 'inbox-list', 'aria-labelledby': 'inbox-heading', onClick: remember('inbox') });
    this.inboxHeading = h('h2', { id: 'inbox-heading', tabindex: '-1', 'data-page-heading': true }, 'Inbox ', this.inboxCount);
    const inbox = h(
      'section.card.inbox',
      { 'aria-labelledby': 'inbox-heading' },
      this.inboxHeading,
      h('p.muted.small', { text: 'Runs waiting for a decision, the nearest deadline first.' }),
      this.inboxList,
    );

    const filter = h(
      'select',
      { id: 'status-filter', onChange: (e) => this.setFilter(e.target.value) },
      h('option', { value: '', text: 'All statuses' }),
      STATUSES.map((s) => h('option', { value: s, text: s.replaceAll('_', ' ') })),
    );
    this.runsBody = h('tbody', { id: 'runs-body', onClick: remember('runs') });
    this.runsHeading = h('h2', { id: 'runs-heading', tabindex: '-1', text: 'All runs' });
    this.more = h('button', { type: 'button', text: 'More', hidden: true, onClick: () => this.loadMore() });
    this.runsEmpty = h('p.muted.empty', { hidden: true, text: 'No runs yet.' });
    const runs = h(
      'section.card.runs',
      { 'aria-labelledby': 'runs-heading' },
      h(
        'div.card-head',
        null,
        this.runsHeading,
        h(
          'div.row',
          null,
          h('label', { for: 'status-filter', text: 'Status' }),
          filter,
          h('button', { type: 'button', text: 'Refresh', onClick: () => this.reloadRuns() }),
        ),
      ),
      h(
        'div.table-wrap',
        null,
        h(
          'table.runs-table',
          null,
          h('caption.sr-only', { text: 'Runs, newest first' }),
          h(
            'thead',
            null,
            h(
              'tr',
              null,
              ['Run', 'Status', 'Agent', 'Input', 'Started by', 'Created'].map((c) => h('th', { scope: 'col', text: c })),
            ),
          ),
          this.runsBody,
        ),
      ),
      this.runsEmpty,
      h('div.row.center', null, this.more),
    );

    replace(this.root, h('h1.sr-only', { text: 'Runs' }), h('div.home', null, h('div.column', null, inbox, start), runs));
  }

  async loadAgents() {
    try {
      const { agents } = await api('GET', 'v1/agents');
      this.agents = agents;
      replace(this.agentSelect, agents.map((a) => h('option', { value: a.name, text: a.name })));
      if (agents.length === 0) replace(this.agentSelect, h('option', { value: '', text: 'No agents configured' }));
      this.describeAgent();
    } catch (e) {
      replace(this.agentSelect, h('option', { value: '', text: 'The default agent' }));
      replace(this.agentHint, `Agents could not be listed: ${reasonOf(e)}`);
    }
  }

  describeAgent() {
    const agent = (this.agents ?? []).find((a) => a.name === this.agentSelect.value);
    replace(this.agentHint, agent ? `Model ${agent.model ?? '—'} · tools: ${agent.tools.join(', ') || 'none'}` : '');
  }

  async start(event) {
    event.preventDefault();
    const input = this.input.value;
    if (input.trim() === '') {
      notify('Write an input for the agent first.', { kind: 'error' });
      this.input.focus();
      return;
    }
    this.startButton.disabled = true;
    this.startButton.textContent = 'Starting…';
    let open = null;
    try {
      const body = { input };
      if (this.agentSelect.value) body.agent = this.agentSelect.value;
      const run = await api('POST', 'v1/runs', body);
      this.input.value = '';
      open = h('a', { href: `#/runs/${run.id}`, text: 'Open it', 'aria-label': `Open it: run ${runTag(run.id)}` });
      notify(`Run ${runTag(run.id)} of ${run.agent} started.`, { kind: 'success', action: open });
      this.refresh();
    } catch (e) {
      notify(e.message, { kind: 'error', title: 'The run was not started.' });
    } finally {
      this.startButton.disabled = false;
      this.startButton.textContent = 'Start run';
    }
    // Next is opening the new run (its link is in the notice at the top); after a failure, trying again.
    // The disabled button lost the focus meanwhile, unless the person moved it elsewhere.
    if (this.destroyed || !(focusLost() || document.activeElement === this.startButton)) return;
    if (!focusEl(open)) focusEl(this.startButton);
  }

  /** Reloads the inbox and (unless more pages are shown) the runs; resolves once both are shown. */
  refresh() {
    return Promise.all([this.loadInbox(), this.extraPages ? null : this.loadRuns()]);
  }

  async loadInbox() {
    let page;
    try {
      page = await api('GET', `v1/runs?status=waiting_for_approval&limit=${INBOX_LIMIT}`);
    } catch (e) {
      if (this.inboxSignature !== 'error' && !this.destroyed) {
        this.inboxSignature = 'error';
        this.inboxCount.textContent = '?';
        this.keepFocus(this.inboxList, this.inboxHeading, () =>
          replace(this.inboxList, h('li.muted', { text: `The inbox could not be loaded: ${reasonOf(e)}` })),
        );
      }
      return;
    }
    if (this.destroyed) return;
    const signature = JSON.stringify(page);
    if (signature === this.inboxSignature) return;
    this.inboxSignature = signature;
    const runs = [...page.runs].sort((a, b) => {
      const da = a.pending?.expires_at ? Date.parse(a.pending.expires_at) : Infinity;
      const db = b.pending?.expires_at ? Date.parse(b.pending.expires_at) : Infinity;
      return da - db || Date.parse(a.created_at) - Date.parse(b.created_at);
    });
    const count = page.next_cursor ? `${runs.length}+` : String(runs.length);
    this.inboxCount.textContent = count;
    this.inboxCount.setAttribute('aria-label', page.next_cursor ? `${count} runs waiting` : `${plural(runs.length, 'run')} waiting`);
    this.keepFocus(this.inboxList, this.inboxHeading, () => this.renderInbox(runs));
  }

  renderInbox(runs) {
    if (runs.length === 0) {
      replace(this.inboxList, h('li.empty.muted', { text: 'Nothing is waiting. Runs that reach the gate appear here.' }));
      return;
    }
    replace(
      this.inboxList,
      runs.map((run) => {
        const n = undecided(run);
        const deadline = run.pending?.expires_at;
        const escalated = run.pending?.escalated;
        return h(
          'li',
          null,
          h(
            escalated ? 'a.inbox-item.is-escalated' : 'a.inbox-item',
            // Named by its text (the visible words, for speech input): agent, id tail, input, count, times,
            // and once the turn was escalated, that it was, when and whom it told.
            { href: `#/runs/${run.id}`, dataset: { runId: run.id } },
            h('span.inbox-top', null, h('span.agent', { text: run.agent }), h('code.id', { text: runTag(run.id) })),
            h('span.inbox-input', { text: run.input }),
            h(
              'span.inbox-meta',
              null,
              h('span.pill', { text: `${n} to decide` }),
              ' ',
              timeEl(run.created_at, 'started '),
              ' · ',
              deadline ? h('span.deadline', null, timeEl(deadline, 'deadline ')) : h('span.muted', { text: 'no deadline' }),
            ),
            escalated ? escalationNote(escalated, { tag: 'span' }) : null,
          ),
        );
      }),
    );
  }

  setFilter(value) {
    this.filter = value;
    this.reloadRuns();
  }

  reloadRuns() {
    this.extraPages = false;
    this.runsSignature = null;
    this.loadRuns();
  }

  runsPath(cursor) {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (this.filter) q.set('status', this.filter);
    if (cursor) q.set('cursor', cursor);
    return `v1/runs?${q}`;
  }

  async loadRuns() {
    const filter = this.filter;
    let page;
    try {
      page = await api('GET', this.runsPath(null));
    } catch (e) {
      if (this.runsSignature !== 'error' && !this.destroyed) {
        this.runsSignature = 'error';
        this.keepFocus(this.runsBody, this.runsHeading, () =>
          replace(this.runsBody, h('tr', null, h('td', { colspan: 6, text: `Runs could not be loaded: ${reasonOf(e)}` }))),
        );
      }
      return;
    }
    if (this.destroyed || filter !== this.filter || this.extraPages) return;
    const signature = JSON.stringify(page);
    if (signature === this.runsSignature) return;
    this.runsSignature = signature;
    this.keepFocus(this.runsBody, this.runsHeading, () => replace(this.runsBody, page.runs.map((run) => this.row(run))));
    this.showPaging(page);
  }

  async loadMore() {
    if (!this.nextCursor) return;
    this.more.disabled = true;
    let added = [];
    try {
      const page = await api('GET', this.runsPath(this.nextCursor));
      this.extraPages = true;
      added = page.runs.map((run) => this.row(run));
      this.runsBody.append(...added);
      this.showPaging(page);
      announce(`${plural(added.length, 'more run')} shown.`);
    } catch (e) {
      notify(e.message, { kind: 'error', title: 'More runs could not be loaded.' });
    } finally {
      this.more.disabled = false;
    }
    // The disabled button lost the focus: back to it while there is more, else to the first new run.
    if (this.destroyed || !(focusLost() || document.activeElement === this.more)) return;
    if (this.more.hidden) focusEl(added[0]?.querySelector('a') ?? this.runsHeading);
    else focusEl(this.more);
  }

  showPaging(page) {
    this.nextCursor = page.next_cursor;
    this.more.hidden = !page.next_cursor;
    this.runsEmpty.hidden = this.runsBody.children.length > 0;
    this.runsEmpty.textContent = this.filter ? `No ${this.filter.replaceAll('_', ' ')} runs.` : 'No runs yet.';
  }

  row(run) {
    return h(
      'tr',
      { dataset: { runId: run.id } },
      h(
        'td',
        { 'data-label': 'Run' },
        // Named by id tail and input: ids of runs started together share their first digits.
        h('a', { href: `#/runs/${run.id}`, 'aria-label': runLinkName(run), dataset: { runId: run.id } }, h('code', { text: runTag(run.id) })),
      ),
      h('td', { 'data-label': 'Status' }, statusBadge(run.status)),
      h('td', { 'data-label': 'Agent', text: run.agent }),
      h('td.input-cell', { 'data-label': 'Input', title: run.input }, h('span.input-text', { text: run.input })),
      h('td', { 'data-label': 'Started by', text: run.created_by }),
      h('td', { 'data-label': 'Created' }, timeEl(run.created_at)),
    );
  }
}

/** The links to runs in `list`, in order. */
function links(list) {
  return [...list.querySelectorAll('a[data-run-id]')];
}

/** The link to run `id` in `list`, if it is there. */
function linkOf(list, id) {
  return links(list).find((a) => a.dataset.runId === id) ?? null;
}

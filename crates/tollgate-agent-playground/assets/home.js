// The home view: start a run, the inbox of runs waiting for approval, and every run with a status
// filter. The inbox and the first page of runs refresh every few seconds while the page is visible.

import { api } from './api.js';

/** Why a list is empty, in words: a missing token is not a failure of the server. */
function reasonOf(error) {
  return error.status === 401 ? 'enter an API token (top right) to see it.' : error.message;
}
import { h, replace } from './dom.js';
import { openCalls, shortId } from './format.js';
import { notify, STATUSES, statusBadge, timeEl } from './ui.js';

const POLL_MS = 2000;
const PAGE = 25;
const INBOX_LIMIT = 100;

/** Renders the home view into `root`; returns its `destroy`. */
export function homeView(root) {
  const view = new HomeView(root);
  return { destroy: () => view.destroy() };
}

/** The calls of a waiting run that still need a person. */
function undecided(run) {
  return openCalls(run.pending).length;
}

class HomeView {
  constructor(root) {
    this.root = root;
    this.filter = '';
    this.nextCursor = null;
    this.extraPages = false;
    this.inboxSignature = null;
    this.runsSignature = null;
    this.render();
    this.loadAgents();
    this.refresh();
    this.timer = setInterval(() => {
      if (!document.hidden) this.refresh();
    }, POLL_MS);
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
    const form = h(
      'form.stack',
      { 'aria-labelledby': 'start-heading', onSubmit: (e) => this.start(e) },
      h('div.field', null, h('label', { for: 'agent', text: 'Agent' }), this.agentSelect, this.agentHint),
      h('div.field', null, h('label', { for: 'run-input', text: 'Input' }), this.input),
      h('div.row', null, this.startButton),
    );
    const start = h('section.card', { 'aria-labelledby': 'start-heading' }, h('h2', { id: 'start-heading', text: 'Start a run' }), form);

    this.inboxCount = h('span.count', { id: 'inbox-count', text: '…' });
    this.inboxList = h('ul.inbox-list', { id: 'inbox-list', 'aria-labelledby': 'inbox-heading' });
    const inbox = h(
      'section.card.inbox',
      { 'aria-labelledby': 'inbox-heading' },
      h('h2', { id: 'inbox-heading' }, 'Inbox ', this.inboxCount),
      h('p.muted.small', { text: 'Runs waiting for a decision, the nearest deadline first.' }),
      this.inboxList,
    );

    const filter = h(
      'select',
      { id: 'status-filter', onChange: (e) => this.setFilter(e.target.value) },
      h('option', { value: '', text: 'All statuses' }),
      STATUSES.map((s) => h('option', { value: s, text: s.replaceAll('_', ' ') })),
    );
    this.runsBody = h('tbody', { id: 'runs-body' });
    this.more = h('button', { type: 'button', text: 'More', hidden: true, onClick: () => this.loadMore() });
    this.runsEmpty = h('p.muted.empty', { hidden: true, text: 'No runs yet.' });
    const runs = h(
      'section.card.runs',
      { 'aria-labelledby': 'runs-heading' },
      h(
        'div.card-head',
        null,
        h('h2', { id: 'runs-heading', text: 'All runs' }),
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
      this.agentHint.textContent = `Agents could not be listed: ${reasonOf(e)}`;
    }
  }

  describeAgent() {
    const agent = (this.agents ?? []).find((a) => a.name === this.agentSelect.value);
    this.agentHint.textContent = agent ? `Model ${agent.model ?? '—'} · tools: ${agent.tools.join(', ') || 'none'}` : '';
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
    try {
      const body = { input };
      if (this.agentSelect.value) body.agent = this.agentSelect.value;
      const run = await api('POST', 'v1/runs', body);
      this.input.value = '';
      notify(`Run ${shortId(run.id)} of ${run.agent} started.`, {
        kind: 'success',
        action: h('a', { href: `#/runs/${run.id}`, text: 'Open it' }),
      });
      this.refresh();
    } catch (e) {
      notify(e.message, { kind: 'error', title: 'The run was not started.' });
    } finally {
      this.startButton.disabled = false;
      this.startButton.textContent = 'Start run';
    }
  }

  refresh() {
    this.loadInbox();
    if (!this.extraPages) this.loadRuns();
  }

  async loadInbox() {
    let page;
    try {
      page = await api('GET', `v1/runs?status=waiting_for_approval&limit=${INBOX_LIMIT}`);
    } catch (e) {
      if (this.inboxSignature !== 'error') {
        this.inboxSignature = 'error';
        this.inboxCount.textContent = '?';
        replace(this.inboxList, h('li.muted', { text: `The inbox could not be loaded: ${reasonOf(e)}` }));
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
    this.inboxCount.setAttribute('aria-label', `${count} waiting`);
    if (runs.length === 0) {
      replace(this.inboxList, h('li.empty.muted', { text: 'Nothing is waiting. Runs that reach the gate appear here.' }));
      return;
    }
    replace(
      this.inboxList,
      runs.map((run) => {
        const n = undecided(run);
        const deadline = run.pending?.expires_at;
        return h(
          'li',
          null,
          h(
            'a.inbox-item',
            { href: `#/runs/${run.id}`, dataset: { runId: run.id } },
            h('span.inbox-top', null, h('span.agent', { text: run.agent }), h('code.id', { text: shortId(run.id) })),
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
      if (this.runsSignature !== 'error') {
        this.runsSignature = 'error';
        replace(this.runsBody, h('tr', null, h('td', { colspan: 6, text: `Runs could not be loaded: ${reasonOf(e)}` })));
      }
      return;
    }
    if (this.destroyed || filter !== this.filter || this.extraPages) return;
    const signature = JSON.stringify(page);
    if (signature === this.runsSignature) return;
    this.runsSignature = signature;
    replace(this.runsBody, page.runs.map((run) => this.row(run)));
    this.showPaging(page);
  }

  async loadMore() {
    if (!this.nextCursor) return;
    this.more.disabled = true;
    try {
      const page = await api('GET', this.runsPath(this.nextCursor));
      this.extraPages = true;
      this.runsBody.append(...page.runs.map((run) => this.row(run)));
      this.showPaging(page);
    } catch (e) {
      notify(e.message, { kind: 'error', title: 'More runs could not be loaded.' });
    } finally {
      this.more.disabled = false;
    }
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
      h('td', null, h('a', { href: `#/runs/${run.id}`, 'aria-label': `Run ${shortId(run.id)}` }, h('code', { text: shortId(run.id) }))),
      h('td', null, statusBadge(run.status)),
      h('td', { text: run.agent }),
      h('td.input-cell', { text: run.input, title: run.input }),
      h('td', { text: run.created_by }),
      h('td', null, timeEl(run.created_at)),
    );
  }
}

// The Grants page (`#/grants`): the grants in force, or every grant with the past ones (revoked or
// expired), newest first, a page at a time; and one grant's own page (`#/grants/ID`), which the calls
// and decisions of a run page that a grant allowed or made link to. Each grant shows its agent, tool,
// pattern, scope, expiry, uses, creator and reason; an active one has "Revoke…", which asks to confirm
// and then revokes it (`DELETE /v1/grants/{id}`).
//
// Focus: opening either page focuses its heading. "Revoke…" opens its confirmation with the focus on
// "Revoke grant"; Escape or Cancel closes it, focus back on "Revoke…". A revoked grant is drawn again as
// revoked, the focus on its heading. A refused revoke keeps the focus on its button; a 409 (revoked or
// expired meanwhile) reads the grant again and draws it as it is, the focus on its heading. "More" focuses
// the first newly listed grant's heading.

import { api, ApiError } from './api.js';
import { h, replace, uid } from './dom.js';
import { plural, runTag } from './format.js';
import { grantState, grantSummary, grantTag, matchLines } from './grant.js';
import { announce, focusEl, focusLost, notify, timeEl } from './ui.js';

const PAGE = 25;

/** Why a list is empty, in words: a missing token is not a failure of the server. */
function reasonOf(error) {
  return error.status === 401 ? 'enter an API token (top right) to see them.' : error.message;
}

/**
 * Renders the Grants page (or, with `id`, that grant's own page) into `root`; returns its `destroy`.
 * @param {{focus?: boolean, id?: string|null}} [options] `focus`: this is a page change, so focus the
 *   page's heading
 */
export function grantsView(root, { focus = false, id = null } = {}) {
  const view = id ? new OneGrantPage(root, id, focus) : new GrantListPage(root, focus);
  return { destroy: () => view.destroy() };
}

/**
 * One grant, drawn as a card: what it allows, where it stands, and (while active) "Revoke…". Drawn again
 * in place after a revoke.
 */
class GrantEntry {
  /**
   * @param {object} grant as the API answers it
   * @param {{level: 'h2'|'h3', linked: boolean, card?: boolean}} options the heading's level; `linked`:
   *   the id links to the grant's own page; `card`: drawn as a card of its own
   */
  constructor(grant, { level, linked, card = false }) {
    this.grant = grant;
    this.level = level;
    this.linked = linked;
    this.card = card;
    this.el = h('article.grant', { dataset: { grantId: grant.id } });
    this.render();
  }

  render() {
    const g = this.grant;
    const state = grantState(g, Date.now());
    const headingId = uid('grant');
    this.heading = h(
      `${this.level}.grant-title`,
      { id: headingId, tabindex: '-1' },
      h('code', { text: g.tool }),
      ' of ',
      h('span.agent', { text: g.agent }),
      ' ',
      h('span.call-id', { text: grantTag(g.id) }),
    );
    this.el.className = `grant grant-${state}${this.card ? ' card' : ''}`;
    this.el.dataset.state = state;
    this.el.setAttribute('aria-labelledby', headingId);
    const fact = (term, cls, ...value) => h('div', { class: cls === 'grant-id' ? 'wide' : null }, h('dt', { text: term }), h(`dd.${cls}`, null, ...value));
    const lines = matchLines(g.match);
    const facts = [
      fact('Agent', 'grant-agent', h('span.agent', { text: g.agent })),
      fact('Tool', 'grant-tool', h('code', { text: g.tool })),
      fact('Match', 'grant-match', h('ul.match-lines', null, lines.map((line) => h('li', null, Object.keys(g.match ?? {}).length ? h('code', { text: line }) : line)))),
      fact(
        'Scope',
        'grant-scope',
        g.scope === 'run' && g.run_id ? ['only run ', h('a', { href: `#/runs/${encodeURIComponent(g.run_id)}` }, h('code', { text: runTag(g.run_id) }))] : `every run of ${g.agent}`,
      ),
      fact(state === 'expired' ? 'Expired' : 'Expires', 'grant-expires', timeEl(g.expires_at)),
      fact('Uses', 'grant-uses', String(g.uses ?? 0)),
      fact('Created by', 'grant-creator', h('span.actor', { text: g.created_by }), ', ', timeEl(g.created_at)),
      fact('Reason', 'grant-reason', g.reason ? h('q', { text: g.reason }) : h('span.muted', { text: 'none given' })),
    ];
    if (g.revoked_at) facts.push(fact('Revoked', 'grant-revoked', 'by ', h('span.actor', { text: g.revoked_by ?? '?' }), ', ', timeEl(g.revoked_at)));
    facts.push(
      fact(
        'Id',
        'grant-id',
        this.linked ? h('a', { href: `#/grants/${encodeURIComponent(g.id)}` }, h('code', { text: g.id })) : h('code.select', { text: g.id }),
      ),
    );
    replace(
      this.el,
      h('header.grant-head', null, this.heading, h('span.badges', null, h(`span.badge.grant-state.grant-state-${state}`, { text: state }))),
      h('dl.facts', null, facts),
      state === 'active' ? this.revokeControls() : null,
    );
  }

  /** "Revoke…" and the confirmation it opens (Escape or Cancel closes it, focus back on "Revoke…"). */
  revokeControls() {
    const area = h('div.form-area', { id: uid('revoke') });
    const toggle = h('button.danger.subtle', { type: 'button', 'aria-expanded': 'false', 'aria-controls': area.id, text: 'Revoke…' });
    const close = () => {
      toggle.setAttribute('aria-expanded', 'false');
      area.replaceChildren();
      toggle.focus();
    };
    toggle.addEventListener('click', () => {
      if (toggle.getAttribute('aria-expanded') === 'true') {
        close();
        return;
      }
      toggle.setAttribute('aria-expanded', 'true');
      const submit = h('button.danger', { type: 'submit', text: 'Revoke grant' });
      const questionId = uid('revoke-question');
      area.append(
        h(
          'form.stack.decide-form',
          {
            'aria-labelledby': questionId,
            onSubmit: (e) => {
              e.preventDefault();
              this.revoke(submit);
            },
          },
          h('p', { id: questionId, text: `Revoke grant ${grantTag(this.grant.id)}? ${grantSummary(this.grant)} will ask a person again.` }),
          h('div.row', null, submit, h('button', { type: 'button', text: 'Cancel', onClick: close })),
        ),
      );
      submit.focus();
    });
    area.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape' || area.childElementCount === 0) return;
      e.preventDefault();
      e.stopPropagation();
      close();
    });
    return h('div.grant-actions', null, toggle, area);
  }

  /** Revokes the grant; a refusal is shown like the rest of the app's (a 409 reads the grant again). */
  async revoke(button) {
    const id = this.grant.id;
    button.disabled = true;
    button.textContent = 'Revoking…';
    try {
      this.grant = await api('DELETE', `v1/grants/${encodeURIComponent(id)}`);
      this.render();
      focusEl(this.heading);
      announce(`Revoked grant ${grantTag(id)}: ${grantSummary(this.grant)} ask a person again.`);
      return;
    } catch (e) {
      if (button.isConnected) {
        button.disabled = false;
        button.textContent = 'Revoke grant';
        if (focusLost()) focusEl(button);
      }
      if (e instanceof ApiError && e.status === 409) {
        notify(`${e.message}. It allows no more calls; it is shown as it is now.`, { kind: 'error', title: 'The grant was not revoked.' });
        await this.reread();
      } else if (e instanceof ApiError && e.status === 403) {
        notify(`${e.message}. Revoking a grant needs a token with the approver role (API token, top right).`, {
          kind: 'error',
          title: 'The grant was not revoked.',
        });
      } else {
        notify(e.message, { kind: 'error', title: 'The grant was not revoked.' });
      }
    }
  }

  /** Reads the grant again and draws it as it is (after a 409); the focus goes to its heading. */
  async reread() {
    try {
      this.grant = await api('GET', `v1/grants/${encodeURIComponent(this.grant.id)}`);
    } catch {
      return;
    }
    if (!this.el.isConnected) return;
    this.render();
    focusEl(this.heading);
  }
}

/** `#/grants`: the grants in force, or every grant with the past ones; paged. */
class GrantListPage {
  constructor(root, focus) {
    this.root = root;
    this.active = true;
    this.nextCursor = null;
    this.generation = 0;
    document.title = 'Tollgate — grants';
    this.render();
    if (focus) this.title.focus();
    this.load().then((count) => {
      if (this.destroyed || count === null) return;
      announce(`Grants. ${this.active ? `${plural(count, 'active grant')}` : plural(count, 'grant')}${this.nextCursor ? ' and more' : ''}.`);
    });
  }

  destroy() {
    this.destroyed = true;
  }

  render() {
    this.title = h('h1', { tabindex: '-1', 'data-page-heading': true, text: 'Grants' });
    this.heading = h('h2', { id: 'grants-heading', tabindex: '-1', text: 'Active grants' });
    const filter = h(
      'select',
      { id: 'grant-filter', onChange: (e) => this.setFilter(e.target.value === 'active') },
      h('option', { value: 'active', text: 'Active only' }),
      h('option', { value: 'all', text: 'All, past included' }),
    );
    this.list = h('ul.grant-list', { id: 'grant-list', 'aria-labelledby': 'grants-heading' }, h('li.muted', { text: 'Loading grants…' }));
    this.empty = h('p.muted.empty', { hidden: true });
    this.more = h('button', { type: 'button', text: 'More', hidden: true, onClick: () => this.loadMore() });
    replace(
      this.root,
      h(
        'div.grants-page',
        null,
        h('header.grants-intro', null, this.title, h('p.muted', {
          text: 'A grant is a standing approval: calls of one tool of one agent whose arguments match its pattern pass the gate without a person until it expires or is revoked. Make one with "Approve and remember…" on a held call.',
        })),
        h(
          'section.card.grants',
          { 'aria-labelledby': 'grants-heading' },
          h(
            'div.card-head',
            null,
            this.heading,
            h(
              'div.row',
              null,
              h('label', { for: 'grant-filter', text: 'Show' }),
              filter,
              h('button', { type: 'button', text: 'Refresh', onClick: () => this.load() }),
            ),
          ),
          this.list,
          this.empty,
          h('div.row.center', null, this.more),
        ),
      ),
    );
  }

  path(cursor) {
    const q = new URLSearchParams({ limit: String(PAGE), active: String(this.active) });
    if (cursor) q.set('cursor', cursor);
    return `v1/grants?${q}`;
  }

  setFilter(active) {
    this.active = active;
    this.heading.textContent = active ? 'Active grants' : 'All grants';
    this.load();
  }

  /** Reads the first page again; resolves to how many grants it shows (null when it failed or was outrun). */
  async load() {
    const generation = ++this.generation;
    let page;
    try {
      page = await api('GET', this.path(null));
    } catch (e) {
      if (this.destroyed || generation !== this.generation) return null;
      replace(this.list, h('li.muted', { text: `Grants could not be loaded: ${reasonOf(e)}` }));
      this.more.hidden = true;
      return null;
    }
    if (this.destroyed || generation !== this.generation) return null;
    const hadFocus = this.list.contains(document.activeElement);
    replace(this.list, page.grants.map((g) => this.item(g)));
    if (hadFocus && focusLost()) focusEl(this.heading);
    this.showPaging(page);
    return page.grants.length;
  }

  async loadMore() {
    if (!this.nextCursor) return;
    const generation = this.generation;
    this.more.disabled = true;
    let added = [];
    try {
      const page = await api('GET', this.path(this.nextCursor));
      if (this.destroyed || generation !== this.generation) return;
      added = page.grants.map((g) => this.item(g));
      this.list.append(...added);
      this.showPaging(page);
      announce(`${plural(added.length, 'more grant')} shown.`);
    } catch (e) {
      notify(e.message, { kind: 'error', title: 'More grants could not be loaded.' });
    } finally {
      this.more.disabled = false;
    }
    // The disabled button lost the focus: back to it while there is more, else to the first new grant.
    if (this.destroyed || !(focusLost() || document.activeElement === this.more)) return;
    if (this.more.hidden) focusEl(added[0]?.querySelector('.grant-title') ?? this.heading);
    else focusEl(this.more);
  }

  item(grant) {
    return h('li', null, new GrantEntry(grant, { level: 'h3', linked: true }).el);
  }

  showPaging(page) {
    this.nextCursor = page.next_cursor;
    this.more.hidden = !page.next_cursor;
    this.empty.hidden = this.list.children.length > 0;
    this.empty.textContent = this.active
      ? 'No grant is in force. "Approve and remember…" on a held call makes one.'
      : 'No grant has been made yet.';
  }
}

/** `#/grants/ID`: one grant, where a run page's "allowed by grant …" links to. */
class OneGrantPage {
  constructor(root, id, focus) {
    this.id = id;
    document.title = `Tollgate — grant ${grantTag(id)}`;
    this.title = h('h1', { tabindex: '-1', 'data-page-heading': true }, 'Grant ', h('code', { text: grantTag(id) }));
    this.body = h('p.muted.loading', { text: 'Loading the grant…' });
    replace(
      root,
      h(
        'div.grants-page',
        null,
        h('nav.crumbs', { 'aria-label': 'Breadcrumb' }, h('a', { href: '#/grants', text: '← All grants' })),
        h('header.grants-intro', null, this.title),
        this.body,
      ),
    );
    if (focus) this.title.focus();
    this.load();
  }

  destroy() {
    this.destroyed = true;
  }

  async load() {
    let grant;
    try {
      grant = await api('GET', `v1/grants/${encodeURIComponent(this.id)}`);
    } catch (e) {
      if (this.destroyed) return;
      const text = e instanceof ApiError && e.status === 404 ? `There is no grant ${this.id}.` : `The grant could not be loaded: ${reasonOf(e)}`;
      this.body.replaceWith(h('p.notice.notice-error', { role: 'alert', text }));
      return;
    }
    if (this.destroyed) return;
    const entry = new GrantEntry(grant, { level: 'h2', linked: false, card: true });
    this.body.replaceWith(entry.el);
    announce(`Grant ${grantTag(grant.id)}, ${grantState(grant, Date.now())}: ${grantSummary(grant)}.`);
  }
}

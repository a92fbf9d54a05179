// Building DOM nodes without HTML strings: every text from the API goes in as text, never as markup.
//
// Every text put on the page here is shown as it reads in logical order: each invisible or
// direction-changing character (invisible.js) becomes a visible mark, a `<span class="invisible-char">`
// holding `⟨U+2067⟩` and titled with the character's name, and a text with right-to-left letters sits in
// its own left-to-right isolate (`<bdi dir="ltr">`), so it cannot reorder the page's text around it. The
// attributes people read (title, aria-label, placeholder, alt) get the marks as plain text.

import { hasRightToLeft, markedText, splitInvisible } from './invisible.js';

/** The attributes whose values people read (or hear): marked as plain text. */
const READ_ATTRIBUTES = new Set(['title', 'aria-label', 'aria-description', 'placeholder', 'alt']);

/** Elements that show their text only as text (a child element would not be drawn): marked as plain text. */
const TEXT_ONLY = new Set(['OPTION', 'TEXTAREA', 'TITLE']);

/**
 * Creates an element.
 * @param {string} tag e.g. `button`, or `button.primary.small` for classes
 * @param {object|null} [props] attributes; `class`, `text`, `dataset`, `on*` handlers, and the
 *   properties `value`, `checked`, `disabled`, `hidden`, `selected` are set as such; `null`/`false` skip
 * @param {...(Node|string|number|null|false|Array)} children
 */
export function h(tag, props, ...children) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name);
  if (classes.length) el.className = classes.join(' ');
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = [el.className, value].filter(Boolean).join(' ');
    else if (key === 'text') append(el, [String(value)]);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (['value', 'checked', 'disabled', 'hidden', 'selected'].includes(key)) el[key] = value;
    else if (READ_ATTRIBUTES.has(key)) el.setAttribute(key, markedText(value));
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.append(child);
    else if (TEXT_ONLY.has(el.tagName)) el.append(markedText(child));
    else el.append(...visibleText(String(child)));
  }
}

/**
 * The nodes that show `text`: text nodes, with a marked span in place of each invisible or
 * direction-changing character; inside a left-to-right `<bdi>` when it has right-to-left letters.
 * @param {string} text
 * @returns {Node[]}
 */
export function visibleText(text) {
  const nodes = splitInvisible(text).map((part) => {
    if (typeof part === 'string') return document.createTextNode(part);
    const mark = document.createElement('span');
    mark.className = 'invisible-char';
    mark.dir = 'ltr';
    mark.title = part.title;
    mark.dataset.code = part.code.toString(16);
    mark.textContent = part.label;
    return mark;
  });
  if (!hasRightToLeft(text)) return nodes;
  const isolate = document.createElement('bdi');
  isolate.dir = 'ltr';
  isolate.append(...nodes);
  return [isolate];
}

/** Removes every child of `el`, then appends `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Appends `children` to `el` (texts marked as `h` marks them). */
export function appendTo(el, ...children) {
  append(el, children);
  return el;
}

let ids = 0;
/** A unique element id with a readable prefix (for label/for and aria-describedby pairs). */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

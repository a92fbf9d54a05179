// Building DOM nodes without HTML strings: every text from the API goes in as text, never as markup.

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
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2).toLowerCase(), value);
    else if (['value', 'checked', 'disabled', 'hidden', 'selected'].includes(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Removes every child of `el`, then appends `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

let ids = 0;
/** A unique element id with a readable prefix (for label/for and aria-describedby pairs). */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

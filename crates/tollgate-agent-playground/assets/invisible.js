// Invisible and direction-changing characters in text a model (or a tool, a provider, a person) chose.
//
// A bidi isolate or override changes the order in which a browser draws the text around it, and a
// zero-width or control character is not drawn at all, so what a person reads differs from what runs:
// `sh -c 'echo done \u2067\u2066&& rm -rf notes\u2069 #\u2069'` is drawn `echo done # && rm -rf notes`,
// as if the `rm` were commented out, and a path with U+202E is drawn reversed. The page never draws such a character: `dom.js` puts each one on the page as a
// visible mark (`⟨U+2067⟩`, named in its title) and the text around it in logical order, and the held
// calls say how many their arguments and previews contain.
//
// Marked: C0 and C1 controls (but newline and tab), every format character (Unicode category Cf: bidi
// embeddings, overrides, isolates and marks, zero-width characters, the soft hyphen, tag characters…),
// the line and paragraph separators, lone surrogates, and the Hangul fillers (letters drawn as nothing).
// No DOM here: these also run under node.

/** One character to mark (the `u` flag: astral characters such as tag characters are one match). */
const INVISIBLE = /(?![\n\t])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\u115F\u1160\u3164\uFFA0]/u;
const INVISIBLE_ALL = new RegExp(INVISIBLE.source, 'gu');

/** Letters of right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, N'Ko, …; their presentation forms). */
const RIGHT_TO_LEFT = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFE\u{10800}-\u{10FFF}\u{1E800}-\u{1EFFF}]/u;

const NAMES = {
  0x00: 'NULL',
  0x07: 'BELL',
  0x08: 'BACKSPACE',
  0x0b: 'LINE TABULATION',
  0x0c: 'FORM FEED',
  0x0d: 'CARRIAGE RETURN',
  0x1b: 'ESCAPE',
  0x7f: 'DELETE',
  0x85: 'NEXT LINE',
  0x9b: 'CONTROL SEQUENCE INTRODUCER',
  0xad: 'SOFT HYPHEN',
  0x061c: 'ARABIC LETTER MARK',
  0x115f: 'HANGUL CHOSEONG FILLER',
  0x1160: 'HANGUL JUNGSEONG FILLER',
  0x180e: 'MONGOLIAN VOWEL SEPARATOR',
  0x200b: 'ZERO WIDTH SPACE',
  0x200c: 'ZERO WIDTH NON-JOINER',
  0x200d: 'ZERO WIDTH JOINER',
  0x200e: 'LEFT-TO-RIGHT MARK',
  0x200f: 'RIGHT-TO-LEFT MARK',
  0x2028: 'LINE SEPARATOR',
  0x2029: 'PARAGRAPH SEPARATOR',
  0x202a: 'LEFT-TO-RIGHT EMBEDDING',
  0x202b: 'RIGHT-TO-LEFT EMBEDDING',
  0x202c: 'POP DIRECTIONAL FORMATTING',
  0x202d: 'LEFT-TO-RIGHT OVERRIDE',
  0x202e: 'RIGHT-TO-LEFT OVERRIDE',
  0x2060: 'WORD JOINER',
  0x2061: 'FUNCTION APPLICATION',
  0x2062: 'INVISIBLE TIMES',
  0x2063: 'INVISIBLE SEPARATOR',
  0x2064: 'INVISIBLE PLUS',
  0x2066: 'LEFT-TO-RIGHT ISOLATE',
  0x2067: 'RIGHT-TO-LEFT ISOLATE',
  0x2068: 'FIRST STRONG ISOLATE',
  0x2069: 'POP DIRECTIONAL ISOLATE',
  0x3164: 'HANGUL FILLER',
  0xfeff: 'ZERO WIDTH NO-BREAK SPACE',
  0xffa0: 'HALFWIDTH HANGUL FILLER',
  0xe0001: 'LANGUAGE TAG',
  0xe007f: 'CANCEL TAG',
};

/** `U+2067`: a code point as people look it up. */
export function codeLabel(code) {
  return `U+${code.toString(16).toUpperCase().padStart(4, '0')}`;
}

/** What a marked character is, in words: `RIGHT-TO-LEFT ISOLATE`, `TAG LATIN LETTER "a"`. */
export function charName(code) {
  if (NAMES[code]) return NAMES[code];
  // Tag characters spell ASCII nobody sees: say which, so hidden text can be read off the marks.
  if (code >= 0xe0020 && code <= 0xe007e) return `TAG "${String.fromCharCode(code - 0xe0000)}"`;
  if (code <= 0x1f) return 'CONTROL CHARACTER';
  if (code >= 0x80 && code <= 0x9f) return 'C1 CONTROL CHARACTER';
  if (code >= 0xd800 && code <= 0xdfff) return 'LONE SURROGATE';
  return 'FORMAT CHARACTER';
}

/** True when `text` holds a character that is marked. */
export function hasInvisible(text) {
  return typeof text === 'string' && INVISIBLE.test(text);
}

/** True when `text` holds a letter of a right-to-left script. */
export function hasRightToLeft(text) {
  return typeof text === 'string' && RIGHT_TO_LEFT.test(text);
}

/**
 * `text` cut into the runs drawn as they are (strings) and the characters drawn as marks
 * (`{code, label: '⟨U+2067⟩', title: 'U+2067 RIGHT-TO-LEFT ISOLATE'}`), in order.
 * @param {string} text
 * @returns {(string|{code: number, label: string, title: string})[]}
 */
export function splitInvisible(text) {
  const parts = [];
  let from = 0;
  for (const match of text.matchAll(INVISIBLE_ALL)) {
    if (match.index > from) parts.push(text.slice(from, match.index));
    const code = match[0].codePointAt(0);
    parts.push({ code, label: `⟨${codeLabel(code)}⟩`, title: `${codeLabel(code)} ${charName(code)}` });
    from = match.index + match[0].length;
  }
  if (from < text.length || parts.length === 0) parts.push(text.slice(from));
  return parts;
}

/** `text` with each marked character written as `⟨U+2067⟩`: for attributes and the live region. */
export function markedText(text) {
  return String(text).replace(INVISIBLE_ALL, (c) => `⟨${codeLabel(c.codePointAt(0))}⟩`);
}

/**
 * The marked characters of a string or a JSON value (every string in it, object keys included), in order.
 * @returns {number[]} their code points
 */
export function invisibleIn(value) {
  const found = [];
  const walk = (v) => {
    if (typeof v === 'string') {
      for (const match of v.matchAll(INVISIBLE_ALL)) found.push(match[0].codePointAt(0));
    } else if (Array.isArray(v)) {
      v.forEach(walk);
    } else if (v && typeof v === 'object') {
      for (const [key, item] of Object.entries(v)) {
        walk(key);
        walk(item);
      }
    }
  };
  walk(value);
  return found;
}

/**
 * The warning of a held call whose text holds marked characters, or null when it holds none: its
 * `headline`, `Contains 3 invisible or direction-changing characters (2 in the arguments, 1 in the
 * preview): U+2067 RIGHT-TO-LEFT ISOLATE, U+2069 POP DIRECTIONAL ISOLATE.`, and what that means (`detail`).
 * @param {{tool?: string, call_id?: string, arguments?: unknown, preview?: string|null}} call
 * @returns {{headline: string, detail: string}|null}
 */
export function invisibleWarning(call) {
  const parts = [
    ['the arguments', invisibleIn(call.arguments)],
    ['the preview', invisibleIn(call.preview ?? '')],
    ['the tool name or call id', invisibleIn([call.tool ?? '', call.call_id ?? ''])],
  ].filter(([, codes]) => codes.length > 0);
  if (parts.length === 0) return null;
  const total = parts.reduce((n, [, codes]) => n + codes.length, 0);
  const where = parts.map(([name, codes]) => `${codes.length} in ${name}`).join(', ');
  const distinct = [...new Set(parts.flatMap(([, codes]) => codes))].sort((a, b) => a - b);
  const names = distinct.map((code) => `${codeLabel(code)} ${charName(code)}`).join(', ');
  const noun = total === 1 ? 'character' : 'characters';
  return {
    headline: `Contains ${total} invisible or direction-changing ${noun} (${where}): ${names}.`,
    detail: 'Each is shown as a ⟨U+…⟩ mark where it stands; the call runs with the characters themselves, which can make text look other than it is.',
  };
}

/**
 * JSON text with each marked character written as a `\uXXXX` escape: it parses to the same value, and a
 * text field shows the escape instead of drawing (or hiding) the character. Outside string literals JSON
 * holds none of them, so every one replaced is inside a string.
 */
export function escapeInvisibleJson(json) {
  // An astral character (a tag character) is two UTF-16 units, so two escapes, as JSON spells it.
  const unit = (c, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return json.replace(INVISIBLE_ALL, (c) => (c.length === 1 ? unit(c, 0) : unit(c, 0) + unit(c, 1)));
}

// Checks edited tool arguments before they are sent: JSON syntax first, then the tool's JSON schema.
//
// Only the subset of JSON Schema that Tollgate's tools use is implemented: type (one or a list),
// enum, const, required, properties, additionalProperties (false or a schema), items, and the bounds
// minimum / maximum / minLength / maxLength / minItems / maxItems. Other keywords are ignored here;
// the server validates again with a full validator and answers 422 for anything this check let through.
// No DOM: this module also runs under node for its unit tests.

/**
 * Parses JSON text.
 * @param {string} text
 * @returns {{ok: true, value: unknown} | {ok: false, error: {message: string, line: number|null, column: number|null}}}
 */
export function parseJson(text) {
  if (text.trim() === '') {
    return { ok: false, error: { message: 'Nothing to parse: the arguments must be a JSON object.', line: null, column: null } };
  }
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    const raw = e instanceof Error ? e.message : String(e);
    let line = null;
    let column = null;
    const lc = /line (\d+) column (\d+)/.exec(raw);
    const pos = /position (\d+)/.exec(raw);
    if (lc) {
      line = Number(lc[1]);
      column = Number(lc[2]);
    } else if (pos) {
      ({ line, column } = lineColumn(text, Number(pos[1])));
    }
    const where = line !== null ? ` (line ${line}, column ${column})` : '';
    const message = raw.replace(/\s*\(line \d+ column \d+\)/, '').replace(/ in JSON at position \d+/, '');
    return { ok: false, error: { message: `Invalid JSON: ${message}${where}`, line, column } };
  }
}

function lineColumn(text, offset) {
  const before = text.slice(0, offset).split('\n');
  return { line: before.length, column: before[before.length - 1].length + 1 };
}

/** The JSON type name of a value, as JSON Schema names it ("integer" only when asked for). */
function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value; // "string", "number", "boolean", "object"
}

function hasType(value, type) {
  switch (type) {
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    default:
      return typeOf(value) === type;
  }
}

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && deepEqual(a[k], b[k]));
}

/** A JSON Pointer segment (RFC 6901). */
function segment(key) {
  return String(key).replaceAll('~', '~0').replaceAll('/', '~1');
}

/**
 * Validates a value against a JSON schema (the subset above).
 * @param {object|boolean|undefined} schema
 * @param {unknown} value
 * @returns {{path: string, message: string}[]} every problem found, each with the JSON Pointer of the value
 */
export function validate(schema, value) {
  const errors = [];
  check(schema, value, '', errors);
  return errors;
}

function check(schema, value, path, errors) {
  if (schema === undefined || schema === true) return;
  if (schema === false) {
    errors.push({ path, message: 'no value is allowed here' });
    return;
  }
  if (typeof schema !== 'object' || schema === null) return;

  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => hasType(value, t))) {
      errors.push({ path, message: `must be ${types.map(article).join(' or ')}, not ${article(typeOf(value))}` });
      return; // the other keywords would only repeat the same mistake
    }
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((v) => deepEqual(v, value))) {
    errors.push({ path, message: `must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}` });
  }
  if (Object.hasOwn(schema, 'const') && !deepEqual(schema.const, value)) {
    errors.push({ path, message: `must be ${JSON.stringify(schema.const)}` });
  }

  if (typeof value === 'string') {
    const length = [...value].length;
    if (typeof schema.minLength === 'number' && length < schema.minLength) {
      errors.push({ path, message: `must be at least ${schema.minLength} characters long` });
    }
    if (typeof schema.maxLength === 'number' && length > schema.maxLength) {
      errors.push({ path, message: `must be at most ${schema.maxLength} characters long` });
    }
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum) {
      errors.push({ path, message: `must be at least ${schema.minimum}` });
    }
    if (typeof schema.maximum === 'number' && value > schema.maximum) {
      errors.push({ path, message: `must be at most ${schema.maximum}` });
    }
  }

  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) {
      errors.push({ path, message: `must have at least ${schema.minItems} item(s)` });
    }
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) {
      errors.push({ path, message: `must have at most ${schema.maxItems} item(s)` });
    }
    if (schema.items !== undefined && !Array.isArray(schema.items)) {
      value.forEach((item, i) => check(schema.items, item, `${path}/${i}`, errors));
    }
  }

  if (typeOf(value) === 'object') {
    const properties = typeof schema.properties === 'object' && schema.properties !== null ? schema.properties : {};
    if (Array.isArray(schema.required)) {
      for (const name of schema.required) {
        if (!Object.hasOwn(value, name)) {
          errors.push({ path, message: `is missing the required property "${name}"` });
        }
      }
    }
    for (const [name, item] of Object.entries(value)) {
      const at = `${path}/${segment(name)}`;
      if (Object.hasOwn(properties, name)) {
        check(properties[name], item, at, errors);
      } else if (schema.additionalProperties === false) {
        const known = Object.keys(properties);
        const hint = known.length ? ` (known: ${known.join(', ')})` : '';
        errors.push({ path: at, message: `is not allowed: "${name}" is not a property of this tool${hint}` });
      } else if (typeof schema.additionalProperties === 'object') {
        check(schema.additionalProperties, item, at, errors);
      }
    }
  }
}

function article(type) {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/**
 * One line per problem, ready to show: `/path: must be a string, not a number`, or `arguments: …` for
 * the top level.
 * @param {{path: string, message: string}[]} errors
 */
export function describe(errors) {
  return errors.map((e) => `${e.path === '' ? 'arguments' : e.path}: ${e.message}`);
}

/**
 * Everything wrong with edited argument text, in the order a person fixes it: JSON syntax, then the
 * schema (an object is always required: tool arguments are a JSON object).
 * @param {string} text
 * @param {object|undefined} schema the tool's `parameters`, if known
 * @returns {{value: unknown, problems: string[]}}
 */
export function checkArguments(text, schema) {
  const parsed = parseJson(text);
  if (!parsed.ok) return { value: undefined, problems: [parsed.error.message] };
  if (typeOf(parsed.value) !== 'object') {
    return { value: parsed.value, problems: [`arguments: must be an object, not ${article(typeOf(parsed.value))}`] };
  }
  return { value: parsed.value, problems: describe(validate(schema, parsed.value)) };
}

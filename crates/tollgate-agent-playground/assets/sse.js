// A Server-Sent Events parser (the text/event-stream format of the HTML standard), for reading a
// stream with fetch() when an Authorization header must be sent: EventSource cannot send one.
// No DOM: this module also runs under node for its unit tests.

/**
 * Feeds text chunks in, calls `onEvent({id, event, data})` for each complete event. Chunks may split
 * lines, fields and even a CR LF pair anywhere.
 */
export class SseParser {
  /** @param {(event: {id: string|null, event: string, data: string}) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.data = [];
    this.event = '';
    this.id = null;
    this.lastId = null;
    this.pendingCr = false;
  }

  /** @param {string} chunk */
  push(chunk) {
    let text = chunk;
    if (this.pendingCr) {
      // A CR ended the previous chunk's line; a LF starting this one belongs to it.
      if (text.startsWith('\n')) text = text.slice(1);
      this.pendingCr = false;
    }
    this.buffer += text;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      if (match[0] === '\r' && match.index === this.buffer.length - 1) {
        // Maybe the first half of CR LF: take the line, and skip a LF that may follow.
        this.pendingCr = true;
      }
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.startsWith(':')) return; // a comment (keep-alive)
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.id = value;
        break;
      default:
        break; // "retry" and unknown fields: nothing to do for this client
    }
  }

  dispatch() {
    if (this.id !== null) this.lastId = this.id;
    if (this.data.length > 0) {
      this.onEvent({ id: this.lastId, event: this.event || 'message', data: this.data.join('\n') });
    }
    this.data = [];
    this.event = '';
    this.id = null;
  }
}

/**
 * A `model_delta` event's data (`deltas=true`: the model's live text, never stored) as
 * `{round, text}` or `{round, reset: true}`, or null when it is not one.
 * @param {string} data
 */
export function parseDelta(data) {
  let delta;
  try {
    delta = JSON.parse(data);
  } catch {
    return null;
  }
  if (!delta || typeof delta !== 'object' || !Number.isInteger(delta.round)) return null;
  if (delta.reset === true) return { round: delta.round, reset: true };
  return typeof delta.text === 'string' ? { round: delta.round, text: delta.text } : null;
}

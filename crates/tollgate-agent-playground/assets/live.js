// Follows a run's events live (`GET /v1/runs/{id}/events` as text/event-stream).
//
// Without a token, an EventSource does it (it reconnects by itself with Last-Event-ID). EventSource
// cannot send an Authorization header, so with a token the stream is read with fetch() and parsed by
// SseParser, reconnecting after the last seq seen. Either way the stream ends after the run's terminal
// event (the server closes it, and answers 204 to a reconnect). Callers get each event once per
// connection; they drop what they already have by seq (a reconnect may repeat nothing, but a caller
// that also loaded events by GET may overlap).
//
// The stream asks for the model's live text too (`deltas=true`): `model_delta` events without an id,
// `{round, text}` or `{round, reset: true}`, handed to `onDelta`. They are never stored; the round's
// `model_response` event holds the whole text.

import { apiUrl, authEvents, authHeaders, hasToken, ApiError } from './api.js';
import { parseDelta, SseParser } from './sse.js';

/** Every event kind of docs/api.md; EventSource only delivers named events that have a listener. */
export const KINDS = [
  'run_started',
  'model_request',
  'model_response',
  'approval_requested',
  'decision',
  'approval_escalated',
  'run_resumed',
  'run_taken_over',
  'tool_started',
  'tool_finished',
  'run_completed',
  'run_failed',
  'run_cancelled',
  'run_expired',
];

/** Kinds after which a run never changes again. */
export const TERMINAL = new Set(['run_completed', 'run_failed', 'run_cancelled', 'run_expired']);

/**
 * Follows the run's events after `after`.
 * @param {string} runId
 * @param {number} after the last seq already shown
 * @param {{onEvent: (event: object) => void, onState: (state: 'live'|'reconnecting'|'ended') => void,
 *          onDelta?: (delta: {round: number, text?: string, reset?: boolean}) => void}} handlers
 * @returns {() => void} stops following
 */
export function follow(runId, after, handlers) {
  return hasToken() ? followWithFetch(runId, after, handlers) : followWithEventSource(runId, after, handlers);
}

function eventsUrl(runId, after) {
  return apiUrl(`v1/runs/${encodeURIComponent(runId)}/events?after=${after}&deltas=true`);
}

function followWithEventSource(runId, after, { onEvent, onState, onDelta }) {
  const source = new EventSource(eventsUrl(runId, after));
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    source.close();
    onState('ended');
  };
  const receive = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    onEvent(event);
    if (TERMINAL.has(event.kind)) end();
  };
  for (const kind of KINDS) source.addEventListener(kind, receive);
  source.addEventListener('model_delta', (message) => {
    const delta = parseDelta(message.data);
    if (delta && !ended) onDelta?.(delta);
  });
  source.addEventListener('message', receive);
  source.addEventListener('open', () => onState('live'));
  source.addEventListener('error', () => {
    // CLOSED: the server answered 204 (the run had ended) or refused; otherwise it reconnects by itself.
    if (source.readyState === EventSource.CLOSED) end();
    else if (!ended) onState('reconnecting');
  });
  return () => {
    ended = true;
    source.close();
  };
}

function followWithFetch(runId, after, { onEvent, onState, onDelta }) {
  const controller = new AbortController();
  let last = after;
  let stopped = false;
  let failures = 0;

  const run = async () => {
    while (!stopped) {
      let finished = false;
      try {
        const response = await fetch(eventsUrl(runId, last), {
          headers: { Accept: 'text/event-stream', ...authHeaders() },
          signal: controller.signal,
          cache: 'no-store',
        });
        if (response.status === 204) {
          finished = true;
        } else if (!response.ok || !response.body) {
          if (response.status === 401) {
            const error = new ApiError(401, { title: 'Unauthorized', detail: 'This server needs an API token.' });
            authEvents.dispatchEvent(new CustomEvent('unauthorized', { detail: error }));
            finished = true;
          } else if (response.status === 404) {
            finished = true;
          }
        } else {
          onState('live');
          failures = 0;
          const parser = new SseParser((message) => {
            if (message.event === 'model_delta') {
              const delta = parseDelta(message.data);
              if (delta && !stopped) onDelta?.(delta);
              return;
            }
            let event;
            try {
              event = JSON.parse(message.data);
            } catch {
              return;
            }
            if (typeof event.seq === 'number') last = Math.max(last, event.seq);
            onEvent(event);
            if (TERMINAL.has(event.kind)) finished = true;
          });
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            parser.push(value);
            if (finished) break;
          }
          if (finished) await reader.cancel().catch(() => {});
        }
      } catch (e) {
        if (stopped || controller.signal.aborted) return;
      }
      if (finished) {
        stopped = true;
        onState('ended');
        return;
      }
      failures += 1;
      onState('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000 * failures, 10_000)));
    }
  };
  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}

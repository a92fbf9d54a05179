//! Streamed answers (`stream = true`): a Server-Sent Events body read as it arrives, each event handed
//! to the adapter's [`Assembler`], which sends the text to the loop's deltas and builds the same JSON
//! answer the provider would have sent without streaming. That answer then goes through the adapter's
//! one parser, so a streamed call and a plain one give the same response and the same stored events.
//!
//! Promises, on top of [`crate::http`]'s:
//! - a stream cut by the connection (after deltas or not), or that ends cleanly without its final event
//!   (OpenAI's `data: [DONE]`, Anthropic's `message_stop`: a proxy often ends a cut stream cleanly), is
//!   a connection failure ([`ended_early`]), retried under `max_retries` with the configured backoff;
//!   before the retry the deltas are told to [`ModelDelta::Reset`] if any went out;
//! - an event that is not JSON, tool arguments that are not JSON once the stream ended, or an answer
//!   larger than [`MAX_STREAM_BYTES`] is an invalid response (not retried), as a malformed plain answer is;
//! - a server that ignores `stream: true` and answers with plain JSON is read as a plain answer.

use serde_json::Value;
use tollgate_agent_core::{ModelDelta, ModelDeltas, ModelError};

/// The most bytes a streamed answer may take, all events together.
pub(crate) const MAX_STREAM_BYTES: usize = 32 * 1024 * 1024;

/// Whether a stream goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    More,
    /// The final event arrived.
    Done,
}

/// Builds a provider's plain answer from its stream's events.
pub(crate) trait Assembler: Default + Send {
    /// Adds to a request body what asks this provider for a stream.
    fn ask_for_stream(body: &mut serde_json::Map<String, Value>);
    /// One event: its `event:` name (if any) and its data.
    fn event(&mut self, name: Option<&str>, data: &str, deltas: &dyn ModelDeltas) -> Result<Flow, ModelError>;
    /// The answer the provider would have sent without streaming, once the final event arrived.
    fn finish(self) -> Result<Value, ModelError>;
}

/// One event of a Server-Sent Events body.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) name: Option<String>,
    pub(crate) data: String,
}

/// Splits a Server-Sent Events body into events as its bytes arrive (`\n`, `\r\n` or `\r` line ends;
/// `data:` lines joined by `\n`; comments and `id:` / `retry:` lines ignored).
#[derive(Debug, Default)]
pub(crate) struct SseReader {
    /// Bytes of the line not ended yet.
    line: Vec<u8>,
    /// The last byte was a `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
    event: SseEvent,
    has_data: bool,
    /// Bytes read so far.
    total: usize,
}

impl SseReader {
    /// Reads `bytes`; the events they complete, in order.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, ModelError> {
        self.total = self.total.saturating_add(bytes.len());
        if self.total > MAX_STREAM_BYTES {
            return Err(ModelError::InvalidResponse(format!(
                "the streamed answer is larger than {} MiB",
                MAX_STREAM_BYTES / (1024 * 1024)
            )));
        }
        let mut events = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_ended(&line)? {
                        events.push(event);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        Ok(events)
    }

    fn line_ended(&mut self, line: &[u8]) -> Result<Option<SseEvent>, ModelError> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            return Ok(std::mem::take(&mut self.has_data).then_some(event));
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| ModelError::InvalidResponse("the stream holds a line that is not UTF-8".into()))?;
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if self.has_data {
                    self.event.data.push('\n');
                }
                self.event.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event.name = Some(value.to_owned()),
            // Comments (`: ping`), `id:`, `retry:` and unknown fields mean nothing here.
            _ => {}
        }
        Ok(None)
    }
}

/// Deltas that remember whether any went out (a retry then sends a reset first).
pub(crate) struct Counted<'a> {
    pub(crate) deltas: &'a dyn ModelDeltas,
    pub(crate) sent: std::sync::atomic::AtomicBool,
}

impl<'a> Counted<'a> {
    pub(crate) fn new(deltas: &'a dyn ModelDeltas) -> Self {
        Self { deltas, sent: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Before another attempt: the text sent so far is void.
    pub(crate) fn reset(&self) {
        if self.sent.swap(false, std::sync::atomic::Ordering::Relaxed) {
            self.deltas.delta(ModelDelta::Reset);
        }
    }
}

impl ModelDeltas for Counted<'_> {
    fn delta(&self, delta: ModelDelta<'_>) {
        if let ModelDelta::Text(text) = delta
            && text.is_empty()
        {
            return;
        }
        self.sent.store(true, std::sync::atomic::Ordering::Relaxed);
        self.deltas.delta(delta);
    }
}

/// The answer `A` builds from a whole event-stream body, fed in pieces of a few bytes as a network
/// would cut it (the fuzz targets' path; a live call reads the same way, chunk by chunk).
pub(crate) fn assemble<A: Assembler>(body: &[u8], deltas: &dyn ModelDeltas) -> Result<Value, ModelError> {
    let mut reader = SseReader::default();
    let mut assembler = A::default();
    for piece in body.chunks(7) {
        for event in reader.push(piece)? {
            if assembler.event(event.name.as_deref(), &event.data, deltas)? == Flow::Done {
                return assembler.finish();
            }
        }
    }
    Err(ended_early())
}

/// The error of a stream that ended before its final event: cut somewhere between the provider and us,
/// so a connection failure, tried again like one.
pub(crate) fn ended_early() -> ModelError {
    ModelError::Connection("the stream ended before its final event; it was cut off".into())
}

/// The JSON of one event's data, or an invalid response naming the provider.
pub(crate) fn event_json(data: &str) -> Result<Value, ModelError> {
    serde_json::from_str(data).map_err(|e| ModelError::InvalidResponse(format!("a stream event is not JSON ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut reader = SseReader::default();
        chunks.iter().flat_map(|c| reader.push(c).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent { name: name.map(str::to_owned), data: data.to_owned() }
    }

    #[test]
    fn events_are_read_across_chunks_and_line_ends() {
        let got =
            events(&[b"data: {\"a\"", b":1}\n\nevent: x\r\ndata: 1\r\ndata:2\r\n\r\n: ping\n\n", b"data: [DONE]\r\r"]);
        assert_eq!(got, [event(None, "{\"a\":1}"), event(Some("x"), "1\n2"), event(None, "[DONE]")]);
        // An event not ended by a blank line is not an event yet.
        assert_eq!(events(&[b"data: half"]), []);
        // id:, retry: and unknown fields are ignored; an event without data is none.
        assert_eq!(events(&[b"id: 3\nretry: 10\nfoo: bar\n\nevent: only\n\n"]), []);
    }

    #[test]
    fn a_stream_over_the_limit_or_not_utf8_is_an_invalid_response() {
        let mut reader = SseReader::default();
        let big = vec![b'x'; MAX_STREAM_BYTES + 1];
        assert!(matches!(reader.push(&big), Err(ModelError::InvalidResponse(_))));
        let mut reader = SseReader::default();
        assert!(matches!(reader.push(b"data: \xff\n\n"), Err(ModelError::InvalidResponse(_))));
    }
}

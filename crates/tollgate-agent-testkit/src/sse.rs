//! Server-sent events read by hand, as a test client sees them: bytes in as they arrive, frames out.

/// One frame of an SSE stream: its `id:`, `event:` and `data:` fields (`data` lines joined by `\n`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseFrame {
    /// The `id:` field (Tollgate's: the event's seq).
    pub id: Option<String>,
    /// The `event:` field (Tollgate's: the event's kind).
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Splits a stream's bytes into frames. A frame that carries neither data nor an id (a comment, such
/// as a keep-alive) is skipped.
#[derive(Debug, Default)]
pub struct SseFrames {
    buffer: Vec<u8>,
}

impl SseFrames {
    /// Adds the bytes of a chunk as it arrived (a frame may span chunks, even inside a character).
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete frame, `None` until one has arrived whole.
    pub fn next_frame(&mut self) -> Option<SseFrame> {
        while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
            let bytes: Vec<u8> = self.buffer.drain(..end + 2).collect();
            let mut frame = SseFrame::default();
            let mut data = Vec::new();
            for line in String::from_utf8_lossy(&bytes).lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => frame.id = Some(value.to_owned()),
                    "event" => frame.event = Some(value.to_owned()),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
            if data.is_empty() && frame.id.is_none() {
                continue;
            }
            frame.data = data.join("\n");
            return Some(frame);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_whole_across_chunks_and_comments_are_skipped() {
        let mut frames = SseFrames::default();
        frames.push(b": keep-alive\n\nid: 1\nevent: run_started\ndata: {\"a\":");
        assert_eq!(frames.next_frame(), None);
        frames.push(b"\"\xC3");
        frames.push(b"\xA9\"}\n\n");
        let frame = frames.next_frame();
        let expected =
            SseFrame { id: Some("1".into()), event: Some("run_started".into()), data: "{\"a\":\"\u{e9}\"}".into() };
        assert_eq!(frame, Some(expected));
        assert_eq!(frames.next_frame(), None);
    }
}

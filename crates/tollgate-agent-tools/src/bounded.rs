//! Bounded text: everything a tool hands to the model or shows an approver has a size limit, and a cut is
//! always visible as a bracketed marker saying how much was kept of how much.

/// A preview longer than this is cut, with a visible marker.
const MAX_PREVIEW_BYTES: usize = 20_000;

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn prefix_at_char_boundary(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// An approver's preview, cut at [`MAX_PREVIEW_BYTES`] with a marker.
pub(crate) fn cap_preview(text: String) -> String {
    if text.len() <= MAX_PREVIEW_BYTES {
        return text;
    }
    let kept = prefix_at_char_boundary(&text, MAX_PREVIEW_BYTES);
    format!("{kept}\n[preview cut at {} of {} bytes]", kept.len(), text.len())
}

/// Bytes of a stream kept up to a limit, with the stream's full length counted past it.
#[derive(Debug)]
pub(crate) struct CappedBytes {
    kept: Vec<u8>,
    total: u64,
    limit: usize,
}

impl CappedBytes {
    /// An empty buffer that keeps at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self { kept: Vec::new(), total: 0, limit }
    }

    /// Takes the next piece of the stream, keeping what fits.
    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.total += piece.len() as u64;
        let room = self.limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&piece[..piece.len().min(room)]);
    }

    /// True once more bytes arrived than are kept.
    pub(crate) fn is_cut(&self) -> bool {
        self.total > self.kept.len() as u64
    }

    /// True when nothing arrived.
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The bytes kept.
    pub(crate) fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// How many bytes arrived in all.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The kept bytes as text (invalid UTF-8 repaired): how long it is, to share room between streams.
    pub(crate) fn text_len(&self) -> usize {
        String::from_utf8_lossy(&self.kept).len()
    }

    /// The kept bytes as text (invalid UTF-8 repaired) cut to at most `max` bytes, followed by
    /// `[{what} cut: showing N of M bytes]` when less than the whole stream is shown.
    pub(crate) fn text(&self, what: &str, max: usize) -> String {
        let whole = String::from_utf8_lossy(&self.kept);
        let shown = prefix_at_char_boundary(&whole, max);
        let mut text = shown.to_owned();
        if shown.len() < whole.len() || self.is_cut() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("[{what} cut: showing {} of {} bytes]", shown.len(), self.total));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_never_splits_a_character() {
        assert_eq!(prefix_at_char_boundary("héllo", 2), "h");
        assert_eq!(prefix_at_char_boundary("héllo", 3), "hé");
        assert_eq!(prefix_at_char_boundary("abc", 10), "abc");
    }

    #[test]
    fn capped_bytes_keep_the_head_and_count_the_rest() {
        let mut buffer = CappedBytes::new(4);
        buffer.push(b"ab");
        assert!(!buffer.is_cut());
        assert_eq!(buffer.text("stdout", 10), "ab");
        assert_eq!(buffer.text("stdout", 1), "a\n[stdout cut: showing 1 of 2 bytes]");
        buffer.push(b"cdef");
        buffer.push(b"gh");
        assert_eq!(buffer.kept(), b"abcd");
        assert_eq!(buffer.total(), 8);
        assert_eq!(buffer.text_len(), 4);
        assert_eq!(buffer.text("stdout", 10), "abcd\n[stdout cut: showing 4 of 8 bytes]");
    }

    #[test]
    fn long_previews_are_cut_visibly() {
        let preview = cap_preview("x".repeat(MAX_PREVIEW_BYTES + 5));
        assert!(preview.ends_with(&format!("[preview cut at {MAX_PREVIEW_BYTES} of {} bytes]", MAX_PREVIEW_BYTES + 5)));
        assert_eq!(cap_preview("short".to_owned()), "short");
    }
}

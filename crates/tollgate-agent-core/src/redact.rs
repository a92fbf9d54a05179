//! The one redactor: keeps configured secrets — provider keys, bearer tokens, webhook and data keys — out
//! of everything Tollgate stores, serves, prints or logs.
//!
//! A secret is replaced wherever it appears in any of these forms:
//! - as it is, in any ASCII case (`SK-PROJ-…` is the key `sk-proj-…` upper-cased);
//! - hex-encoded (its UTF-8 bytes, lower, upper or mixed case);
//! - base64-encoded, standard or URL-safe alphabet, with or without padding, alone or inside a longer
//!   encoded blob (the characters that encode only the secret's bytes, at each of the three byte offsets
//!   it can sit at);
//! - a long prefix or suffix of it: [`MIN_LONG_FRAGMENT`] characters or more, and at least
//!   [`LONG_FRAGMENT_SHARE`] of the secret (20 of a 32-character key), extended over as much of the
//!   secret as follows or precedes it;
//! - with zero-width characters or soft hyphens inserted (U+200B–U+200D, U+2060, U+FEFF, U+00AD), or
//!   percent-encoded, in whole or in part: the text is searched with those removed and decoded, and what
//!   is replaced is the span of the original text that spelled the secret.
//!
//! And so is a masked echo: what providers print in their errors (`sk-PRO...3456`, `sk-proj-****3456`,
//! `sk-…3456`), that is a mask (`...`, `…`, or two or more `*`) with a prefix of the secret before it and a
//! suffix after it — at least [`MIN_FRAGMENT`] characters of the secret on the two sides together, at
//! least one on each side that has any. All become [`REDACTED`].
//!
//! Secrets shorter than [`MIN_SECRET_LEN`] characters are not searched for: they would match ordinary
//! text. The redactor is applied at the boundaries (a tool's result, a run's error, every event before it
//! is stored, log lines), so what reaches the store, the API and the CLI is already clean. Its searches
//! are built once, in [`Redactor::new`]: one pass over a text finds every form of every secret, and a text
//! with no `%`, zero-width character or soft hyphen is searched as it is, without a copy.
//!
//! A text that arrives in pieces (a model's streamed answer) goes through a [`RedactedStream`]: each piece
//! goes out redacted as soon as no later text can change its redaction, and only the open tail — what
//! could still turn out to be a secret in one of the forms above, or a masked echo of one
//! ([`Redactor::open_tail`]) — waits for more text or the end. The pieces add up to the redaction of the
//! whole text, so no part of a secret split over pieces goes out.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use serde_json::Value;
use std::borrow::Cow;

/// What a secret or a fragment of one is replaced by.
pub const REDACTED: &str = "[redacted]";
/// Secrets shorter than this are not searched for.
pub const MIN_SECRET_LEN: usize = 8;
/// A masked echo must show at least this many characters of the secret to be taken for one.
pub const MIN_FRAGMENT: usize = 4;
/// A prefix or suffix of a secret shown without a mask must be at least this many characters long.
pub const MIN_LONG_FRAGMENT: usize = 12;
/// ... and at least this share of the secret (in percent, rounded up).
pub const LONG_FRAGMENT_SHARE: usize = 60;

/// The configured secrets, and the searches that find them in text.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<String>,
    /// Every form of every secret; `None` without secrets (or, should building it fail, searched for
    /// as they are).
    finder: Option<Finder>,
}

impl PartialEq for Redactor {
    fn eq(&self, other: &Self) -> bool {
        self.secrets == other.secrets
    }
}

impl Eq for Redactor {}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

/// What a pattern of [`Finder::folded`] is.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// A whole secret in some encoding: the match is all there is.
    Whole,
    /// The first characters of secret `n`: the match extends over as much of the secret as follows.
    Prefix(usize),
    /// The last characters of secret `n`: the match extends over as much of the secret as precedes.
    Suffix(usize),
}

/// The searches for every form of the secrets, built once.
#[derive(Clone)]
struct Finder {
    /// The secrets as they are, in hex, and their long prefixes and suffixes, matched ignoring ASCII case.
    folded: AhoCorasick,
    /// What each pattern of `folded` is, by pattern id.
    forms: Vec<Form>,
    /// The base64 forms, where case matters.
    exact: AhoCorasick,
    /// The longest text a pattern matches, in bytes of the searched view.
    longest: usize,
    /// The secrets, longest first, which prefix and suffix matches are extended over.
    secrets: Vec<String>,
    /// For each secret, the last byte a match can start at that runs to the secret's end (a suffix
    /// fragment extended back over what precedes it): 0 when only the whole secret is found.
    latest_start: Vec<usize>,
    /// The encoded forms of the secrets (hex, matched ignoring case; base64, matched as they are), for
    /// [`Finder::open_in_view`].
    encoded: Vec<(Vec<u8>, bool)>,
}

impl Finder {
    fn new(secrets: &[String]) -> Result<Self, aho_corasick::BuildError> {
        let mut folded: Vec<Vec<u8>> = Vec::new();
        let mut forms = Vec::new();
        let mut exact: Vec<Vec<u8>> = Vec::new();
        let mut latest_start = Vec::with_capacity(secrets.len());
        let mut encoded = Vec::new();
        for (n, secret) in secrets.iter().enumerate() {
            let bytes = secret.as_bytes();
            folded.push(bytes.to_vec());
            forms.push(Form::Whole);
            folded.push(hex::encode(bytes).into_bytes());
            forms.push(Form::Whole);
            encoded.push((hex::encode(bytes).into_bytes(), true));
            let mut latest = 0;
            if let Some(len) = long_fragment_len(secret) {
                // On char boundaries, so a match never ends inside a character.
                let head: String = secret.chars().take(len).collect();
                let tail: String = secret.chars().skip(secret.chars().count() - len).collect();
                latest = secret.len() - tail.len();
                folded.push(head.into_bytes());
                forms.push(Form::Prefix(n));
                folded.push(tail.into_bytes());
                forms.push(Form::Suffix(n));
            }
            latest_start.push(latest);
            for form in base64_forms(bytes) {
                if !exact.contains(&form) {
                    encoded.push((form.clone(), false));
                    exact.push(form);
                }
            }
        }
        let longest = secrets.iter().map(|s| 3 * s.len()).max().unwrap_or(0);
        Ok(Self {
            folded: AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::LeftmostLongest)
                .build(&folded)?,
            forms,
            exact: AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&exact)?,
            longest,
            secrets: secrets.to_vec(),
            latest_start,
            encoded,
        })
    }

    /// The length of the longest tail of `view` that more bytes could still make part of a match: a
    /// proper prefix of an encoded form, or of a run of a secret that a match can start at (its start,
    /// or — for a secret found by its suffix — any byte up to [`Finder::latest_start`]). Only tails as
    /// long as a pattern are looked at, and most are ruled out by their first byte.
    fn open_in_view(&self, view: &[u8]) -> usize {
        let mut open = 0;
        for (form, folded) in &self.encoded {
            let same = |a: &u8, b: &u8| if *folded { a.eq_ignore_ascii_case(b) } else { a == b };
            let longest = view.len().min(form.len().saturating_sub(1));
            if let Some(len) = (open + 1..=longest)
                .rev()
                .find(|&len| view[view.len() - len..].iter().zip(&form[..len]).all(|(a, b)| same(a, b)))
            {
                open = len;
            }
        }
        let Some(last) = view.last() else { return 0 };
        for (secret, latest) in self.secrets.iter().zip(&self.latest_start) {
            let secret = secret.as_bytes();
            // The tail is `secret[start..end]` for some `end` short of the secret's end.
            for end in 1..secret.len() {
                if !secret[end - 1].eq_ignore_ascii_case(last) {
                    continue;
                }
                let len = view
                    .iter()
                    .rev()
                    .zip(secret[..end].iter().rev())
                    .take_while(|(a, b)| a.eq_ignore_ascii_case(b))
                    .count();
                if end - len <= *latest {
                    open = open.max(len);
                }
            }
        }
        open
    }

    /// The spans of `view` that spell a secret, in any order, possibly overlapping.
    fn spans(&self, view: &[u8]) -> Vec<(usize, usize)> {
        let secrets = &self.secrets;
        let mut spans = Vec::new();
        for found in self.folded.find_iter(view) {
            let (mut start, mut end) = (found.start(), found.end());
            match self.forms.get(found.pattern().as_usize()) {
                Some(Form::Prefix(n)) => {
                    let secret = secrets[*n].as_bytes();
                    while end < view.len() && end - start < secret.len() {
                        if !view[end].eq_ignore_ascii_case(&secret[end - start]) {
                            break;
                        }
                        end += 1;
                    }
                }
                Some(Form::Suffix(n)) => {
                    let secret = secrets[*n].as_bytes();
                    let mut k = secret.len() - (end - start);
                    while start > 0 && k > 0 && view[start - 1].eq_ignore_ascii_case(&secret[k - 1]) {
                        start -= 1;
                        k -= 1;
                    }
                }
                Some(Form::Whole) | None => {}
            }
            spans.push((start, end));
        }
        spans.extend(self.exact.find_iter(view).map(|found| (found.start(), found.end())));
        spans
    }
}

/// How long a prefix or suffix of `secret` must be to be taken for it; `None` when only the whole
/// secret is (it is too short for a fragment to be told from ordinary text).
fn long_fragment_len(secret: &str) -> Option<usize> {
    let chars = secret.chars().count();
    let len = MIN_LONG_FRAGMENT.max((chars * LONG_FRAGMENT_SHARE).div_ceil(100));
    (len < chars).then_some(len)
}

/// The base64 text that encodes only `bytes`, standard and URL-safe, for each byte offset mod 3 the bytes
/// can start at in a longer encoded value: the characters that also carry bits of a neighbouring byte are
/// left out, so the form is found inside any blob that holds the secret, padded or not.
fn base64_forms(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(6);
    for offset in 0..3 {
        let mut data = vec![0u8; offset];
        data.extend_from_slice(bytes);
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&data);
        // Character j carries bits 6j..6j+6 of the data; keep those entirely within the secret's bits.
        let first = (8 * offset).div_ceil(6);
        let last = 8 * data.len() / 6;
        let Some(core) = encoded.get(first..last) else { continue };
        let url_safe: String = core
            .chars()
            .map(|c| match c {
                '+' => '-',
                '/' => '_',
                c => c,
            })
            .collect();
        for form in [core.as_bytes().to_vec(), url_safe.into_bytes()] {
            if !out.contains(&form) {
                out.push(form);
            }
        }
    }
    out
}

/// Characters removed before searching: they show as nothing and would split a secret.
fn is_ignorable(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}')
}

/// A text as it is searched: without zero-width characters and soft hyphens, with `%XX` decoded; and for
/// each byte of it, the span of the original text it came from (none when the text is searched as it is).
struct View<'a> {
    bytes: Cow<'a, [u8]>,
    origin: Option<Vec<(usize, usize)>>,
}

impl<'a> View<'a> {
    fn of(text: &'a str) -> Self {
        let plain = !text.contains('%') && !text.chars().any(is_ignorable);
        if plain {
            return Self { bytes: Cow::Borrowed(text.as_bytes()), origin: None };
        }
        let raw = text.as_bytes();
        let mut bytes = Vec::with_capacity(raw.len());
        let mut origin = Vec::with_capacity(raw.len());
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            if is_ignorable(c) {
                continue;
            }
            if c == '%'
                && let (Some(high), Some(low)) =
                    (raw.get(at + 1).and_then(hex_digit), raw.get(at + 2).and_then(hex_digit))
            {
                bytes.push(high << 4 | low);
                origin.push((at, at + 3));
                chars.next();
                chars.next();
                continue;
            }
            for (i, byte) in c.to_string().bytes().enumerate() {
                bytes.push(byte);
                origin.push((at + i, at + i + 1));
            }
        }
        Self { bytes: Cow::Owned(bytes), origin: Some(origin) }
    }

    /// Where byte `at` of the view starts in the original `text` (its end for the view's end).
    fn start_of(&self, text: &str, at: usize) -> usize {
        match &self.origin {
            None => at,
            Some(origin) => origin.get(at).map_or(text.len(), |(start, _)| *start),
        }
    }

    /// The span of the original text that `start..end` of the view came from.
    fn original(&self, start: usize, end: usize) -> (usize, usize) {
        match &self.origin {
            None => (start, end),
            Some(origin) => (origin[start].0, origin[end - 1].1),
        }
    }
}

fn hex_digit(byte: &u8) -> Option<u8> {
    char::from(*byte).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Widens `start..end` to the nearest character boundaries of `text`.
fn on_char_boundaries(text: &str, mut start: usize, mut end: usize) -> (usize, usize) {
    while start > 0 && !text.is_char_boundary(start) {
        start -= 1;
    }
    while end < text.len() && !text.is_char_boundary(end) {
        end += 1;
    }
    (start, end)
}

impl Redactor {
    /// A redactor for these secrets (short and empty ones are dropped). Builds the searches for every
    /// form of them once.
    pub fn new<I, S>(secrets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> =
            secrets.into_iter().map(Into::into).filter(|s| s.chars().count() >= MIN_SECRET_LEN).collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        let finder = if secrets.is_empty() {
            None
        } else {
            match Finder::new(&secrets) {
                Ok(finder) => Some(finder),
                Err(error) => {
                    // Never seen with secrets of sane size; the secrets are still replaced as they are.
                    tracing::error!(%error, "the redactor's search for encoded secrets could not be built");
                    None
                }
            }
        };
        Self { secrets, finder }
    }

    /// True when there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The length of the longest text a secret is found in, in characters (0 with none): its
    /// percent-encoded form, three characters per byte. A stream held back this much never lets part of
    /// a secret out before the whole is seen.
    pub fn longest_secret(&self) -> usize {
        match &self.finder {
            Some(finder) => finder.longest,
            None => self.secrets.iter().map(|s| s.chars().count()).max().unwrap_or(0),
        }
    }

    /// `text` with every secret, in every form, and masked fragment of one replaced; borrowed when
    /// nothing was found.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.secrets.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out: Cow<'a, str> = match &self.finder {
            Some(finder) => Self::replace_spans(text, finder),
            None => {
                let mut out = Cow::Borrowed(text);
                for secret in &self.secrets {
                    if out.contains(secret.as_str()) {
                        out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
                    }
                }
                out
            }
        };
        if has_mask(&out) {
            let masked = self.redact_fragments(&out);
            if let Some(masked) = masked {
                out = Cow::Owned(masked);
            }
        }
        out
    }

    fn replace_spans<'a>(text: &'a str, finder: &Finder) -> Cow<'a, str> {
        let spans = Self::spans_in(text, &View::of(text), finder);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        Cow::Owned(Replaced::of(text, &spans).text)
    }

    /// The spans of `text` (seen as `view`) that spell a secret in some form, on char boundaries, sorted.
    fn spans_in(text: &str, view: &View<'_>, finder: &Finder) -> Vec<(usize, usize)> {
        let mut spans: Vec<(usize, usize)> = finder
            .spans(&view.bytes)
            .into_iter()
            .map(|(start, end)| view.original(start, end))
            .map(|(start, end)| on_char_boundaries(text, start, end))
            .collect();
        spans.sort_unstable();
        spans
    }

    /// Redacts `text` in place.
    pub fn redact_string(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// Redacts every string in a JSON value (object keys included), in place.
    pub fn redact_value(&self, value: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match value {
            Value::String(text) => self.redact_string(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.redact_value(item)),
            Value::Object(map) => {
                let dirty_keys = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if dirty_keys {
                    let entries = std::mem::take(map);
                    for (key, mut item) in entries {
                        self.redact_value(&mut item);
                        map.insert(self.redact(&key).into_owned(), item);
                    }
                } else {
                    map.values_mut().for_each(|item| self.redact_value(item));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Replaces `prefix MASK suffix` runs that show a fragment of a secret; `None` when there is none.
    fn redact_fragments(&self, text: &str) -> Option<String> {
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        let mut rest = text;
        while let Some((start, len)) = next_mask(rest) {
            let before = &rest[..start];
            let after = &rest[start + len..];
            let left_len = before.chars().rev().take_while(|c| is_token_char(*c)).map(char::len_utf8).sum::<usize>();
            let right_len = after.chars().take_while(|c| is_token_char(*c)).map(char::len_utf8).sum::<usize>();
            let left = &before[before.len() - left_len..];
            let right = &after[..right_len];
            if self.shows_fragment(left, right) {
                out.push_str(&before[..before.len() - left_len]);
                out.push_str(REDACTED);
                rest = &after[right_len..];
                changed = true;
            } else {
                out.push_str(&rest[..start + len]);
                rest = after;
            }
        }
        out.push_str(rest);
        changed.then_some(out)
    }

    fn shows_fragment(&self, left: &str, right: &str) -> bool {
        if left.len() + right.len() < MIN_FRAGMENT {
            return false;
        }
        self.secrets.iter().any(|secret| {
            let prefix_ok = left.is_empty() || (secret.starts_with(left) && left.len() < secret.len());
            let suffix_ok = right.is_empty() || (secret.ends_with(right) && right.len() < secret.len());
            prefix_ok && suffix_ok
        })
    }
}

/// A text with spans replaced by [`REDACTED`] (overlapping spans as one), and where each replacement
/// ends in it and in the original, so that a position after a replacement maps back.
struct Replaced {
    text: String,
    /// `(end in text, end in the original)` of each replacement, in order.
    ends: Vec<(usize, usize)>,
}

impl Replaced {
    /// `text` with `spans` (sorted, on char boundaries, within `text`) replaced.
    fn of(text: &str, spans: &[(usize, usize)]) -> Self {
        let mut out = String::with_capacity(text.len());
        let mut ends: Vec<(usize, usize)> = Vec::new();
        let mut at = 0;
        for &(start, end) in spans {
            if end <= at {
                continue;
            }
            if start >= at {
                out.push_str(&text[at..start]);
                out.push_str(REDACTED);
                ends.push((out.len(), end));
            } else if let Some(last) = ends.last_mut() {
                last.1 = end;
            }
            at = end;
        }
        out.push_str(&text[at..]);
        Self { text: out, ends }
    }

    /// Where position `at` of the replaced text (not inside a replacement) is in the original.
    fn original(&self, at: usize) -> usize {
        match self.ends.iter().rev().find(|(end, _)| *end <= at) {
            Some(&(end, original_end)) => original_end + (at - end),
            None => at,
        }
    }
}

/// True for a character after which a text's redaction can be split: no form of a secret and no masked
/// echo runs across it once it is past the open tail. Not a token character (an echo's sides), not a mask
/// character, not `%` (an escape's start) and not one the search ignores.
fn is_split_point(c: char) -> bool {
    !is_token_char(c) && !matches!(c, '.' | '*' | '…' | '%') && !is_ignorable(c)
}

/// Where a text that ends with an incomplete percent-escape (`%` or `%X`) has its `%`.
fn open_escape(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    match bytes {
        [.., b'%'] => Some(bytes.len() - 1),
        [.., b'%', digit] if digit.is_ascii_hexdigit() => Some(bytes.len() - 2),
        _ => None,
    }
}

/// What of a text can be redacted for good ([`Redactor::settle`]).
struct Settled {
    /// The redaction of the text up to `stable`: the start of the redaction of the text with anything
    /// after it.
    text: String,
    /// Where the settled part ends in the original text.
    stable: usize,
    /// A point of the text, at or before `stable`, that its redaction can be split at whatever follows:
    /// the redaction of the whole is that of the text before it, then that of the rest.
    split: usize,
    /// The length of the redaction of the text before `split` (the start of `text`).
    split_redacted: usize,
}

impl Redactor {
    /// The length in bytes of the tail of `text` whose redaction more text could still change: the
    /// longest tail that is the start of a secret in a form the redactor finds (as it is, in another case,
    /// hex, base64, percent-encoded, a long suffix extended back over what precedes it) or of a masked
    /// echo of one, back to where the text can be split. Everything before it redacts the same whatever
    /// follows. 0 without secrets; all of `text` should the searches not have been built.
    pub fn open_tail(&self, text: &str) -> usize {
        if self.secrets.is_empty() {
            return 0;
        }
        self.settle(text).map_or(text.len(), |settled| text.len() - settled.stable)
    }

    /// The part of `text` whose redaction no continuation can change, redacted; `None` when the searches
    /// could not be built (then nothing is settled before the text ends).
    fn settle(&self, text: &str) -> Option<Settled> {
        let finder = self.finder.as_ref()?;
        // Where the searched forms could still change: the open tail of the searched view, before an
        // incomplete escape, and never inside a span found already.
        let view = View::of(text);
        let mut cut = view.start_of(text, view.bytes.len() - finder.open_in_view(&view.bytes));
        if let Some(escape) = open_escape(text) {
            let before = View::of(&text[..escape]);
            let open = before.start_of(&text[..escape], before.bytes.len() - finder.open_in_view(&before.bytes));
            cut = cut.min(escape).min(open);
        }
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let spans = Self::spans_in(text, &view, finder);
        while let Some(&(start, _)) = spans.iter().find(|&&(start, end)| start < cut && cut < end) {
            cut = start;
        }
        let kept: Vec<(usize, usize)> = spans.into_iter().filter(|&(start, _)| start < cut).collect();
        let replaced = Replaced::of(&text[..cut], &kept);
        // Masked echoes: the replaced text splits after a split point; what follows the last one is
        // held while it could still be (part of) an echo.
        let split =
            replaced.text.char_indices().rev().find(|&(_, c)| is_split_point(c)).map_or(0, |(at, c)| at + c.len_utf8());
        let stable = split + self.settled_in_run(&replaced.text[split..]);
        let head = self.redact_echoes(&replaced.text[..split]);
        let tail = self.redact_echoes(&replaced.text[split..stable]);
        let split_redacted = head.len();
        Some(Settled {
            text: head.into_owned() + &tail,
            stable: replaced.original(stable),
            split: replaced.original(split),
            split_redacted,
        })
    }

    /// How much of `run` (replaced text after a split point, with no split point in it) is settled
    /// against masked echoes: all of it, unless its last token run could still be (part of) an echo of a
    /// secret — the start of one (a proper prefix of a secret), or after a mask or another non-token
    /// character, part of the suffix an echo shows. Then what follows the token run before that gap is
    /// held, or all of `run` when that token run could itself be an echo's start.
    fn settled_in_run(&self, run: &str) -> usize {
        let starts_a_secret =
            |t: &str| !t.is_empty() && self.secrets.iter().any(|s| s.len() > t.len() && s.starts_with(t));
        let token_run_start = |end: usize| {
            run[..end].char_indices().rev().find(|&(_, c)| !is_token_char(c)).map(|(at, c)| at + c.len_utf8())
        };
        let Some(last_start) = token_run_start(run.len()) else {
            // One token run: it could only be the side before a mask.
            return if starts_a_secret(run) { 0 } else { run.len() };
        };
        let last = &run[last_start..];
        if !last.is_empty() && !starts_a_secret(last) && !self.secrets.iter().any(|s| s.contains(last)) {
            return run.len();
        }
        let gap_start = run[..last_start]
            .char_indices()
            .rev()
            .find(|&(_, c)| is_token_char(c))
            .map_or(0, |(at, c)| at + c.len_utf8());
        let before = &run[token_run_start(gap_start).unwrap_or(0)..gap_start];
        if before.is_empty() || starts_a_secret(before) { 0 } else { gap_start }
    }

    /// `text` with its masked echoes redacted (the second step of [`Redactor::redact`]).
    fn redact_echoes<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match has_mask(text).then(|| self.redact_fragments(text)).flatten() {
            Some(clean) => Cow::Owned(clean),
            None => Cow::Borrowed(text),
        }
    }
}

/// A text redacted as it arrives in pieces — a model's streamed answer. Each piece given in goes out as
/// soon as no continuation can change its redaction; the tail that could still become a secret (the
/// [`Redactor::open_tail`]) is held until more text settles it or the text ends. What
/// [`push`](Self::push) and [`finish`](Self::finish) return, concatenated, is exactly
/// [`Redactor::redact`] of the whole text, so no part of a secret split over pieces ever goes out.
///
/// Only the text since the last point its redaction can be split at (after a space or most punctuation)
/// is kept and searched again with each piece, so prose costs the same per piece however long it gets.
/// A long run with no such point (a hex blob) is searched again only once it grew by a quarter beyond
/// [`RedactedStream::RESETTLE_FREELY`] bytes, so it costs a few searches of itself, not one per piece.
#[derive(Debug, Default)]
pub struct RedactedStream {
    /// The text received since the last split point, as received.
    pending: String,
    /// How many bytes of the redaction of `pending` went out.
    sent: usize,
    /// How long `pending` was when it was last settled.
    settled_len: usize,
}

impl RedactedStream {
    /// Up to this many bytes since the last split point, the text is settled again with every piece.
    pub const RESETTLE_FREELY: usize = 4096;

    /// Takes the next `piece` of the text; returns what of the redacted text may go out now (often all
    /// of it, possibly nothing).
    pub fn push(&mut self, redactor: &Redactor, piece: &str) -> String {
        if redactor.is_empty() {
            return piece.to_owned();
        }
        self.pending.push_str(piece);
        let grown = self.pending.len().saturating_sub(self.settled_len);
        if self.pending.len() > Self::RESETTLE_FREELY && grown < self.pending.len() / 4 {
            return String::new();
        }
        let Some(settled) = redactor.settle(&self.pending) else { return String::new() };
        let out = settled.text.get(self.sent..).unwrap_or_default().to_owned();
        let sent = self.sent.max(settled.text.len());
        self.pending.drain(..settled.split);
        self.sent = sent - settled.split_redacted;
        self.settled_len = self.pending.len();
        out
    }

    /// The text ended: what of its redaction has not gone out yet. The stream is empty after it.
    pub fn finish(&mut self, redactor: &Redactor) -> String {
        let rest = redactor.redact(&self.pending).get(self.sent..).unwrap_or_default().to_owned();
        *self = Self::default();
        rest
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn has_mask(text: &str) -> bool {
    text.contains("..") || text.contains('…') || text.contains("**")
}

/// The byte offset and length of the next mask run (`..`+, `…`+, `**`+) in `text`.
fn next_mask(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let run = |unit: &[u8], min: usize| {
            let mut n = 0;
            while bytes[i + n * unit.len()..].starts_with(unit) {
                n += 1;
            }
            (n >= min).then_some(n * unit.len())
        };
        let found = match bytes[i] {
            b'.' => run(b".", 2),
            b'*' => run(b"*", 2),
            0xE2 => run("…".as_bytes(), 1),
            _ => None,
        };
        if let Some(len) = found {
            return Some((i, len));
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "sk-PROJ-abcdefghij123456";

    fn redactor() -> Redactor {
        Redactor::new([KEY, "tok-en-0987654321", "short"])
    }

    #[test]
    fn whole_secrets_are_replaced() {
        let r = redactor();
        assert_eq!(r.redact(&format!("key={KEY}; again {KEY}")), "key=[redacted]; again [redacted]");
        assert_eq!(r.redact("Bearer tok-en-0987654321"), "Bearer [redacted]");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(r.redact("short is too short to look for"), "short is too short to look for");
    }

    #[test]
    fn masked_echoes_are_replaced() {
        let r = redactor();
        for echo in ["sk-PRO...3456", "sk-PROJ-****3456", "sk-…3456", "sk-PROJ-ab**********", "...123456"] {
            let text = format!("Incorrect API key provided: {echo}. See the docs.");
            assert_eq!(r.redact(&text), "Incorrect API key provided: [redacted]. See the docs.", "{echo}");
        }
        for harmless in ["wait...", "a ** b", "sk-ABC...9999", "x...y", "loading…done"] {
            assert_eq!(r.redact(harmless), harmless);
        }
    }

    #[test]
    fn json_values_are_cleaned_everywhere() {
        let r = redactor();
        let mut value = json!({"error": {"message": format!("bad key {KEY}")}, "list": ["sk-PRO...3456", 7],
                               KEY: true});
        r.redact_value(&mut value);
        assert_eq!(
            value,
            json!({"error": {"message": "bad key [redacted]"}, "list": ["[redacted]", 7],
                                 "[redacted]": true})
        );
    }

    /// A 32-character token, as a webhook secret or a bearer token is.
    const TOKEN: &str = "tok-9f8e7d6c5b4a39281706f5e4d3c2";

    fn token_redactor() -> Redactor {
        Redactor::new([TOKEN])
    }

    fn assert_hidden(text: &str) {
        let clean = token_redactor().redact(text);
        assert!(clean.contains(REDACTED), "nothing was redacted in {text:?}: {clean:?}");
        let lower = clean.to_ascii_lowercase();
        for part in [&TOKEN[..10], &TOKEN[TOKEN.len() - 10..]] {
            assert!(!lower.contains(part), "{part:?} is still in {clean:?}");
        }
    }

    #[test]
    fn a_secret_with_inserted_invisible_characters_is_replaced_with_them() {
        for hidden in ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{00AD}'] {
            let spelled = format!("{}{hidden}{}{hidden}{}", &TOKEN[..5], &TOKEN[5..20], &TOKEN[20..]);
            let text = format!("key: {spelled} end");
            assert_eq!(token_redactor().redact(&text), "key: [redacted] end", "U+{:04X}", u32::from(hidden));
        }
    }

    #[test]
    fn a_secret_in_another_case_is_replaced() {
        assert_eq!(token_redactor().redact(&format!("k={}", TOKEN.to_ascii_uppercase())), "k=[redacted]");
        let mixed: String =
            TOKEN.chars().enumerate().map(|(i, c)| if i % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
        assert_eq!(token_redactor().redact(&format!("k={mixed}.")), "k=[redacted].");
    }

    #[test]
    fn a_hex_encoded_secret_is_replaced_in_either_case() {
        let lower = hex::encode(TOKEN);
        assert_eq!(token_redactor().redact(&format!("x {lower} y")), "x [redacted] y");
        assert_eq!(token_redactor().redact(&format!("x {} y", lower.to_ascii_uppercase())), "x [redacted] y");
    }

    #[test]
    fn a_percent_encoded_secret_is_replaced_whole_or_in_part() {
        let every_byte: String = TOKEN.bytes().map(|b| format!("%{b:02X}")).collect();
        assert_eq!(token_redactor().redact(&format!("?t={every_byte}&a=1")), "?t=[redacted]&a=1");
        let dashes = TOKEN.replace('-', "%2d");
        assert_eq!(token_redactor().redact(&format!("?t={dashes}&a=1")), "?t=[redacted]&a=1");
        assert_eq!(token_redactor().redact("100% sure, 50%off"), "100% sure, 50%off");
    }

    #[test]
    fn a_base64_encoded_secret_is_replaced_in_every_alphabet_and_at_every_offset() {
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
        // A secret whose encodings hold `+` and `/`, so the two alphabets differ.
        let secret = "key?>?>~~~-0123456789";
        let r = Redactor::new([secret]);
        for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
            let alone = engine.encode(secret);
            assert_eq!(r.redact(&format!("b={alone};")), "b=[redacted];", "{alone}");
            // Inside a longer blob, at each byte offset mod 3 (a basic-auth header, a JSON config).
            for before in ["", "a", "ab", "user:", "{\"key\":\""] {
                let blob = engine.encode(format!("{before}{secret} and more after it"));
                let header = format!("Authorization: Basic {blob}");
                let clean = r.redact(&header);
                assert!(clean.contains(REDACTED), "{before:?}: {blob} -> {clean}");
                let inner = engine.encode(secret);
                assert!(!clean.contains(&inner[2..inner.len() - 3]), "{before:?}: {clean}");
            }
        }
        assert_eq!(r.redact("aGVsbG8gd29ybGQ="), "aGVsbG8gd29ybGQ=", "other base64 is left alone");
    }

    #[test]
    fn a_long_prefix_or_suffix_of_a_secret_is_replaced() {
        assert_eq!(long_fragment_len(TOKEN), Some(20), "20 of 32 characters");
        assert_eq!(token_redactor().redact(&format!("k={} end", &TOKEN[..20])), "k=[redacted] end");
        assert_eq!(token_redactor().redact(&format!("k={} end", &TOKEN[..26])), "k=[redacted] end", "all of it");
        assert_eq!(token_redactor().redact(&format!("k={} end", &TOKEN[12..])), "k=[redacted] end");
        assert_eq!(
            token_redactor().redact(&format!("k={} end", &TOKEN[..19])),
            format!("k={} end", &TOKEN[..19]),
            "a shorter prefix could be ordinary text"
        );
        assert_eq!(long_fragment_len("abcdefghijkl"), None, "a 12-character secret is matched only whole");
        assert_eq!(long_fragment_len("abcdefghijklm"), Some(12));
    }

    #[test]
    fn every_form_together_and_ordinary_text_untouched() {
        let text = format!("a {} b {} c {}", TOKEN.to_uppercase(), hex::encode(TOKEN), &TOKEN[..22]);
        assert_eq!(token_redactor().redact(&text), "a [redacted] b [redacted] c [redacted]");
        let ordinary = "tok-9 tokens, 9f8e7 hex, the quick brown fox, dG9r, 746f6b";
        assert!(matches!(token_redactor().redact(ordinary), Cow::Borrowed(_)));
        assert_hidden(&format!("{}\u{200B}{}", &TOKEN[..3], &TOKEN[3..]));
    }

    #[test]
    fn debug_shows_no_secret() {
        assert_eq!(format!("{:?}", redactor()), "Redactor(2 secrets)");
    }

    /// A 164-character project key, as providers issue them.
    fn long_key() -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let body: String = (0..156).map(|i| char::from(ALPHABET[(i * 37 + 11) % ALPHABET.len()])).collect();
        format!("sk-proj-{body}")
    }

    #[test]
    fn the_open_tail_is_only_what_could_still_become_a_secret() {
        let key = long_key();
        assert_eq!(key.len(), 164);
        let r = Redactor::new([key.as_str()]);
        assert_eq!(Redactor::default().open_tail("anything sk-"), 0, "nothing without secrets");
        // Ordinary prose: nothing, or a character or two that could start a run of the key, is held.
        for text in ["I will write a short note. ", "Saving the note now", "done"] {
            assert!(r.open_tail(text) <= 2, "{text:?}: {}", r.open_tail(text));
        }
        assert_eq!(r.open_tail("The sentence ends."), 1, "an ellipsis may follow");
        // The start of the key, in any of its forms, is held from its first character...
        let hex = hex::encode(&key);
        for (before, start) in [
            ("your key is ", &key[..30]),
            ("your key is ", &key[..3]),
            ("hex: ", &hex[..40]),
            ("hex: ", &hex.to_ascii_uppercase()[..41]),
            ("encoded: ", &base64::engine::general_purpose::STANDARD.encode(&key)[..50]),
            ("in a url: ?k=", "sk-proj%2"),
            ("echoed: ", &format!("{}...{}", &key[..6], &key[key.len() - 2..])),
        ] {
            let text = format!("{before}{start}");
            assert_eq!(r.open_tail(&text), start.len(), "{text:?}");
        }
        // ... and settled once it is whole and followed by other text (its redaction cannot change).
        assert!(r.open_tail(&format!("key {key}, and")) <= 3);
    }

    /// Pieces of a text that would trip a stream up: every form of the secrets whole, their starts and
    /// ends, masks, escapes, invisible and multi-byte characters, and prose.
    fn stream_vocabulary() -> Vec<String> {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let percent: String = TOKEN.bytes().map(|b| format!("%{b:02X}")).collect();
        vec![
            TOKEN.to_owned(),
            TOKEN.to_ascii_uppercase(),
            hex::encode(TOKEN),
            hex::encode(TOKEN).to_ascii_uppercase(),
            STANDARD.encode(TOKEN),
            URL_SAFE_NO_PAD.encode(format!("user:{TOKEN}")),
            percent,
            TOKEN.replace('-', "%2d"),
            format!("{}\u{200B}{}", &TOKEN[..7], &TOKEN[7..]),
            TOKEN[..20].to_owned(),
            TOKEN[..9].to_owned(),
            TOKEN[12..].to_owned(),
            TOKEN[25..].to_owned(),
            format!("{}...{}", &TOKEN[..5], &TOKEN[28..]),
            format!("{}****{}", &TOKEN[..8], &TOKEN[30..]),
            format!("…{}", &TOKEN[26..]),
            KEY.to_owned(),
            "sk-PRO".to_owned(),
            "3456".to_owned(),
            "hello ".to_owned(),
            "world".to_owned(),
            ". ".to_owned(),
            "...".to_owned(),
            ".".to_owned(),
            "**".to_owned(),
            "…".to_owned(),
            "%".to_owned(),
            "%4".to_owned(),
            "100% ".to_owned(),
            "\u{200B}".to_owned(),
            "é".to_owned(),
            "日本".to_owned(),
            "\n".to_owned(),
            "[x]".to_owned(),
            "-".to_owned(),
            "_".to_owned(),
            ":".to_owned(),
        ]
    }

    /// The pieces a stream gives out for `text` cut at `cuts` (char indices), then its end.
    fn streamed(r: &Redactor, text: &str, cuts: &[usize]) -> Vec<String> {
        let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).chain([text.len()]).collect();
        let mut points: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
        points.extend([0, text.len()]);
        points.sort_unstable();
        points.dedup();
        let mut stream = RedactedStream::default();
        let mut out: Vec<String> = points.windows(2).map(|w| stream.push(r, &text[w[0]..w[1]])).collect();
        out.push(stream.finish(r));
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

        /// However a text is cut into pieces, what a stream gives out adds up to its redaction.
        #[test]
        fn a_streams_pieces_add_up_to_the_redacted_text(
            picks in proptest::collection::vec(0usize..64, 1..24),
            cuts in proptest::collection::vec(0usize..10_000, 0..40),
        ) {
            let vocabulary = stream_vocabulary();
            let text: String = picks.iter().map(|p| vocabulary[p % vocabulary.len()].as_str()).collect();
            let r = Redactor::new([TOKEN, KEY]);
            let out = streamed(&r, &text, &cuts);
            proptest::prop_assert_eq!(out.concat(), r.redact(&text).into_owned(), "pieces {:?}", out);
        }
    }

    /// A run with no split point longer than [`RedactedStream::RESETTLE_FREELY`] (a blob of hex) is
    /// settled now and then rather than with every piece: its text still goes out before it ends, and the
    /// pieces still add up to the redacted text, a key inside it redacted.
    #[test]
    fn a_long_run_without_split_points_still_streams_and_adds_up() {
        let key = long_key();
        let r = Redactor::new([key.as_str()]);
        let noise =
            |n: usize| -> String { (0..n).map(|i| char::from(b"0123456789abcdef"[(i * 7 + 3) % 16])).collect() };
        let text = format!("{}{key}{}{}", noise(9000), noise(5000), hex::encode(&key));
        let chars: Vec<char> = text.chars().collect();
        let mut stream = RedactedStream::default();
        let mut out: Vec<String> = chars.chunks(5).map(|c| stream.push(&r, &c.iter().collect::<String>())).collect();
        let before_the_end: usize = out.iter().map(String::len).sum();
        out.push(stream.finish(&r));
        assert_eq!(out.concat(), r.redact(&text));
        assert_eq!(out.concat(), format!("{}{REDACTED}{}{REDACTED}", noise(9000), noise(5000)));
        assert!(before_the_end > 9000, "only {before_the_end} bytes went out before the end");
    }

    /// A 164-character key said whole, in several forms, over pieces cut anywhere: no piece ever holds
    /// 8 characters of it or of an encoding of it, and the pieces add up to the redacted text.
    #[test]
    fn no_piece_of_a_long_key_goes_out_however_the_text_is_cut() {
        use base64::engine::general_purpose::STANDARD;
        let key = long_key();
        let r = Redactor::new([key.as_str()]);
        let forms = [key.to_ascii_lowercase(), hex::encode(&key), STANDARD.encode(&key).to_ascii_lowercase()];
        let text = format!(
            "Here is the key: {key}. In hex {} and base64 {}, upper {} and echoed {}...{} — that is all, \
             said at some length so that the text goes on after it.",
            hex::encode(&key),
            STANDARD.encode(&key),
            key.to_ascii_uppercase(),
            &key[..8],
            &key[key.len() - 4..]
        );
        let redacted = r.redact(&text).into_owned();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200 {
            let cuts: Vec<usize> = (0..60)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    usize::try_from(seed % 1000).unwrap_or(0)
                })
                .collect();
            let out = streamed(&r, &text, &cuts);
            assert_eq!(out.concat(), redacted);
            for piece in &out {
                let lower = piece.to_ascii_lowercase();
                for form in &forms {
                    for at in 0..form.len() - 8 {
                        assert!(!lower.contains(&form[at..at + 8]), "{piece:?} holds part of the key");
                    }
                }
            }
        }
    }
}
